package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/examples/mcpdemo"
	"github.com/countersign/countersign/internal/mcp/catalog"
)

// flooded is the demo listing with n more tools, one new definition each.
func flooded(base []catalog.Listed, n int) []catalog.Listed { return floodedAs(base, "flood", n) }

func floodedAs(base []catalog.Listed, prefix string, n int) []catalog.Listed {
	out := append([]catalog.Listed(nil), base...)
	for i := range n {
		out = append(out, catalog.Listed{Name: fmt.Sprintf("%s_%03d", prefix, i), Description: "One more.",
			InputSchema: []byte(`{"type":"object","properties":{},"additionalProperties":false}`)})
	}
	return out
}

func countAudit(t *testing.T, f *fixture, kind string) int {
	t.Helper()
	var n int
	if err := f.db.SQL().QueryRow(`SELECT COUNT(*) FROM audit WHERE kind = ?`, kind).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAFloodOfDefinitionsQuarantinesTheServer: a server that lists a new
// definition after every listing pins at most MaxUnreviewed definitions
// awaiting review, each listing announced by one notice whatever it
// pinned; the listing beyond the bound pins nothing and quarantines the
// server whole (one audit entry, one notice, no tool callable, however
// many listings follow) until an admin lifts the quarantine.
func TestAFloodOfDefinitionsQuarantinesTheServer(t *testing.T) {
	ctx := context.Background()
	f := openWith(t, filepath.Join(t.TempDir(), "c.db"), catalog.Config{Notifier: router(t)})
	base := listing(t, mcpdemo.Options{})
	if err := f.cat.Apply(ctx, "demo", base); err != nil {
		t.Fatal(err)
	}
	// One listing pinning 6 pending definitions is announced once.
	if evs := reviewEvents(t, f.db); len(evs) != 1 || len(evs["demo/*"]) != 2 || evs["demo/*"][0].Data.URL != "https://cs.example.com/admin/mcp" ||
		!strings.Contains(evs["demo/*"][0].Data.Reason, "6 definitions") {
		t.Fatalf("the first listing's notices: %v", evs)
	}
	add := entries(f)["add"]
	if err := f.cat.Review(ctx, "demo", "add", add.Digest, "root", true); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.reg.Tool("demo/add"); !ok {
		t.Fatal("approved add is not callable")
	}

	// 6 pending and one unmirrorable: 43 more fit, the 44th does not.
	const listings = 200
	for i := 1; i <= listings; i++ {
		if err := f.cat.Apply(ctx, "demo", flooded(base, i)); err != nil {
			t.Fatalf("listing %d: %v", i, err)
		}
	}
	pins, err := f.db.Catalog().Definitions(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	pending := 0
	for _, p := range pins {
		if p.Status == catalog.Pending {
			pending++
		}
	}
	if pending > catalog.MaxUnreviewed || len(pins) > catalog.MaxUnreviewed+3 {
		t.Fatalf("%d definitions pinned, %d pending, after %d listings; want at most %d pending", len(pins), pending, listings, catalog.MaxUnreviewed)
	}
	if n := countAudit(t, f, catalog.KindDefinitionSeen); n > catalog.MaxUnreviewed+1 {
		t.Errorf("%d definitions audited, want at most %d", n, catalog.MaxUnreviewed+1)
	}
	if n := countAudit(t, f, catalog.KindServerQuarantined); n != 1 {
		t.Errorf("%d quarantine audit entries, want 1", n)
	}
	// One event per listing that pinned something (each on two channels),
	// plus the quarantine's.
	evs := reviewEvents(t, f.db)
	total := 0
	for tool, es := range evs {
		if tool != "demo/*" && !strings.HasPrefix(tool, "demo/flood_") {
			t.Errorf("an event for %s", tool)
		}
		total += len(es)
	}
	if total/2 > catalog.MaxUnreviewed {
		t.Errorf("%d review events after %d listings, want at most %d", total/2, listings, catalog.MaxUnreviewed)
	}
	quarantined := 0
	for _, ev := range evs["demo/*"] {
		if strings.Contains(ev.Data.Reason, "quarantined") {
			quarantined++
		}
	}
	if quarantined != 2 {
		t.Errorf("%d quarantine notices, want one event on two channels", quarantined)
	}
	// Nothing of the server is callable, the approved add included.
	if !f.cat.Quarantined("demo") {
		t.Fatal("the server is not quarantined")
	}
	if _, ok := f.reg.Tool("demo/add"); ok {
		t.Error("approved add is callable on a quarantined server")
	}

	// The server lists its own tools again, still quarantined. An admin
	// lifts it: what is still pending and no longer listed is rejected;
	// the approved tool is served again, and the next flood quarantines
	// the server again.
	if err := f.cat.Apply(ctx, "demo", base); err != nil || !f.cat.Quarantined("demo") {
		t.Fatalf("a listing while quarantined: %v, quarantined %v", err, f.cat.Quarantined("demo"))
	}
	if err := f.cat.Release(ctx, "demo", ""); err == nil {
		t.Error("a release without an admin's name")
	}
	if err := f.cat.Release(ctx, "demo", "root"); err != nil {
		t.Fatal(err)
	}
	if err := f.cat.Release(ctx, "demo", "root"); !errors.Is(err, catalog.ErrNotQuarantined) {
		t.Errorf("a second release: %v", err)
	}
	if countAudit(t, f, catalog.KindServerReleased) != 1 {
		t.Error("the release is not audited")
	}
	if err := f.cat.Apply(ctx, "demo", base); err != nil {
		t.Fatal(err)
	}
	if f.cat.Quarantined("demo") {
		t.Fatal("still quarantined after the release")
	}
	if _, ok := f.reg.Tool("demo/add"); !ok {
		t.Error("approved add is not callable after the release")
	}
	if p := entries(f)["scale"]; p.Status != catalog.Pending {
		t.Errorf("scale, still listed, is %s after the release, want pending", p.Status)
	}
	if err := f.cat.Apply(ctx, "demo", floodedAs(base, "again", catalog.MaxUnreviewed)); err != nil || !f.cat.Quarantined("demo") {
		t.Fatalf("the next flood: %v, quarantined %v", err, f.cat.Quarantined("demo"))
	}
	if n := countAudit(t, f, catalog.KindServerQuarantined); n != 2 {
		t.Errorf("%d quarantine audit entries, want 2", n)
	}
}

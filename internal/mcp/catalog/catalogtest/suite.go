// Package catalogtest is the conformance suite of catalog.Store: every
// storage engine that keeps the pinned definitions of MCP servers' tools
// runs it against a fresh store.
package catalogtest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/mcp/catalog"
	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/queue"
)

// Harness is a store under test.
type Harness struct {
	Store catalog.Store
	// AuditKinds lists the kinds of the audit entries the store holds, in
	// the chain's order.
	AuditKinds func(t testing.TB) []string
	// Outbox reads the notification outbox that Tx.Enqueue writes to.
	Outbox notify.Outbox
}

// base is a fixed time in the suite; stores keep milliseconds.
var base = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func pin(server, tool, digest string, at time.Time) catalog.Pin {
	return catalog.Pin{Server: server, Tool: tool, Digest: digest, Status: catalog.Pending, FirstSeen: at,
		Definition: []byte(`{"annotations":null,"description":"D ` + digest + `","inputSchema":{"type":"object"},"name":"` + tool + `"}`)}
}

func entry(kind string) *audit.Entry {
	return &audit.Entry{Time: audit.FormatTime(base), Kind: kind, Principal: "console", Channel: audit.ChannelAPI,
		Details: map[string]any{"n": int64(1)}}
}

func insert(t *testing.T, s catalog.Store, ps ...catalog.Pin) {
	t.Helper()
	err := s.Update(context.Background(), func(tx catalog.Tx) error {
		for _, p := range ps {
			if err := tx.InsertDefinition(p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("InsertDefinition: %v", err)
	}
}

func definitions(t *testing.T, s catalog.Store, server string) []catalog.Pin {
	t.Helper()
	ps, err := s.Definitions(context.Background(), server)
	if err != nil {
		t.Fatalf("Definitions(%s): %v", server, err)
	}
	return ps
}

func keys(ps []catalog.Pin) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Tool + "@" + p.Digest
	}
	return out
}

// Run runs every case, each against a store open gives it fresh.
func Run(t *testing.T, open func(t *testing.T) Harness) {
	ctx := context.Background()

	t.Run("a definition reads back exactly", func(t *testing.T) {
		h := open(t)
		p := pin("demo", "add", "d1", base)
		p.Definition = []byte(`{"description":"caf\u00e9 \u202e","inputSchema":{"maximum":9007199254740993}}`)
		p.Reasons = []string{"first reason", "second: \u202e"}
		p.Status = catalog.Quarantined
		insert(t, h.Store, p)
		var got catalog.Pin
		err := h.Store.Update(ctx, func(tx catalog.Tx) error {
			var err error
			got, err = tx.Definition("demo", "add", "d1")
			return err
		})
		if err != nil {
			t.Fatalf("Definition: %v", err)
		}
		if !reflect.DeepEqual(got, p) {
			t.Fatalf("Definition = %+v\nwant %+v", got, p)
		}
		if all := definitions(t, h.Store, "demo"); len(all) != 1 || !reflect.DeepEqual(all[0], p) {
			t.Fatalf("Definitions = %+v, want the one pin", all)
		}
	})

	t.Run("no reasons read back as none", func(t *testing.T) {
		h := open(t)
		insert(t, h.Store, pin("demo", "add", "d1", base))
		if got := definitions(t, h.Store, "demo"); len(got[0].Reasons) != 0 || got[0].DecidedBy != "" || !got[0].DecidedAt.IsZero() {
			t.Fatalf("a pending pin read back with reasons %q, decided by %q at %s", got[0].Reasons, got[0].DecidedBy, got[0].DecidedAt)
		}
	})

	t.Run("an unknown definition is ErrNotFound", func(t *testing.T) {
		h := open(t)
		insert(t, h.Store, pin("demo", "add", "d1", base))
		for _, k := range [][3]string{{"demo", "add", "d2"}, {"demo", "sub", "d1"}, {"other", "add", "d1"}} {
			err := h.Store.Update(ctx, func(tx catalog.Tx) error {
				_, err := tx.Definition(k[0], k[1], k[2])
				return err
			})
			if !errors.Is(err, catalog.ErrNotFound) {
				t.Errorf("Definition(%v) = %v, want ErrNotFound", k, err)
			}
			err = h.Store.Update(ctx, func(tx catalog.Tx) error {
				return tx.SetDefinitionStatus(k[0], k[1], k[2], catalog.Approved, "admin", base)
			})
			if !errors.Is(err, catalog.ErrNotFound) {
				t.Errorf("SetDefinitionStatus(%v) = %v, want ErrNotFound", k, err)
			}
		}
	})

	t.Run("a definition is pinned once", func(t *testing.T) {
		h := open(t)
		insert(t, h.Store, pin("demo", "add", "d1", base))
		err := h.Store.Update(ctx, func(tx catalog.Tx) error { return tx.InsertDefinition(pin("demo", "add", "d1", base)) })
		if err == nil {
			t.Fatal("the same (server, tool, digest) was inserted twice")
		}
	})

	t.Run("definitions are per server, oldest first", func(t *testing.T) {
		h := open(t)
		insert(t, h.Store,
			pin("demo", "sub", "d3", base.Add(2*time.Second)),
			pin("demo", "add", "d2", base.Add(time.Second)),
			pin("demo", "add", "d1", base),
			pin("other", "add", "d9", base),
			pin("demo", "mul", "d4", base.Add(2*time.Second)),
		)
		want := []string{"add@d1", "add@d2", "mul@d4", "sub@d3"}
		if got := keys(definitions(t, h.Store, "demo")); !reflect.DeepEqual(got, want) {
			t.Fatalf("Definitions(demo) = %v, want %v (first seen, then tool, then digest)", got, want)
		}
		if got := keys(definitions(t, h.Store, "other")); !reflect.DeepEqual(got, []string{"add@d9"}) {
			t.Fatalf("Definitions(other) = %v", got)
		}
		if got := definitions(t, h.Store, "none"); len(got) != 0 {
			t.Fatalf("Definitions(none) = %v, want none", got)
		}
	})

	t.Run("a review is recorded with who and when", func(t *testing.T) {
		h := open(t)
		insert(t, h.Store, pin("demo", "add", "d1", base), pin("demo", "add", "d2", base))
		at := base.Add(90*time.Second + 123*time.Millisecond)
		err := h.Store.Update(ctx, func(tx catalog.Tx) error {
			if err := tx.SetDefinitionStatus("demo", "add", "d1", catalog.Approved, "admin", at); err != nil {
				return err
			}
			return tx.SetDefinitionStatus("demo", "add", "d2", catalog.Rejected, "root", at)
		})
		if err != nil {
			t.Fatal(err)
		}
		got := definitions(t, h.Store, "demo")
		if got[0].Status != catalog.Approved || got[0].DecidedBy != "admin" || !got[0].DecidedAt.Equal(at) ||
			got[1].Status != catalog.Rejected || got[1].DecidedBy != "root" {
			t.Fatalf("after the reviews: %+v", got)
		}
		if got[0].DecidedAt.Location() != time.UTC {
			t.Errorf("DecidedAt in %s, want UTC", got[0].DecidedAt.Location())
		}
	})

	t.Run("a notice commits with the definition, and rolls back with it", func(t *testing.T) {
		h := open(t)
		notice := func(id string) queue.Notice {
			return queue.Notice{EventID: id, Kind: notify.ToolReviewNeeded, Channel: "admins",
				Body: []byte(`{"id":"` + id + `","type":"tool.review_needed"}`), At: base, DueAt: base}
		}
		boom := errors.New("boom")
		err := h.Store.Update(ctx, func(tx catalog.Tx) error {
			if err := tx.InsertDefinition(pin("demo", "add", "d1", base)); err != nil {
				return err
			}
			if err := tx.Enqueue([]queue.Notice{notice("evt_rolled_back")}); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Update = %v, want the function's error", err)
		}
		err = h.Store.Update(ctx, func(tx catalog.Tx) error {
			if err := tx.InsertDefinition(pin("demo", "add", "d2", base)); err != nil {
				return err
			}
			return tx.Enqueue([]queue.Notice{notice("evt_committed")})
		})
		if err != nil {
			t.Fatal(err)
		}
		ds, err := h.Outbox.Deliveries(ctx, notify.Query{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 1 || ds[0].EventID != "evt_committed" || ds[0].Kind != notify.ToolReviewNeeded || ds[0].CallID != "" {
			t.Fatalf("outbox %+v, want the committed notice only", ds)
		}
		if got := keys(definitions(t, h.Store, "demo")); len(got) != 1 || got[0] != "add@d2" {
			t.Fatalf("definitions %v, want add@d2", got)
		}
	})

	t.Run("a failed transaction leaves nothing, audit entries included", func(t *testing.T) {
		h := open(t)
		before := len(h.AuditKinds(t))
		boom := errors.New("boom")
		err := h.Store.Update(ctx, func(tx catalog.Tx) error {
			if err := tx.InsertDefinition(pin("demo", "add", "d1", base)); err != nil {
				return err
			}
			if err := tx.Append(entry(catalog.KindDefinitionSeen)); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Update = %v, want the function's error", err)
		}
		if got := definitions(t, h.Store, "demo"); len(got) != 0 {
			t.Fatalf("a rolled-back insert left %v", keys(got))
		}
		if got := h.AuditKinds(t); len(got) != before {
			t.Fatalf("a rolled-back append left audit entries %v", got[before:])
		}
		if err := h.Store.Update(ctx, func(tx catalog.Tx) error {
			if err := tx.InsertDefinition(pin("demo", "add", "d1", base)); err != nil {
				return err
			}
			return tx.Append(entry(catalog.KindDefinitionSeen))
		}); err != nil {
			t.Fatal(err)
		}
		if got := h.AuditKinds(t); len(got) != before+1 || got[before] != catalog.KindDefinitionSeen {
			t.Fatalf("audit kinds %v, want one more %s", got, catalog.KindDefinitionSeen)
		}
	})

	t.Run("concurrent pins of one definition: one wins, none is lost", func(t *testing.T) {
		h := open(t)
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				errs[i] = h.Store.Update(ctx, func(tx catalog.Tx) error {
					if _, err := tx.Definition("demo", "add", "d1"); err == nil {
						return nil
					} else if !errors.Is(err, catalog.ErrNotFound) {
						return err
					}
					if err := tx.InsertDefinition(pin("demo", "add", "d1", base)); err != nil {
						return err
					}
					return tx.Append(entry(catalog.KindDefinitionSeen))
				})
			}(i)
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("writer %d: %v", i, err)
			}
		}
		if got := definitions(t, h.Store, "demo"); len(got) != 1 {
			t.Fatalf("%d pins, want 1", len(got))
		}
		seen := 0
		for _, k := range h.AuditKinds(t) {
			if k == catalog.KindDefinitionSeen {
				seen++
			}
		}
		if seen != 1 {
			t.Fatalf("%d %s entries, want 1: %s", seen, catalog.KindDefinitionSeen, fmt.Sprint(h.AuditKinds(t)))
		}
	})
}

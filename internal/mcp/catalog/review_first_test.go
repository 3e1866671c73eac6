package catalog_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/countersign/countersign/examples/mcpdemo"
	"github.com/countersign/countersign/internal/mcp/catalog"
)

// A tool named in ReviewFirst awaits an admin's review at its first
// listing even when first definitions are trusted, and is announced; the
// other tools of the server are trusted as before.
func TestReviewFirstHoldsOneTrustedTool(t *testing.T) {
	ctx := context.Background()
	f := openWith(t, filepath.Join(t.TempDir(), "r.db"), catalog.Config{Notifier: router(t), TrustFirst: true,
		ReviewFirst: map[string][]string{"demo": {"create_order"}}})
	if err := f.cat.Apply(ctx, "demo", listing(t, mcpdemo.Options{})); err != nil {
		t.Fatal(err)
	}
	es := entries(f)
	if got := es["create_order"].Pin.Status; got != catalog.Pending {
		t.Errorf("create_order is %s, want pending review", got)
	}
	for _, name := range []string{"add", "scale", "echo"} {
		if got := es[name].Pin.Status; got != catalog.Approved {
			t.Errorf("%s is %s, want trusted (approved)", name, got)
		}
	}
	if evs := reviewEvents(t, f.db); len(evs["demo/create_order"]) == 0 {
		t.Errorf("create_order's review was not announced: %v", keysOf(evs))
	}
}

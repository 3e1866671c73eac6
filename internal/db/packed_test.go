package db

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/queue"
)

// TestPackedColumnsReadAsStored: a call's short texts, read as one packed
// value (packedColumns) and split by their lengths in bytes, are the
// columns as stored, whatever they hold (separators, multi-byte and
// invalid UTF-8, NUL, empty, NULL), by loadCall, by the history's rows and
// by the pending calls' statement.
func TestPackedColumnsReadAsStored(t *testing.T) {
	d := openTestDB(t)
	ctx := context.Background()
	odd := []string{"", ",", ":", "1,2:3", "é 日本 🙂", "nul\x00byte", "line\nbreak", `"quoted"`, "x"}
	for i, s := range odd {
		id := fmt.Sprintf("call_packed_%d", i)
		if err := d.Store().Update(ctx, func(tx queue.Tx) error { return submitLike(tx, id) }); err != nil {
			t.Fatal(err)
		}
		var null any = s + "!"
		if i%3 == 0 {
			null = nil
		}
		if _, err := d.SQL().Exec(`UPDATE calls SET actor = ?1, audience = ?1, tool = ?1, target = ?1, digest = ?1, tool_digest = ?1,
			notify = ?1, submitted_by = ?2, grant_jti = ?3, grant_kid = ?2, redeemed_by = ?2 WHERE id = ?4`,
			s, null, fmt.Sprintf("%s-%d", s, i), id); err != nil {
			t.Fatal(err)
		}
	}
	// Text that is not UTF-8, written as SQLite takes it.
	if _, err := d.SQL().Exec(`UPDATE calls SET actor = CAST(x'66ff80' AS TEXT), target = CAST(x'c3' AS TEXT) WHERE id = 'call_packed_8'`); err != nil {
		t.Fatal(err)
	}
	pending, err := d.Store().PendingCalls(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]*queue.Call{}
	for _, c := range pending {
		listed[c.ID] = c
	}
	for i := range odd {
		id := fmt.Sprintf("call_packed_%d", i)
		var w struct {
			actor, audience, tool, target, digest, toolDigest, notify, status string
			by, jti, kid, redeemedBy                                          sql.NullString
		}
		if err := d.SQL().QueryRow(`SELECT actor, audience, tool, target, digest, tool_digest, notify, status, submitted_by, grant_jti, grant_kid, redeemed_by
			FROM calls WHERE id = ?`, id).Scan(&w.actor, &w.audience, &w.tool, &w.target, &w.digest, &w.toolDigest, &w.notify, &w.status,
			&w.by, &w.jti, &w.kid, &w.redeemedBy); err != nil {
			t.Fatal(err)
		}
		got, err := d.Store().Call(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		for _, c := range []*queue.Call{got, listed[id]} {
			if c == nil {
				t.Fatalf("%s is not among the pending calls", id)
			}
			have := []string{c.ID, c.Actor, c.Audience, c.Tool, c.Target, c.Digest, c.ToolDigest, strings.Join(c.Notify, ","), string(c.Status),
				c.SubmittedBy, c.GrantJTI, c.GrantKID, c.RedeemedBy, c.PlanID}
			want := []string{id, w.actor, w.audience, w.tool, w.target, w.digest, w.toolDigest, w.notify, w.status,
				w.by.String, w.jti.String, w.kid.String, w.redeemedBy.String, ""}
			for k := range want {
				if have[k] != want[k] {
					t.Errorf("%s: field %d = %q, want %q", id, k, have[k], want[k])
				}
			}
		}
	}
}

// TestUnpackRefusesWhatDoesNotSplit: packed text whose lengths do not
// account for it exactly is an error, never a shifted field.
func TestUnpackRefusesWhatDoesNotSplit(t *testing.T) {
	var a, b string
	if err := unpack("1,2:xyz", &a, &b); err != nil || a != "x" || b != "yz" {
		t.Fatalf("unpack = %q %q %v", a, b, err)
	}
	for _, bad := range []string{"", "1,2", "1,2:xy", "1,2:xyzw", "1:x", "1,2,0:xyz", "-1,4:xyz", "a,2:xyz", "1,9:xyz", "1,2;xyz"} {
		if err := unpack(bad, &a, &b); err == nil {
			t.Errorf("unpack(%q) = %q %q, want an error", bad, a, b)
		}
	}
}

// maxLoadCallAllocs budgets reading one call with Store.Call: its row (the
// short texts packed into one value, the others one by one), its
// arguments parsed, its people and approvals. A text column read on its
// own again, or people decoded through encoding/json when there are none,
// fails TestLoadCallAllocations.
const maxLoadCallAllocs = loadCallAllocs + 2

// loadCallAllocs is what TestLoadCallAllocations measured: 32, where it
// was 68 with each text column read on its own, people decoded by
// encoding/json and the approvals and revocation scanned through a slice
// of their own; 59 with the first two, 37 with the last.
const loadCallAllocs = 32

// TestLoadCallAllocations counts the heap allocations of reading a call
// that is approved, with its grant's names set.
func TestLoadCallAllocations(t *testing.T) {
	d := openTestDB(t)
	ctx := context.Background()
	if err := d.Store().Update(ctx, func(tx queue.Tx) error { return submitLike(tx, "call_allocs") }); err != nil {
		t.Fatal(err)
	}
	if _, err := d.SQL().Exec(`UPDATE calls SET status = 'approved', grant_jti = 'jti_0123456789abcdef', grant_kid = 'key_1',
		grant_token = 'token', submitted_by = 'tok_abcdef' WHERE id = 'call_allocs'`); err != nil {
		t.Fatal(err)
	}
	var err error
	n := testing.AllocsPerRun(50, func() { _, err = d.Store().Call(ctx, "call_allocs") })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%.0f allocations to read a call", n)
	if n > maxLoadCallAllocs {
		t.Errorf("reading a call made %.0f allocations, more than %d", n, maxLoadCallAllocs)
	}
}

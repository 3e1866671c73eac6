package queue_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// TestRevokeRacesRedeem: a revocation and a redemption of one grant sent at
// once never both win: either the grant is redeemed and the revocation is
// refused, or it is revoked and the redemption is refused as revoked,
// consuming nothing.
func TestRevokeRacesRedeem(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a race of revocations and redemptions")
	}
	e := newEnv(t)
	ctx := context.Background()
	redeemedN, revokedN := 0, 0
	for range 20 {
		c := MustApproved(t, e)
		var wg sync.WaitGroup
		var r *queue.Redemption
		var rerr, verr error
		wg.Add(2)
		go func() { defer wg.Done(); r, rerr = e.q.Redeem(ctx, agent, exactBody(c)) }()
		go func() { defer wg.Done(); _, verr = e.q.RevokeGrant(ctx, "bob", audit.ChannelWeb, c.ID, "stop") }()
		wg.Wait()
		if rerr != nil {
			t.Fatal(rerr)
		}
		switch {
		case r.Accepted && errors.Is(verr, queue.ErrNotApproved):
			redeemedN++
		case !r.Accepted && r.Reason == "revoked" && verr == nil:
			revokedN++
			if n := countOf(t, e.db, `SELECT COUNT(*) FROM redemptions WHERE call_id = '`+c.ID+`'`); n != 0 {
				t.Fatalf("a revoked grant left %d ledger rows", n)
			}
		default:
			t.Fatalf("redeem accepted=%v reason %q, revoke %v: both won or both lost", r.Accepted, r.Reason, verr)
		}
	}
	t.Logf("redeemed first %d times, revoked first %d times", redeemedN, revokedN)
}

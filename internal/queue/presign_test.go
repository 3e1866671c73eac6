package queue_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/queue"
)

// watchedSigner is a Signer that records each grant it signs and whether
// a write transaction of the store was running at that moment.
type watchedSigner struct {
	queue.Signer
	inTx *atomic.Int32

	mu     sync.Mutex
	tokens []string
	inside []bool
}

func (w *watchedSigner) Mint(c grant.Claims) (string, string, error) {
	token, kid, err := w.Signer.Mint(c)
	w.mu.Lock()
	w.tokens = append(w.tokens, token)
	w.inside = append(w.inside, w.inTx.Load() > 0)
	w.mu.Unlock()
	return token, kid, err
}

func (w *watchedSigner) signed() (tokens []string, inside []bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	tokens, inside = append(tokens, w.tokens...), append(inside, w.inside...)
	w.tokens, w.inside = nil, nil
	return tokens, inside
}

// txStore marks the time its write transactions' functions run and, while
// failGrant is set, fails every transaction at the audit entry of a
// grant, after the grant was stored with the call.
type txStore struct {
	queue.Store
	inTx      *atomic.Int32
	failGrant *atomic.Bool
}

func (s txStore) Update(ctx context.Context, fn func(queue.Tx) error) error {
	return s.Store.Update(ctx, func(tx queue.Tx) error {
		s.inTx.Add(1)
		defer s.inTx.Add(-1)
		if s.failGrant != nil {
			tx = grantFailTx{Tx: tx, fail: s.failGrant}
		}
		return fn(tx)
	})
}

var errGrantAudit = errors.New("injected: the grant's audit entry failed")

// grantFailTx is a transaction whose grant audit entry fails while fail is
// set.
type grantFailTx struct {
	queue.Tx
	fail *atomic.Bool
}

func (t grantFailTx) Append(e *audit.Entry) error {
	if e.Kind == audit.KindGranted && t.fail.Load() {
		return errGrantAudit
	}
	return t.Tx.Append(e)
}

func newWatchedEnv(t *testing.T) (*env, *watchedSigner) {
	e, w, _ := newFailingEnv(t)
	return e, w
}

// newFailingEnv is newWatchedEnv with the switch that makes a transaction
// fail after it minted a grant.
func newFailingEnv(t *testing.T) (*env, *watchedSigner, *atomic.Bool) {
	var inTx atomic.Int32
	var fail atomic.Bool
	var w *watchedSigner
	e := newEnvWith(t, func(cfg *queue.Config) {
		w = &watchedSigner{Signer: cfg.Signer, inTx: &inTx}
		cfg.Signer = w
		cfg.Store = txStore{Store: cfg.Store, inTx: &inTx, failGrant: &fail}
	})
	e.clock.Set(time.Now().UTC()) // grants must verify against the real time
	return e, w, &fail
}

// TestPresignedGrant: an approval whose channel read the call first, and
// that completes the call's approvals, signs the grant before the write
// transaction; the grant is the one stored, returned and redeemed, once.
// Without the read, the grant is signed inside the transaction.
func TestPresignedGrant(t *testing.T) {
	ctx := context.Background()
	e, w := newWatchedEnv(t)
	submit := func() *queue.Call {
		body := fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":%s}`, rand.Uint32(), refundArgs)
		c, _, err := e.q.Submit(ctx, agent, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := submit()
	seen, err := e.q.Call(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.q.ApproveWith(ctx, queue.ApproveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: c.ID, Digest: c.Digest, Seen: seen})
	if err != nil {
		t.Fatal(err)
	}
	tokens, inside := w.signed()
	if len(tokens) != 1 || inside[0] || got.Grant != tokens[0] {
		t.Fatalf("signed %d grants (inside a transaction: %v), the call's grant is one of them: %t; want one, signed before the transaction",
			len(tokens), inside, len(tokens) > 0 && got.Grant == tokens[0])
	}
	if stored, _ := e.q.Call(ctx, c.ID); stored.Grant != got.Grant || stored.Status != queue.StatusApproved {
		t.Fatalf("stored call: %s with another grant: %t", stored.Status, stored.Grant != got.Grant)
	}
	if r, err := e.q.Redeem(ctx, agent, exactBody(got)); err != nil || !r.Accepted {
		t.Fatalf("redeem the presigned grant: %v %s", err, checks(r))
	}
	if r, err := e.q.Redeem(ctx, agent, exactBody(got)); err != nil || r.Accepted || r.Reason != grant.ReasonReplayed {
		t.Fatalf("second redemption: %v %s, want replayed", err, checks(r))
	}

	c = submit()
	if _, err := e.q.Approve(ctx, "alice", audit.ChannelCLI, c.ID, c.Digest); err != nil {
		t.Fatal(err)
	}
	if tokens, inside := w.signed(); len(tokens) != 1 || !inside[0] {
		t.Fatalf("without the call read first: signed %d grants, inside a transaction %v; want one, inside", len(tokens), inside)
	}
}

// TestPresignedGrantDiscarded: a grant signed ahead for an approval that
// does not complete the call, as the transaction finds it, is never
// stored, returned or redeemable: a call seen (wrongly) as needing one
// approval stays pending after the first of its two; a call denied after
// it was seen is not approved.
func TestPresignedGrantDiscarded(t *testing.T) {
	ctx := context.Background()
	e, w := newWatchedEnv(t)
	body := fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":%s}`, rand.Uint32(), refundArgs)
	c, _, err := e.q.Submit(ctx, agent, []byte(body))
	if err != nil {
		t.Fatal(err)
	}

	// The hint says one approval completes it; the call as stored (a tool
	// that wants two, here by editing the row) does not agree.
	if _, err := e.db.SQL().Exec(`UPDATE calls SET approvals_required = 2 WHERE id = ?`, c.ID); err != nil {
		t.Fatal(err)
	}
	seen := c.Clone()
	got, err := e.q.ApproveWith(ctx, queue.ApproveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: c.ID, Digest: c.Digest, Seen: seen})
	if err != nil {
		t.Fatal(err)
	}
	tokens, inside := w.signed()
	if len(tokens) != 1 || inside[0] {
		t.Fatalf("signed %d grants, inside %v; want one signed ahead", len(tokens), inside)
	}
	if got.Status != queue.StatusPending || got.Grant != "" {
		t.Fatalf("after the first of two approvals: %s with grant %t; want pending without one", got.Status, got.Grant != "")
	}
	if stored, _ := e.q.Call(ctx, c.ID); stored.Grant != "" || stored.GrantJTI != "" {
		t.Fatal("the grant signed ahead was stored")
	}
	if r, err := e.q.Redeem(ctx, agent, body2(tokens[0], c)); err != nil || r.Accepted {
		t.Fatalf("redeem the discarded signature: %v, accepted %t; want refused", err, r != nil && r.Accepted)
	}
	// The second approval completes it with a grant of its own.
	got, err = e.q.Approve(ctx, "bob", audit.ChannelCLI, c.ID, c.Digest)
	if err != nil || got.Status != queue.StatusApproved || got.Grant == tokens[0] {
		t.Fatalf("second approval: %v, %s, reuses the discarded signature: %t", err, got.Status, got.Grant == tokens[0])
	}
	if r, err := e.q.Redeem(ctx, agent, exactBody(got)); err != nil || !r.Accepted {
		t.Fatalf("redeem: %v %s", err, checks(r))
	}

	// Seen pending, denied before the approval's transaction.
	c, _, err = e.q.Submit(ctx, agent, []byte(fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":%s}`, rand.Uint32(), refundArgs)))
	if err != nil {
		t.Fatal(err)
	}
	seen = c.Clone()
	if _, err := e.q.Deny(ctx, "bob", audit.ChannelCLI, c.ID, "no"); err != nil {
		t.Fatal(err)
	}
	w.signed()
	if _, err := e.q.ApproveWith(ctx, queue.ApproveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: c.ID, Digest: c.Digest, Seen: seen}); err == nil {
		t.Fatal("approved a denied call")
	}
	tokens, _ = w.signed()
	if stored, _ := e.q.Call(ctx, c.ID); stored.Status != queue.StatusDenied || stored.Grant != "" {
		t.Fatalf("denied call after the approval: %s, grant %t", stored.Status, stored.Grant != "")
	}
	for _, tok := range tokens {
		if r, err := e.q.Redeem(ctx, agent, body2(tok, c)); err != nil || r.Accepted {
			t.Fatalf("redeem a discarded signature of a denied call: %v, accepted %t", err, r != nil && r.Accepted)
		}
	}
}

// body2 is the redemption of call c with another token.
func body2(token string, c *queue.Call) []byte { return body(token, c.Tool, c.Target, c.Args) }

// TestPresignedByRule: a rule that approves a submission has its grant
// signed before the submission's transaction, and that grant redeems.
func TestPresignedByRule(t *testing.T) {
	ctx := context.Background()
	e := newPolicyEnv(t, rulesFile)
	e.clock.Set(time.Now().UTC())
	var inTx atomic.Int32
	w := &watchedSigner{Signer: e.keys, inTx: &inTx}
	q := queue.NewService(queue.Config{Store: txStore{Store: e.db.Store(), inTx: &inTx}, Policy: e.pol, Signer: w, Now: e.clock.Now})
	c, _, err := q.Submit(ctx, agent, []byte(`{"tool":"payments.refund","target":"invoice:INV-77","args":{"amount_minor":1200,"currency":"USD"}}`))
	if err != nil || c.Status != queue.StatusApproved {
		t.Fatalf("submit: %v %v, want approved by rule", c, err)
	}
	tokens, inside := w.signed()
	if len(tokens) != 1 || inside[0] || tokens[0] != c.Grant {
		t.Fatalf("signed %d grants, inside a transaction %v; want the call's grant, signed before", len(tokens), inside)
	}
	if r, err := q.Redeem(ctx, agent, exactBody(c)); err != nil || !r.Accepted {
		t.Fatalf("redeem: %v %s", err, checks(r))
	}
}

// TestPresignedGrantTransactionFails: a grant signed ahead, minted into the
// call by the approval's transaction, whose transaction then fails (here
// at the grant's audit entry), is never returned, stored, audited or
// redeemable; the call stays pending, and the next approval mints a grant
// of its own that redeems once.
func TestPresignedGrantTransactionFails(t *testing.T) {
	ctx := context.Background()
	e, w, fail := newFailingEnv(t)
	c := submitRefund(t, e)
	seen, err := e.q.Call(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	w.signed()
	fail.Store(true)
	got, err := e.q.ApproveWith(ctx, queue.ApproveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: c.ID, Digest: c.Digest, Seen: seen})
	if !errors.Is(err, errGrantAudit) || got != nil {
		t.Fatalf("approval whose transaction fails: %v, call returned %t; want the injected error and no call", err, got != nil)
	}
	fail.Store(false)
	tokens, inside := w.signed()
	if len(tokens) != 1 || inside[0] {
		t.Fatalf("signed %d grants (inside a transaction: %v); want one, signed ahead", len(tokens), inside)
	}
	stored, err := e.q.Call(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Status != queue.StatusPending || stored.Grant != "" || stored.GrantJTI != "" || len(stored.Approvals) != 0 {
		t.Fatalf("after the failed transaction the call is %s with grant %t, jti %q, %d approvals; want pending, nothing recorded",
			stored.Status, stored.Grant != "", stored.GrantJTI, len(stored.Approvals))
	}
	var audited int
	if err := e.db.SQL().QueryRow(`SELECT COUNT(*) FROM audit WHERE call_id = ? AND kind IN ('approved', 'granted')`, c.ID).Scan(&audited); err != nil {
		t.Fatal(err)
	}
	if audited != 0 {
		t.Fatalf("%d approved/granted entries for a transaction that failed", audited)
	}
	if r, err := e.q.Redeem(ctx, agent, body2(tokens[0], c)); err != nil || r.Accepted {
		t.Fatalf("redeem the grant of the failed transaction: %v, accepted %t; want refused", err, r != nil && r.Accepted)
	}
	if v, err := e.db.VerifyChain(ctx); err != nil {
		t.Fatalf("chain after the failed transaction: %v (%+v)", err, v)
	}

	// The call is still decidable; its grant is new and single-use.
	seen, _ = e.q.Call(ctx, c.ID)
	got, err = e.q.ApproveWith(ctx, queue.ApproveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: c.ID, Digest: c.Digest, Seen: seen})
	if err != nil || got.Status != queue.StatusApproved || got.Grant == tokens[0] {
		t.Fatalf("approval after the failure: %v, reuses the failed grant: %t", err, got != nil && got.Grant == tokens[0])
	}
	if r, err := e.q.Redeem(ctx, agent, exactBody(got)); err != nil || !r.Accepted {
		t.Fatalf("redeem: %v %s", err, checks(r))
	}
	if r, err := e.q.Redeem(ctx, agent, body2(tokens[0], c)); err != nil || r.Accepted {
		t.Fatalf("the failed transaction's grant after the call was redeemed: %v, accepted %t", err, r != nil && r.Accepted)
	}
}

// TestPresignedGrantStale: a grant signed ahead more than a moment before
// the decision's transaction (the write waited for the lock) is not used:
// the transaction signs a fresh one, so the grant lives its full lifetime.
func TestPresignedGrantStale(t *testing.T) {
	ctx := context.Background()
	e, w := newWatchedEnv(t)
	c := submitRefund(t, e)
	seen, _ := e.q.Call(ctx, c.ID)
	w.signed()
	e.store.setBefore(func() { e.clock.Advance(5 * time.Second) })
	got, err := e.q.ApproveWith(ctx, queue.ApproveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: c.ID, Digest: c.Digest, Seen: seen})
	e.store.setBefore(nil)
	if err != nil {
		t.Fatal(err)
	}
	tokens, inside := w.signed()
	if len(tokens) != 2 || inside[0] || !inside[1] || got.Grant != tokens[1] {
		t.Fatalf("signed %d grants (inside a transaction: %v); want the stale one ahead, and the call's inside", len(tokens), inside)
	}
	if want := got.DecidedAt.Add(got.GrantTTL).Unix(); got.GrantExpiresAt.Unix() != want {
		t.Fatalf("grant expires %v, want decided + ttl = %v", got.GrantExpiresAt, time.Unix(want, 0))
	}
	if r, err := e.q.Redeem(ctx, agent, body2(tokens[0], c)); err != nil || r.Accepted {
		t.Fatalf("redeem the stale signature: %v, accepted %t; want refused", err, r != nil && r.Accepted)
	}
	if r, err := e.q.Redeem(ctx, agent, exactBody(got)); err != nil || !r.Accepted {
		t.Fatalf("redeem: %v %s", err, checks(r))
	}
}

// TestPresignedGrantRaces: operators racing to approve the same calls,
// each signing ahead, some of their transactions failing after the mint:
// each call is approved at most once, with exactly one of the signatures,
// and of many concurrent redemptions of every signature made, exactly one
// per approved call is accepted (the stored grant's).
func TestPresignedGrantRaces(t *testing.T) {
	if testing.Short() {
		t.Skip("race of approvals and redemptions (-short)")
	}
	ctx := context.Background()
	e, w, fail := newFailingEnv(t)
	const calls, approvers, redeemers = 8, 3, 4
	ops := []string{"alice", "bob", "carol"}
	var cs []*queue.Call
	for range calls {
		cs = append(cs, submitRefund(t, e))
	}
	w.signed()
	var wg sync.WaitGroup
	var approved atomic.Int32
	for i, c := range cs {
		seen, err := e.q.Call(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		for a := range approvers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Every third call's first transactions fail after the mint,
				// while the switch is on.
				if i%3 == 0 && a == 0 {
					fail.Store(true)
					defer fail.Store(false)
				}
				got, err := e.q.ApproveWith(ctx, queue.ApproveInput{Operator: ops[a], Channel: audit.ChannelWeb, CallID: c.ID, Digest: c.Digest, Seen: seen})
				if err == nil && got.Status == queue.StatusApproved {
					approved.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	fail.Store(false)
	tokens, _ := w.signed()
	var accepted atomic.Int32
	for _, c := range cs {
		for _, tok := range tokens {
			for range redeemers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if r, err := e.q.Redeem(ctx, agent, body2(tok, c)); err == nil && r.Accepted {
						accepted.Add(1)
					}
				}()
			}
		}
	}
	wg.Wait()
	var stored int32
	for _, c := range cs {
		got, err := e.q.Call(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == queue.StatusApproved || got.Status == queue.StatusRedeemed {
			stored++
			if n := len(got.Approvals); n != 1 {
				t.Errorf("call %s: %d approvals stored, want 1", c.ID, n)
			}
		}
	}
	if stored != approved.Load() || accepted.Load() != stored || stored == 0 {
		t.Fatalf("approvals that returned approved: %d, calls approved as stored: %d, redemptions accepted: %d (of %d signatures × %d calls × %d); want all equal and > 0",
			approved.Load(), stored, accepted.Load(), len(tokens), calls, redeemers)
	}
	if v, err := e.db.VerifyChain(ctx); err != nil {
		t.Fatalf("chain: %v (%+v)", err, v)
	}
}

package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/tools"
)

var _ = add("calls/owners, approvers and the passkey requirement", func(t *testing.T, s Stores) {
	ctx := context.Background()
	plain := newCall("agent:a", "pay.refund", t0)
	c := newCall("agent:a", "pay.refund", t0.Add(time.Second))
	c.Owners = []string{"olga", "team:payments", "oidc:idp.example.com/00u1"}
	c.Approvers = tools.Approvers{Roles: []string{"admin"}, Groups: []string{"payments-leads", "Security Team"}}
	c.RequirePasskey = true
	insert(t, s, plain, c)
	for _, want := range []*queue.Call{plain, c} {
		got, err := s.Queue.Call(ctx, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Owners, want.Owners) || !reflect.DeepEqual(got.Approvers, want.Approvers) || got.RequirePasskey != want.RequirePasskey {
			t.Errorf("read back owners %q approvers %+v passkey %v; want %q %+v %v", got.Owners, got.Approvers, got.RequirePasskey,
				want.Owners, want.Approvers, want.RequirePasskey)
		}
	}
	page, _, err := s.History.History(ctx, queue.HistoryFilter{Limit: 10})
	if err != nil || len(page) != 2 || !reflect.DeepEqual(page[0].Owners, c.Owners) || !page[0].RequirePasskey {
		t.Errorf("History = %d calls, %v; want the newest with its owners and passkey requirement", len(page), err)
	}
})

var _ = add("calls/an approval signed by a passkey", func(t *testing.T, s Stores) {
	ctx := context.Background()
	c := newCall("agent:a", "pay.refund", t0)
	c.RequirePasskey = true
	insert(t, s, c)
	byCommand := queue.Approval{Operator: "bob", Channel: "cli", At: t0.Add(time.Second), Method: queue.MethodCommand, Digest: c.Digest}
	signed := queue.Approval{Operator: "alice", Channel: "web", At: t0.Add(2 * time.Second), Method: queue.MethodPasskey, Digest: c.Digest,
		Via: "batch_x", Presented: &queue.Presented{Page: "call", At: t0.Add(time.Second + time.Millisecond)}, Passkey: &queue.ApprovalPasskey{
			CredentialID: []byte{0, 1, 2, 0xff}, Name: "YubiKey 5C",
			Evidence: []byte(`{"call_id":"x","format":"countersign.passkey-approval.v1","sign_count":7}`)}}
	update(t, s, func(tx queueTx) error {
		if err := tx.AddApproval(c.ID, byCommand); err != nil {
			return err
		}
		return tx.AddApproval(c.ID, signed)
	})
	got, err := s.Queue.Call(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Approvals, []queue.Approval{byCommand, signed}) {
		t.Errorf("approvals = %+v; want %+v", got.Approvals, []queue.Approval{byCommand, signed})
	}
	// Whether a person saw the call follows from what the store kept.
	if h := []string{got.Approvals[0].Human(), got.Approvals[1].Human()}; !reflect.DeepEqual(h, []string{queue.HumanUnattested, queue.HumanTrue}) {
		t.Errorf("human = %q; want unattested, true", h)
	}
	// History lists say which passkey, without the evidence.
	page, _, err := s.History.History(ctx, queue.HistoryFilter{Limit: 10})
	if err != nil || len(page) != 1 || len(page[0].Approvals) != 2 {
		t.Fatalf("History = %+v, %v", page, err)
	}
	if a := page[0].Approvals[0]; a.Passkey != nil {
		t.Errorf("an approval by command reads as signed: %+v", a.Passkey)
	}
	if p := page[0].Approvals[1].Passkey; p == nil || p.Name != "YubiKey 5C" || !reflect.DeepEqual(p.CredentialID, signed.Passkey.CredentialID) {
		t.Errorf("the signed approval in history = %+v", p)
	}
	// History lists keep the decision record: method, digest, via and
	// the presentation.
	for i, want := range []queue.Approval{byCommand, signed} {
		got := page[0].Approvals[i]
		if got.Method != want.Method || got.Digest != want.Digest || got.Via != want.Via || !reflect.DeepEqual(got.Presented, want.Presented) {
			t.Errorf("approval %d in history = %+v; want method %s, digest, via %q, presented %+v", i, got, want.Method, want.Via, want.Presented)
		}
	}
})

var _ = add("accounts/a passkey's counter advances once", func(t *testing.T, s Stores) {
	ctx := context.Background()
	addUser(t, s, "alice", account.RoleOperator)
	addUser(t, s, "bob", account.RoleOperator)
	key := account.Passkey{ID: []byte{5, 5}, User: "alice", Name: "laptop", PublicKey: []byte{1}, SignCount: 3,
		Record: []byte(`{"n":3}`), CreatedAt: t0}
	accountUpdate(t, s, func(tx account.Tx) error { return tx.InsertPasskey(key) })
	use := func(user string, from, to uint32) error {
		return s.Queue.Update(ctx, func(tx queueTx) error {
			return tx.UsePasskey(user, key.ID, from, to, []byte(`{"n":4}`), t0.Add(time.Hour))
		})
	}
	for _, bad := range []struct {
		user     string
		from, to uint32
	}{{"alice", 2, 4}, {"bob", 3, 4}} {
		if err := use(bad.user, bad.from, bad.to); !errors.Is(err, queue.ErrPasskeyChanged) {
			t.Errorf("UsePasskey(%s, %d→%d) = %v, want ErrPasskeyChanged", bad.user, bad.from, bad.to, err)
		}
	}
	if err := use("alice", 3, 4); err != nil {
		t.Fatal(err)
	}
	if err := use("alice", 3, 4); !errors.Is(err, queue.ErrPasskeyChanged) {
		t.Errorf("the same step twice = %v, want ErrPasskeyChanged", err)
	}
	got, _ := s.Accounts.Passkeys(ctx, "alice")
	want := key
	want.SignCount, want.Record, want.LastUsedAt = 4, []byte(`{"n":4}`), t0.Add(time.Hour)
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("after use: %+v; want %+v", got, want)
	}
})

var _ = add("accounts/token owners", func(t *testing.T, s Stores) {
	ctx := context.Background()
	tok := account.Token{ID: "tok_o", Actor: "agent:a", Audience: "pay-host", Owners: []string{"alice", "team:payments"}, CreatedAt: t0}
	accountUpdate(t, s, func(tx account.Tx) error { return tx.InsertToken(tok, "hash-o") })
	if got, err := s.Accounts.TokenByHash(ctx, "hash-o"); err != nil || !reflect.DeepEqual(got, tok) {
		t.Errorf("TokenByHash = %+v, %v; want %+v", got, err, tok)
	}
	if got, err := s.Accounts.Tokens(ctx); err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], tok) {
		t.Errorf("Tokens = %+v, %v", got, err)
	}
})

package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

var _ = add("calls/grant revocation read back", func(t *testing.T, s Stores) {
	c := newCall("agent:a", "pay.refund", t0)
	insert(t, s, c)
	c.Status, c.DecidedAt, c.Grant, c.GrantJTI, c.GrantKID, c.GrantExpiresAt = queue.StatusApproved, t0, "g.g.g", randomID("jti_"), "k1", t0.Add(time.Minute)
	update(t, s, func(tx queue.Tx) error { return tx.UpdateCall(c) })
	got, err := s.Queue.Call(context.Background(), c.ID)
	if err != nil || got.Revoked != nil {
		t.Fatalf("Call before revoking: %+v, %v", got, err)
	}
	r := queue.Revocation{CallID: c.ID, JTI: c.GrantJTI, By: "olivia", Channel: "web", Reason: "wrong\u00a0customer", At: t0.Add(time.Second)}
	update(t, s, func(tx queue.Tx) error { return tx.InsertRevocation(r) })
	got, err = s.Queue.Call(context.Background(), c.ID)
	if err != nil || got.Revoked == nil || *got.Revoked != r || got.Shown() != queue.StatusRevoked {
		t.Fatalf("Call after revoking: %+v, %v; want revocation %+v", got.Revoked, err, r)
	}
	update(t, s, func(tx queue.Tx) error {
		in, err := tx.Call(c.ID)
		if err == nil && (in.Revoked == nil || *in.Revoked != r) {
			t.Errorf("tx.Call revocation = %+v, want %+v", in.Revoked, r)
		}
		return err
	})
})

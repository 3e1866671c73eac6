package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
)

const quorumTools = `tools:
  ledger.close:
    audience: ledger-host
    target: '^period:[0-9]+$'
    approvals: 2
    args: {type: object, additionalProperties: false, properties: {}}
`

// TestQuorumCountsPeople: one person with a local account and a
// single-sign-on account that goes by the same name (its short name, in
// any case) approves once toward a quorum, in either order; another
// person completes it.
func TestQuorumCountsPeople(t *testing.T) {
	pol, err := policy.Parse([]byte(quorumTools))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, func(c *queue.Config) { c.Tools, c.Policy = pol.Registry(), pol })
	testkit.SeedUsers(t, e.db.Accounts(), account.RoleOperator, "sam", "olga")
	const ssoSam = "oidc:idp.example.com/00u-sam"
	accountsUpdate(t, e, func(tx account.Tx) error {
		return tx.InsertUser(account.User{Name: ssoSam, Role: account.RoleOperator, Kind: account.KindOIDC,
			Issuer: "https://idp.example.com", Subject: "00u-sam", ShortName: "Sam", CreatedAt: time.Now().UTC().Truncate(time.Millisecond)})
	})
	ledger := queue.Principal{Actor: "agent:ledger", Audience: "ledger-host"}
	ctx := context.Background()
	for i, order := range [][2]string{{"sam", ssoSam}, {ssoSam, "sam"}} {
		c := submitAs(t, e, ledger, "ledger.close", "period:"+string(rune('1'+i)), `{}`)
		if _, err := e.q.Approve(ctx, order[0], audit.ChannelWeb, c.ID, c.Digest); err != nil {
			t.Fatalf("%s approves: %v", order[0], err)
		}
		_, err := e.q.Approve(ctx, order[1], audit.ChannelWeb, c.ID, c.Digest)
		var sp *queue.SamePersonError
		if !errors.As(err, &sp) || sp.Other != order[0] {
			t.Fatalf("%s after %s = %v, want SamePersonError naming %s", order[1], order[0], err, order[0])
		}
		got, err := e.q.Get(ctx, ledger, c.ID)
		if err != nil || got.Status != queue.StatusPending || len(got.Approvals) != 1 {
			t.Fatalf("after the same person twice: %v %s, %d approvals; want pending with 1", err, got.Status, len(got.Approvals))
		}
		got, err = e.q.Approve(ctx, "olga", audit.ChannelWeb, c.ID, c.Digest)
		if err != nil || got.Status != queue.StatusApproved {
			t.Fatalf("olga completes the quorum: %v, %v", got, err)
		}
	}
}

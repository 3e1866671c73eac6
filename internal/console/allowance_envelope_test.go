package console

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/scope"
)

// TestScopeIsMadeFromTheHashedEnvelope: an allowance's scope names what
// the base call's digest covers, not the arguments column stored beside
// it: with that column edited (currency USD to EUR), the scope still fixes
// USD, and a call in USD is covered while one in EUR waits for a person.
func TestScopeIsMadeFromTheHashedEnvelope(t *testing.T) {
	pol, err := policy.Parse([]byte(costTools))
	if err != nil {
		t.Fatal(err)
	}
	e := newConsoleEnvTools(t, pol.Registry(), pol, nil)
	e.addUser("olga", "operator", "pw-olga-123")
	ctx := context.Background()
	who := queue.Principal{Actor: "agent:billing-bot", Audience: "payments-host"}
	refund := func(n int, currency string) []byte {
		return []byte(`{"tool":"payments.refund","target":"invoice:INV-` + strings.Repeat("1", n) + `","args":{"amount_minor":100,"currency":"` + currency + `"}}`)
	}
	c, _, err := e.q.Submit(ctx, who, refund(1, "USD"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.SQL().ExecContext(ctx, `UPDATE calls SET args = replace(args, 'USD', 'EUR') WHERE id = ?`, c.ID); err != nil {
		t.Fatal(err)
	}
	stored, err := e.q.Call(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := stored.Args.Get("currency"); got != "EUR" {
		t.Fatalf("the stored arguments after the edit: %v; want EUR", stored.Args)
	}
	shape, err := queue.ScopeCall(stored)
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := e.q.Tools().Tool(c.Tool)
	ch := scope.Choices{Uses: 5, Until: e.clock.Now().Add(time.Hour), TargetPrefix: "invoice:INV-"}
	sc, err := scope.Materialise(shape, tool, ch, e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if b := sc.Args["/currency"]; b.Kind != scope.Equals || b.Value != "USD" {
		t.Fatalf("the scope's currency: %+v; want equals USD, from the hashed envelope", b)
	}
	if _, _, err := e.q.GiveAllowance(ctx, queue.GiveInput{Operator: "olga", Channel: audit.ChannelCLI, CallID: c.ID, Digest: c.Digest,
		ScopeDigest: sc.Digest(), Choices: ch}); err != nil {
		t.Fatal(err)
	}
	usd, _, err := e.q.Submit(ctx, who, refund(2, "USD"))
	if err != nil {
		t.Fatal(err)
	}
	eur, _, err := e.q.Submit(ctx, who, refund(3, "EUR"))
	if err != nil {
		t.Fatal(err)
	}
	if usd.Status != queue.StatusApproved || eur.Status != queue.StatusPending {
		t.Errorf("a call in USD is %s, one in EUR %s; want approved and pending", usd.Status, eur.Status)
	}
}

package console

import (
	"context"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
)

// Giving a delegation and ending it change what its delegate may decide:
// the delegate's open page is pushed the new "to decide" count at once,
// not at the next recount.
func TestNeedsPushedOnDelegation(t *testing.T) {
	pol, err := policy.Parse([]byte(standingToolsYAML))
	if err != nil {
		t.Fatal(err)
	}
	e := newConsoleEnvTools(t, pol.Registry(), pol, nil)
	e.addUser("olivia", account.RoleOperator, rolePassword)
	e.addUser("adele", account.RoleAdmin, rolePassword)
	e.submitOwned(queue.Principal{Actor: "agent:vault", Audience: "vault-host"},
		`{"tool":"vault.rotate","target":"secret:db","args":{}}`) // admins only
	e.submitOwned(queue.Principal{Actor: "agent:notes", Audience: "notes-host"},
		`{"tool":"notes.write","target":"note:a","args":{}}`)
	// The recount the submits woke passes while no page is open, so that
	// only the delegation's own change can push the count below.
	time.Sleep(3 * needsSettle)

	b := e.browser()
	b.login("olivia", rolePassword)
	conn, first := b.mustDial("/ws")
	if n := needsOf(t, fragmentDoc(t, first).Selection); n["pending"] != 1 {
		t.Fatalf("olivia's socket starts with %v, want 1 to decide (the note)", n)
	}
	counts := func(pending, due int) map[string]int {
		return map[string]int{"pending": pending, "due": due, "blocked": 0, "unresolved": 0}
	}

	d, err := e.q.GiveDelegation(context.Background(), queue.DelegationInput{By: "adele", Channel: audit.ChannelWeb,
		Delegator: "adele", Delegate: "olivia", Until: e.clock.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	wsReadNeeds(t, conn, counts(2, 1)) // the vault call too, for adele

	if _, err := e.q.EndDelegation(context.Background(), "adele", audit.ChannelWeb, d.ID); err != nil {
		t.Fatal(err)
	}
	wsReadNeeds(t, conn, counts(1, 1))

	// Ending every delegation of a person (as disabling an account does)
	// is pushed the same way.
	if _, err := e.q.GiveDelegation(context.Background(), queue.DelegationInput{By: "adele", Channel: audit.ChannelWeb,
		Delegator: "adele", Delegate: "olivia", Until: e.clock.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	wsReadNeeds(t, conn, counts(2, 1))
	if n, err := e.q.EndDelegationsOf(context.Background(), "adele", "adele", audit.ChannelCLI, queue.DelegationEndedDisabled); err != nil || n != 1 {
		t.Fatalf("EndDelegationsOf = %d, %v", n, err)
	}
	wsReadNeeds(t, conn, counts(1, 1))
}

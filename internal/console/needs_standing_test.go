package console

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
)

const standingToolsYAML = `tools:
  vault.rotate:
    description: Rotate a secret
    audience: vault-host
    target: '^secret:[a-z]+$'
    approvals: 1
    decide_within: 1h
    approvers: {roles: [admin]}
    escalate:
      - {after: 5m, add_roles: [operator]}
    args: {type: object, additionalProperties: false, properties: {}}
  notes.write:
    description: Write a note
    audience: notes-host
    target: '^note:[a-z]+$'
    approvals: 2
    decide_within: 9m
    args: {type: object, additionalProperties: false, properties: {}}
`

// toDecide reads the viewer's "to decide" and "due" counts from a page.
func toDecide(t *testing.T, b *consoleBrowser) (int, int) {
	t.Helper()
	n := needsOf(t, b.get("/history").doc.Selection)
	return n["pending"], n["due"]
}

// The navigation's "to decide" counts, for each viewer, the calls whose
// page offers that viewer Approve: the tool's approvers with the tiers
// reached, owners, the own-call ban, approvals given, delegations held and
// freezes. Each page agrees with the count, and two viewers with different
// standing are pushed different counts over their sockets.
func TestNeedsToDecideFollowsStanding(t *testing.T) {
	pol, err := policy.Parse([]byte(standingToolsYAML))
	if err != nil {
		t.Fatal(err)
	}
	e := newConsoleEnvTools(t, pol.Registry(), pol, nil)
	e.addUser("olivia", account.RoleOperator, rolePassword)
	e.addUser("owen", account.RoleOperator, rolePassword)
	e.addUser("adele", account.RoleAdmin, rolePassword)
	e.addUser("aude", account.RoleAuditor, rolePassword)
	vault := e.submitOwned(queue.Principal{Actor: "agent:vault", Audience: "vault-host", Owners: []string{"owen"}},
		`{"tool":"vault.rotate","target":"secret:db","args":{}}`) // admins only; owen owns it
	plain := e.submitOwned(queue.Principal{Actor: "agent:notes", Audience: "notes-host"},
		`{"tool":"notes.write","target":"note:a","args":{}}`)
	own := e.submitOwned(queue.Principal{Actor: "olivia", Audience: "notes-host"},
		`{"tool":"notes.write","target":"note:b","args":{}}`) // proposed under olivia's name
	owned := e.submitOwned(queue.Principal{Actor: "agent:scribe", Audience: "notes-host", Owners: []string{"owen"}},
		`{"tool":"notes.write","target":"note:c","args":{}}`)
	calls := []*queue.Call{vault, plain, own, owned}

	browsers := map[string]*consoleBrowser{}
	for _, name := range []string{"olivia", "owen", "adele", "aude"} {
		browsers[name] = e.browser()
		browsers[name].login(name, rolePassword)
	}
	// check reads each viewer's counts and every call's page, and fails
	// when the count is not the number of pages that offer Approve.
	check := func(when string, want map[string][2]int) {
		t.Helper()
		e.clock.Advance(needsMaxAge + time.Second) // the next page reads again
		for name, w := range want {
			b := browsers[name]
			pending, due := toDecide(t, b)
			if pending != w[0] || due != w[1] {
				t.Errorf("%s: %s counts %d to decide, %d due; want %d, %d", when, name, pending, due, w[0], w[1])
			}
			if name == "aude" {
				continue
			}
			offered := map[string]bool{}
			next := map[string]string{}
			for _, c := range calls {
				p := b.get("/calls/" + c.ID)
				if p.find("approve-form").Length() == 1 {
					offered[c.ID] = true
				}
				href, _ := p.find("next-pending").Attr("href")
				next[c.ID] = strings.TrimPrefix(href, "/calls/")
			}
			if len(offered) != pending {
				t.Errorf("%s: %s is offered Approve on %d pages, counted %d", when, name, len(offered), pending)
			}
			// The call page's "Next pending call" follows the same rule.
			for _, c := range calls {
				others := len(offered)
				if offered[c.ID] {
					others--
				}
				if n := next[c.ID]; n != "" && (!offered[n] || n == c.ID) || n == "" && others > 0 {
					t.Errorf("%s: %s's next pending call after %s is %q; offered %v", when, name, c.ID, n, offered)
				}
			}
		}
	}
	check("at first", map[string][2]int{
		"adele":  {4, 3}, // every call; the notes are due within ten minutes
		"olivia": {2, 2}, // not the vault (admins only), not her own call
		"owen":   {2, 2}, // not the vault, not the note of his agent
		"aude":   {4, 3}, // an auditor is shown every pending call
	})

	// A delegation from adele lets olivia approve the vault call for her.
	if _, err := e.q.GiveDelegation(context.Background(), queue.DelegationInput{By: "adele", Channel: audit.ChannelWeb,
		Delegator: "adele", Delegate: "olivia", Until: e.clock.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	check("after a delegation", map[string][2]int{"adele": {4, 3}, "olivia": {3, 2}, "owen": {2, 2}})

	// Live: the deciders watch the queue; adele approves the plain note
	// (one of two approvals), so it leaves her count only.
	sockets := map[string]*websocket.Conn{}
	for _, name := range []string{"adele", "olivia", "owen"} {
		sockets[name], _ = browsers[name].mustDial("/ws")
	}
	presented := browsers["adele"].get("/calls/"+plain.ID).find("approve-presented").AttrOr("value", "")
	if p := browsers["adele"].post("/calls/"+plain.ID+"/approve", url.Values{"csrf": {browsers["adele"].csrf()},
		"digest": {plain.Digest}, "presented": {presented}}); p.status != 303 {
		t.Fatalf("adele approves: %d %q", p.status, p.find("decision-error").Text())
	}
	counts := func(pending, due int) map[string]int {
		return map[string]int{"pending": pending, "due": due, "blocked": 0, "unresolved": 0}
	}
	wsReadNeeds(t, sockets["adele"], counts(3, 2))
	check("after adele's approval", map[string][2]int{"adele": {3, 2}, "olivia": {3, 2}, "owen": {2, 2}})

	// The vault call reaches its tier: operators may approve it, except
	// owen, who owns its agent.
	e.clock.Advance(5 * time.Minute)
	if n, err := e.q.EscalateDue(context.Background()); err != nil || n != 1 {
		t.Fatalf("EscalateDue = %d, %v", n, err)
	}
	check("after a tier", map[string][2]int{"adele": {3, 2}, "olivia": {3, 2}, "owen": {2, 2}, "aude": {4, 3}})

	// A freeze of the notes stops them for everyone: each socket is
	// pushed its viewer's count.
	if _, err := e.q.Freeze(context.Background(), "adele", audit.ChannelWeb, "notes.write", "", "audit of the notes"); err != nil {
		t.Fatal(err)
	}
	wsReadNeeds(t, sockets["adele"], counts(1, 0))
	wsReadNeeds(t, sockets["olivia"], counts(1, 0))
	wsReadNeeds(t, sockets["owen"], counts(0, 0))
	check("under a freeze", map[string][2]int{"adele": {1, 0}, "olivia": {1, 0}, "owen": {0, 0}, "aude": {4, 3}})
}

// A counter-proposal that holds every approval it needs waits for its
// agent to accept it: nobody else is offered Approve on it, so nobody
// counts it to decide; its page says why and still offers Deny.
func TestNeedsCompleteCounterIsNotToDecide(t *testing.T) {
	e := newCounterConsoleEnv(t)
	orig := e.submit("agent:billing-bot", "payments-host", counterRefund)
	counter, err := e.q.Counter(context.Background(), queue.CounterInput{Operator: "oscar", Channel: audit.ChannelCLI, CallID: orig.ID,
		Digest: orig.Digest, Edits: map[string]json.RawMessage{"/amount_minor": json.RawMessage("4000")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(counter.Approvals) != counter.ApprovalsRequired || counter.Status != queue.StatusPending {
		t.Fatalf("the counter: %s, %d of %d approvals", counter.Status, len(counter.Approvals), counter.ApprovalsRequired)
	}
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/calls/" + counter.ID)
	if p.find("approve-form").Length() != 0 || p.find("approvals-complete").Length() != 1 || p.find("deny-form").Length() != 1 {
		t.Errorf("olivia's page of the complete counter: %q", fields(p.find("decide").Text()))
	}
	e.clock.Advance(needsMaxAge + time.Second)
	if pending, _ := toDecide(t, b); pending != 0 {
		t.Errorf("olivia counts %d to decide, want 0 (the original is countered, the counter complete)", pending)
	}
}

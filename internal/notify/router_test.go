package notify_test

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/queue"
)

const routedConfig = `
public_url: https://cs.example.com/
channels:
  hook:
    type: webhook
    url: https://hooks.example.com/cs
    secret: {env: S}
    include_args: true
  ops:
    type: webhook
    url: https://ops.example.com/cs
    secret: {env: S}
    events: [call.submitted, call.escalated, call.reminder]
  oncall:
    type: webhook
    url: https://oncall.example.com/cs
    secret: {env: S}
routes:
  - tools: [payments.*]
    notify: [hook, ops]
    escalate_after: 10m
    escalate_to: [oncall]
    remind_before: 2m
  - tools: [files.delete]
    notify: [ops]
`

func notices(ns []queue.Notice) string {
	var out []string
	for _, n := range ns {
		s := n.Kind + "@" + n.Channel
		if n.WhilePending {
			s += "?"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func TestRouterSchedulesRemindersAndEscalationsAtSubmission(t *testing.T) {
	cfg := mustConfig(t, routedConfig, map[string]string{"S": newSecret(t)})
	r := notify.NewRouter(cfg, "http://127.0.0.1:8080")
	c := testCall("call_a", t0)
	ns := r.Notices(submitted(c))
	want := "call.submitted@hook call.submitted@ops call.escalated@oncall? call.reminder@hook? call.reminder@ops? call.reminder@oncall?"
	if got := notices(ns); got != want {
		t.Fatalf("notices = %s\nwant      %s", got, want)
	}
	byKind := map[string]queue.Notice{}
	for _, n := range ns {
		byKind[n.Kind] = n
		if n.CallID != "call_a" || !strings.HasPrefix(n.EventID, "evt_") {
			t.Fatalf("notice %+v", n)
		}
	}
	if n := byKind[notify.CallSubmitted]; !n.At.Equal(t0) || !n.DueAt.Equal(t0) || n.WhilePending {
		t.Fatalf("submitted notice %+v", n)
	}
	if n := byKind[notify.CallEscalated]; !n.DueAt.Equal(t0.Add(10*time.Minute)) || !n.At.Equal(n.DueAt) {
		t.Fatalf("escalation due %s, want %s", n.DueAt, t0.Add(10*time.Minute))
	}
	if n := byKind[notify.CallReminder]; !n.DueAt.Equal(c.DecideBy.Add(-2 * time.Minute)) {
		t.Fatalf("reminder due %s, want 2m before %s", n.DueAt, c.DecideBy)
	}
	// One event, one id, on every channel it goes to.
	if ns[0].EventID != ns[1].EventID || ns[0].EventID == ns[2].EventID {
		t.Fatalf("event ids: %s %s %s", ns[0].EventID, ns[1].EventID, ns[2].EventID)
	}
	ev, err := notify.ParseEvent(byKind[notify.CallEscalated].Body)
	if err != nil || ev.Data.EscalatedAfter != 600 || ev.Data.URL != "https://cs.example.com/calls/call_a" || ev.Data.Status != "pending" {
		t.Fatalf("escalation body %+v, %v", ev, err)
	}
	// Arguments go only to the channel that opted in.
	for _, n := range ns {
		hasArgs := strings.Contains(string(n.Body), `"args":`)
		if hasArgs != (n.Channel == "hook") {
			t.Fatalf("%s body has args = %v: %s", n.Channel, hasArgs, n.Body)
		}
	}
}

func TestRouterDecisionsReachTheEscalationChannelsOnlyAfterEscalation(t *testing.T) {
	cfg := mustConfig(t, routedConfig, map[string]string{"S": newSecret(t)})
	r := notify.NewRouter(cfg, "")
	early := testCall("call_early", t0)
	if got := notices(r.Notices(approved(early, "alice", t0.Add(time.Minute)))); got != "call.approved@hook" {
		t.Fatalf("approved early: %s", got)
	}
	late := testCall("call_late", t0)
	ns := r.Notices(denied(late, "bob", "wrong invoice", t0.Add(11*time.Minute)))
	if got := notices(ns); got != "call.denied@hook call.denied@oncall" {
		t.Fatalf("denied after the escalation: %s", got)
	}
	ev, _ := notify.ParseEvent(ns[0].Body)
	if ev.Data.Status != "denied" || ev.Data.Decision == nil || ev.Data.Decision.By != "bob" || ev.Data.Decision.Reason != "wrong invoice" ||
		ev.Timestamp != "2030-03-04T10:11:00Z" {
		t.Fatalf("denied body %+v", ev)
	}
	exp := testCall("call_exp", t0)
	exp.Status, exp.DecidedAt = queue.StatusExpired, exp.DecideBy
	if got := notices(r.Notices(queue.Event{Kind: audit.KindExpired, Call: exp})); got != "call.expired@hook call.expired@oncall" {
		t.Fatalf("expired: %s", got)
	}
}

func TestRouterMapsQueueEvents(t *testing.T) {
	cfg := mustConfig(t, `
channels:
  hook: {type: webhook, url: "https://h.example.com/", secret: {env: S}}
`, map[string]string{"S": newSecret(t)})
	r := notify.NewRouter(cfg, "https://cs.example.com")
	c := testCall("call_a", t0)
	partial := c.Clone()
	partial.ApprovalsRequired = 2
	partial.Approvals = []queue.Approval{{Operator: "alice", At: t0}}
	redeemed := c.Clone()
	redeemed.Status, redeemed.DecidedAt, redeemed.RedeemedAt = queue.StatusRedeemed, t0, t0.Add(time.Second)
	outcome := redeemed.Clone()
	outcome.Outcome = &queue.Outcome{Status: "failed", Detail: "card declined", At: t0.Add(2 * time.Second)}
	cancelled := c.Clone()
	cancelled.Status, cancelled.DecidedAt = queue.StatusCancelled, t0
	countered := c.Clone()
	countered.Status, countered.DecidedAt, countered.CounteredBy = queue.StatusCountered, t0.Add(3*time.Second), "call_counter"
	cases := []struct {
		ev   queue.Event
		want string
	}{
		{queue.Event{Kind: audit.KindApproved, Call: partial}, ""}, // still waiting for the second approval
		{queue.Event{Kind: audit.KindRedeemed, Call: redeemed}, "call.redeemed@hook"},
		{queue.Event{Kind: audit.KindOutcome, Call: outcome}, "call.outcome@hook"},
		{queue.Event{Kind: audit.KindCancelled, Call: cancelled}, "call.cancelled@hook"},
		{queue.Event{Kind: audit.KindCountered, Call: countered, Editor: "alice"}, "call.countered@hook"},
		{queue.Event{Kind: audit.KindRedemptionRefused, Call: c, Reason: "replayed"}, ""},
		{queue.Event{Kind: audit.KindRetryBlocked, Block: &queue.Block{Actor: "a", Tool: "t"}}, ""},
	}
	for _, tc := range cases {
		if got := notices(r.Notices(tc.ev)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.ev.Kind, got, tc.want)
		}
	}
	ns := r.Notices(queue.Event{Kind: audit.KindOutcome, Call: outcome})
	var ev notify.Event
	json.Unmarshal(ns[0].Body, &ev)
	if ev.Data.Outcome == nil || ev.Data.Outcome.Status != "failed" || ev.Data.Outcome.Detail != "card declined" || !ns[0].At.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("outcome %+v at %s", ev.Data, ns[0].At)
	}
	ns = r.Notices(queue.Event{Kind: audit.KindCountered, Call: countered, Editor: "alice"})
	ev = notify.Event{}
	json.Unmarshal(ns[0].Body, &ev)
	if ev.Data.CounteredBy != "call_counter" || ev.Data.Status != "countered" || !ns[0].At.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("countered %+v at %s", ev.Data, ns[0].At)
	}
	// call.countered names the editor as the one who decided, and the
	// counter in the reason.
	if d := ev.Data.Decision; d == nil || d.By != "alice" || !strings.Contains(d.Reason, "call_counter") {
		t.Fatalf("countered names %+v as its decision, want alice and the counter", d)
	}
	// With no routes section, every channel hears of every tool.
	if got := notices(r.Notices(submitted(testCall("call_b", t0)))); got != "call.submitted@hook" {
		t.Fatalf("default route: %q", got)
	}
	tr := r.ToolReview("github/create_issue", "the upstream definition changed", "/admin/tools", t0)
	if len(tr) != 1 || tr[0].Kind != notify.ToolReviewNeeded || tr[0].CallID != "" {
		t.Fatalf("tool review notices %+v", tr)
	}
	ev, err := notify.ParseEvent(tr[0].Body)
	if err != nil || ev.Data.Tool != "github/create_issue" || ev.Data.URL != "https://cs.example.com/admin/tools" || ev.Data.Reason == "" {
		t.Fatalf("tool review body %+v %v", ev, err)
	}
}

func TestRouterUnroutedToolsAndShortDeadlines(t *testing.T) {
	cfg := mustConfig(t, routedConfig, map[string]string{"S": newSecret(t)})
	r := notify.NewRouter(cfg, "")
	other := testCall("call_x", t0)
	other.Tool = "releases.deploy"
	if ns := r.Notices(submitted(other)); len(ns) != 0 {
		t.Fatalf("a tool no route matches got %s", notices(ns))
	}
	short := testCall("call_s", t0)
	short.DecideBy = t0.Add(90 * time.Second) // before the escalation, and the reminder would be before submission
	if got := notices(r.Notices(submitted(short))); got != "call.submitted@hook call.submitted@ops" {
		t.Fatalf("short deadline: %s", got)
	}
}

// TestRouterAddsTheRulesChannels: a rule's notify list reaches its channels
// with every event of the call, even for a tool no route matches.
func TestRouterAddsTheRulesChannels(t *testing.T) {
	cfg := mustConfig(t, routedConfig, map[string]string{"S": newSecret(t)})
	r := notify.NewRouter(cfg, "")
	c := testCall("call_r", t0)
	c.Notify = []string{"oncall"}
	if got := notices(r.Notices(submitted(c))); got != "call.submitted@hook call.submitted@ops call.submitted@oncall call.escalated@oncall? call.reminder@hook? call.reminder@ops? call.reminder@oncall?" {
		t.Fatalf("submitted: %s", got)
	}
	if got := notices(r.Notices(approved(c, "alice", t0.Add(time.Minute)))); got != "call.approved@hook call.approved@oncall" {
		t.Fatalf("approved: %s", got)
	}
	other := testCall("call_o", t0)
	other.Tool, other.Notify = "releases.deploy", []string{"oncall", "nowhere"}
	if got := notices(r.Notices(submitted(other))); got != "call.submitted@oncall" {
		t.Fatalf("unrouted tool with a rule's channels: %s", got)
	}
}

// TestRouterAnnouncesLeaseExpiryAndResolution: a lapsed lease and its
// resolution reach the call's channels, with what a person needs.
func TestRouterAnnouncesLeaseExpiryAndResolution(t *testing.T) {
	cfg := mustConfig(t, routedConfig, map[string]string{"S": newSecret(t)})
	r := notify.NewRouter(cfg, "http://127.0.0.1:8080")
	c := testCall("call_l", t0)
	c.Status, c.RedeemedAt, c.LeaseUntil = queue.StatusRedeemed, t0.Add(time.Minute), t0.Add(6*time.Minute)
	c.Outcome = &queue.Outcome{Status: queue.OutcomeLeaseExpired, At: c.LeaseUntil}
	ns := r.Notices(queue.Event{Kind: audit.KindLeaseExpired, Call: c.Clone()})
	if got := notices(ns); got != "call.lease_expired@hook" {
		t.Fatalf("lease expiry notices = %s", got)
	}
	ev, err := notify.ParseEvent(ns[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Data.Outcome == nil || ev.Data.Outcome.Status != "lease_expired" || ev.Data.LeaseUntil != "2030-03-04T10:06:00Z" ||
		!ns[0].At.Equal(c.LeaseUntil) || !notify.Decided(ev.Type) {
		t.Fatalf("lease expiry event %+v at %s", ev.Data, ns[0].At)
	}
	c.Resolution = &queue.Resolution{Verdict: queue.VerdictNotExecuted, By: "bob", Note: "no refund in the ledger",
		Evidence: "https://ledger.example/r", At: t0.Add(time.Hour)}
	ns = r.Notices(queue.Event{Kind: audit.KindResolved, Call: c.Clone()})
	if got := notices(ns); got != "call.resolved@hook" {
		t.Fatalf("resolution notices = %s", got)
	}
	var body struct {
		Data struct {
			Resolution map[string]string `json:"resolution"`
		} `json:"data"`
	}
	if err := json.Unmarshal(ns[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if w := map[string]string{"verdict": "not_executed", "by": "bob", "note": "no refund in the ledger", "evidence": "https://ledger.example/r"}; !maps.Equal(body.Data.Resolution, w) || !ns[0].At.Equal(t0.Add(time.Hour)) {
		t.Fatalf("resolution %v at %s, want %v", body.Data.Resolution, ns[0].At, w)
	}
}

// TestRouterAnnouncesAllowances: giving an allowance and its end reach the
// channels of its tool's route that want them, with the allowance, its
// link and why it ended; a confirmation announces nothing.
func TestRouterAnnouncesAllowances(t *testing.T) {
	cfg := mustConfig(t, routedConfig, map[string]string{"S": newSecret(t)})
	r := notify.NewRouter(cfg, "http://127.0.0.1:8080")
	a := &queue.Allowance{ID: "alw_1", Actor: "agent:billing", Audience: "payments-host", Tool: "payments.refund",
		ScopeDigest: strings.Repeat("ab", 32), Uses: 5, Used: 0, Until: t0.Add(time.Hour), Giver: "oidc:idp.example.com/00u-1",
		Confirmers: []string{"oidc:idp.example.com/00u-1"}, ConfirmersNeeded: 1, GivenAt: t0}
	given := r.Notices(queue.Event{Kind: queue.KindAllowanceGiven, Allowance: a})
	if got := notices(given); got != "allowance.given@hook" {
		t.Fatalf("given: %q, want the route's channel that takes every event (ops lists its events)", got)
	}
	var ev notify.Event
	if err := json.Unmarshal(given[0].Body, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Type != notify.AllowanceGiven || ev.Data.Allowance == nil || ev.Data.Allowance.ID != "alw_1" || ev.Data.Allowance.Uses != 5 ||
		ev.Data.URL != "https://cs.example.com/allowances/alw_1" || ev.Data.Tool != "payments.refund" || ev.Timestamp == "" {
		t.Errorf("given: %+v %+v", ev, ev.Data.Allowance)
	}
	if ev.Named(notify.HidePrincipals); ev.Data.Allowance.GiverName != "(single sign-on user)" {
		t.Errorf("the giver is shown as %q", ev.Data.Allowance.GiverName)
	}
	if got := r.Notices(queue.Event{Kind: queue.KindAllowanceConfirmed, Allowance: a}); len(got) != 0 {
		t.Errorf("a confirmation announced %q", notices(got))
	}
	ended := a.Clone()
	ended.EndedAt, ended.EndReason, ended.EndedBy, ended.Used = t0.Add(time.Minute), queue.EndRevoked, "bob", 2
	for _, kind := range []string{queue.KindAllowanceRevoked, queue.KindAllowanceEnded} {
		ns := r.Notices(queue.Event{Kind: kind, Allowance: ended})
		if notices(ns) != "allowance.ended@hook" {
			t.Fatalf("%s: %q", kind, notices(ns))
		}
		var ev notify.Event
		if err := json.Unmarshal(ns[0].Body, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Data.Reason != "revoked" || ev.Data.Allowance.EndedBy != "bob" || ev.Data.Allowance.Used != 2 || !ns[0].At.Equal(ended.EndedAt) {
			t.Errorf("%s: %+v %+v", kind, ev.Data, ev.Data.Allowance)
		}
	}
	other := a.Clone()
	other.Tool = "weather.search"
	if got := r.Notices(queue.Event{Kind: queue.KindAllowanceGiven, Allowance: other}); len(got) != 0 {
		t.Errorf("a tool no route names: %q", notices(got))
	}
}

// TestRouterTierReached: a call reaching an escalation tier is announced
// as call.escalated, at once, to its route's channels and to those its
// tiers added (Call.Notify); files.delete's route names only ops.
func TestRouterTierReached(t *testing.T) {
	cfg := mustConfig(t, routedConfig, map[string]string{"S": newSecret(t)})
	r := notify.NewRouter(cfg, "")
	c := testCall("call_t", t0)
	c.Tool, c.Notify = "files.delete", []string{"oncall"}
	ns := r.Notices(queue.Event{Kind: queue.KindEscalated, Call: c})
	if got, want := notices(ns), "call.escalated@ops call.escalated@oncall"; got != want {
		t.Fatalf("notices %q, want %q", got, want)
	}
}

package answer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/queue"
)

// The call object, the redemption and the lease were once built as maps.
// mapCall, mapRedemption and mapLease are those builders, kept as the
// reference: the typed answers must write the very same bytes.

// mapNow is the instant mapCall judges grant_state at.
var mapNow = time.Date(2026, 3, 2, 14, 10, 0, 0, time.UTC)

func mapCall(c *queue.Call, name func(string) string) map[string]any {
	v := map[string]any{
		"id":         c.ID,
		"status":     c.Shown(),
		"actor":      c.Actor,
		"audience":   c.Audience,
		"tool":       c.Tool,
		"target":     c.Target,
		"args":       c.Args,
		"digest":     c.Digest,
		"created_at": c.CreatedAt.UTC().Format(time.RFC3339Nano),
		"decide_by":  c.DecideBy.UTC().Format(time.RFC3339Nano),
		"approvals":  mapApprovals(c, name),
	}
	if len(c.Owners) > 0 {
		v["owners"] = account.PublicOwners(c.Owners, name)
	}
	if c.Rationale != "" {
		v["rationale"] = c.Rationale
	}
	var comments []map[string]any
	for _, a := range c.Approvals {
		if a.Comment != "" {
			comments = append(comments, map[string]any{"by": name(a.Operator), "comment": a.Comment, "at": a.At.UTC().Format(time.RFC3339Nano)})
		}
	}
	if comments != nil {
		v["comments"] = comments
	}
	if c.Shown() == queue.StatusApproved {
		v["grant"] = c.Grant
		v["grant_expires_at"] = c.GrantExpiresAt.UTC().Format(time.RFC3339)
	}
	switch {
	case c.Status == queue.StatusRedeemed:
		v["grant_state"] = "redeemed"
	case c.Status == queue.StatusApproved && c.Revoked != nil:
		v["grant_state"] = "revoked"
	case c.Status == queue.StatusApproved && mapNow.Unix() >= c.GrantExpiresAt.Unix():
		v["grant_state"] = "expired"
	case c.Status == queue.StatusApproved:
		v["grant_state"] = "live"
	}
	if c.Revoked != nil {
		v["revocation"] = map[string]string{"by": name(c.Revoked.By), "reason": c.Revoked.Reason,
			"at": c.Revoked.At.UTC().Format(time.RFC3339Nano)}
	}
	if c.Denial != nil {
		v["decision"] = map[string]string{"by": name(c.Denial.By), "reason": c.Denial.Reason,
			"at": c.Denial.At.UTC().Format(time.RFC3339Nano)}
	}
	if rule := c.DecidedByRule(); rule != "" {
		v["decided_by_rule"] = rule
	}
	if c.Status == queue.StatusRedeemed {
		v["redeemed_at"] = c.RedeemedAt.UTC().Format(time.RFC3339Nano)
		if !c.LeaseUntil.IsZero() {
			v["lease_until"] = c.LeaseUntil.UTC().Format(time.RFC3339Nano)
		}
	}
	if c.Outcome != nil {
		v["outcome"] = map[string]string{"status": c.Outcome.Status, "detail": c.Outcome.Detail,
			"at": c.Outcome.At.UTC().Format(time.RFC3339Nano)}
	}
	if r := c.Resolution; r != nil {
		res := map[string]string{"verdict": r.Verdict, "by": name(r.By), "note": r.Note, "at": r.At.UTC().Format(time.RFC3339Nano)}
		if r.Evidence != "" {
			res["evidence"] = r.Evidence
		}
		v["resolution"] = res
	}
	v["lineage"] = mapLineage(c, v, name)
	return v
}

func mapLineage(c *queue.Call, v map[string]any, name func(string) string) map[string]any {
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	proposed := map[string]any{"by": c.Actor, "at": ts(c.CreatedAt)}
	if c.Digest != "" {
		proposed["digest"] = c.Digest
	}
	if c.SubmittedBy != "" {
		proposed["token"] = c.SubmittedBy
	}
	l := map[string]any{"proposed": proposed}
	var shown, decided []map[string]any
	for _, a := range c.Approvals {
		if p := a.Presented; p != nil {
			shown = append(shown, map[string]any{"digest": a.Digest, "by": name(a.Operator), "page": p.Page, "at": ts(p.At)})
		}
		d := map[string]any{"digest": a.Digest, "by": name(a.Operator), "verdict": "approved", "method": a.Method,
			"human": a.Human(), "at": ts(a.At)}
		if a.Via != "" {
			d["via"] = a.Via
		}
		if a.Digest == "" {
			delete(d, "digest")
		}
		if a.Method == "" {
			delete(d, "method")
		}
		decided = append(decided, d)
	}
	if c.Denial != nil {
		decided = append(decided, map[string]any{"by": name(c.Denial.By), "verdict": "denied", "at": ts(c.Denial.At)})
	}
	if shown != nil {
		l["presented"] = shown
	}
	if decided != nil {
		l["decided"] = decided
	}
	if c.Status == queue.StatusRedeemed {
		r := map[string]any{"by": c.Actor, "at": ts(c.RedeemedAt)}
		if c.Digest != "" {
			r["digest"] = c.Digest
		}
		if c.RedeemedBy != "" {
			r["token"] = c.RedeemedBy
		}
		l["redeemed"] = r
	}
	for _, k := range []string{"outcome", "resolution"} {
		if x, ok := v[k]; ok {
			l[k] = x
		}
	}
	return l
}

func mapApprovals(c *queue.Call, name func(string) string) map[string]any {
	v := map[string]any{"required": c.ApprovalsRequired, "received": len(c.Approvals)}
	if len(c.Approvals) == 0 {
		return v
	}
	given := make([]map[string]any, len(c.Approvals))
	for i, a := range c.Approvals {
		g := map[string]any{"by": name(a.Operator), "channel": a.Channel, "method": a.Method,
			"human": a.Human(), "digest": a.Digest, "at": a.At.UTC().Format(time.RFC3339Nano)}
		if a.Via != "" {
			g["via"] = a.Via
		}
		if p := a.Presented; p != nil {
			g["presented"] = map[string]string{"page": p.Page, "at": p.At.UTC().Format(time.RFC3339Nano)}
		}
		given[i] = g
	}
	v["given"] = given
	return v
}

func mapRedemption(r *queue.Redemption) map[string]any {
	out := map[string]any{"decision": r.Decision(), "checks": r.Checks}
	if r.CallID != "" {
		out["call_id"] = r.CallID
	}
	if r.Accepted {
		out["envelope"] = string(r.Call.Envelope)
		out["digest"] = r.Call.Digest
		out["lease_until"] = r.Call.LeaseUntil.UTC().Format(time.RFC3339Nano)
		out["outcome_within"] = int64(r.Call.OutcomeWithinOrDefault() / time.Second)
	} else {
		out["reason"] = r.Reason
		out["message"] = redeemMessage(r.Reason)
	}
	if r.Freeze != nil {
		out["message"] = fmt.Sprintf("%s is frozen by an operator since %s: %s. Nothing was consumed; the grant may still be redeemed once the freeze is lifted, while it lives.",
			r.Freeze.Scope(), r.Freeze.At.UTC().Format(time.RFC3339), r.Freeze.Reason)
		out["freeze"] = map[string]string{"reason": r.Freeze.Reason, "since": r.Freeze.At.UTC().Format(time.RFC3339)}
	}
	return out
}

func mapLease(c *queue.Call) map[string]any {
	return map[string]any{
		"call_id":     c.ID,
		"lease_until": c.LeaseUntil.UTC().Format(time.RFC3339Nano),
		"extend_max":  int64(c.OutcomeWithinOrDefault() / time.Second),
	}
}

// sameBytes fails unless old and typed marshal to the same bytes, compact
// and indented (the command line prints the call indented).
func sameBytes(t *testing.T, what string, old, typed any) {
	t.Helper()
	for _, indent := range []string{"", "  "} {
		var a, b bytes.Buffer
		for _, x := range []struct {
			buf *bytes.Buffer
			v   any
		}{{&a, old}, {&b, typed}} {
			enc := json.NewEncoder(x.buf)
			enc.SetIndent("", indent)
			if err := enc.Encode(x.v); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Errorf("%s: the typed answer differs from the map\n map: %s\nwire: %s", what, a.Bytes(), b.Bytes())
			return
		}
	}
}

func mustArgs(t testing.TB, s string) canonical.Object {
	v, err := canonical.Parse([]byte(s))
	if err != nil {
		t.Fatalf("args %s: %v", s, err)
	}
	return v.(canonical.Object)
}

// identityCalls are calls in every state the call object shows, with times
// of every precision and in other zones than UTC.
func identityCalls(t *testing.T) map[string]*queue.Call {
	paris := time.FixedZone("CET", 3600)
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 600_000_000, paris)
	base := func() *queue.Call {
		return &queue.Call{ID: "call_abcdefghijklmnopqrstuvwx", Actor: "agent:billing-bot", Audience: "payments-host",
			Tool: "payments.refund", Target: "invoice:INV-1 <&>", Digest: strings.Repeat("ab", 32),
			Args:   mustArgs(t, `{"amount_minor":9007199254740991,"currency":"USD","notes":"<script>&\u2028 é 😀","n":{"a":[1,-2,{}]}}`),
			Status: queue.StatusPending, ApprovalsRequired: 2,
			CreatedAt: t0, DecideBy: t0.Add(15 * time.Minute).Add(123456789)}
	}
	calls := map[string]*queue.Call{}
	calls["bare"] = base()
	bare := base()
	bare.Args, bare.ApprovalsRequired, bare.CreatedAt, bare.DecideBy = nil, 1, time.Time{}, time.Unix(0, 0)
	calls["nil args, zero times"] = bare

	owned := base()
	owned.Rationale = "charged twice"
	owned.Owners = []string{"olga", "oidc:idp.example.com/00u-olga", "team:payments"}
	owned.Approvals = []queue.Approval{
		{Operator: "alice", Channel: audit.ChannelWeb, At: t0.Add(time.Second), Comment: "looks right", Method: queue.MethodClick,
			Digest: "d1", Presented: &queue.Presented{Page: "call", At: t0.Add(time.Second / 2)}},
		{Operator: "bob", Channel: audit.ChannelWeb, At: t0.Add(2 * time.Second), Passkey: &queue.ApprovalPasskey{Name: "laptop", Evidence: []byte(`{}`)},
			Method: queue.MethodPasskey, Digest: "d1", Presented: &queue.Presented{Page: "call", At: t0}},
		{Operator: "carol", Channel: audit.ChannelCLI, At: t0.Add(3*time.Second + 1), Method: queue.MethodCommand, Digest: "d1"},
		{Operator: "policy:small", Channel: queue.ChannelPolicy, At: t0.Add(4 * time.Second), Comment: "rule <b>", Method: queue.MethodPolicy, Digest: "d1"},
		{Operator: "dave", Channel: queue.ChannelAllowance, At: t0.Add(5 * time.Second), Method: queue.MethodAllowance, Via: "alw_1", Digest: "d1"},
		{Operator: "erin", Channel: audit.ChannelWeb, At: t0.Add(6 * time.Second), Method: queue.MethodBatch, Via: "batch_1", Digest: "d1",
			Presented: &queue.Presented{Page: "batch", At: t0.Add(5 * time.Second)}},
	}
	calls["owners, approvals, comments"] = owned

	approved := base()
	approved.Status = queue.StatusApproved
	approved.Approvals = []queue.Approval{{Operator: "policy:small", Channel: queue.ChannelPolicy, At: t0}}
	approved.Grant = "aaa.bbb.ccc"
	approved.GrantExpiresAt = t0.Add(5*time.Minute + 999_999_999)
	calls["approved by a rule"] = approved

	revoked := base()
	revoked.Status = queue.StatusApproved
	revoked.Grant, revoked.GrantExpiresAt = "aaa.bbb.ccc", t0.Add(time.Minute)
	revoked.Revoked = &queue.Revocation{By: "oidc:idp.example.com/00u-olga", Reason: "wrong invoice", At: t0.Add(time.Nanosecond)}
	calls["revoked"] = revoked

	denied := base()
	denied.Status = queue.StatusDenied
	denied.Denial = &queue.Denial{By: "policy:no-weekends", Channel: queue.ChannelPolicy, Reason: "weekend", At: t0}
	calls["denied by a rule"] = denied

	deniedBy := base()
	deniedBy.Status = queue.StatusDenied
	deniedBy.Denial = &queue.Denial{By: "alice", Channel: audit.ChannelWeb, Reason: "", At: t0.Add(10)}
	calls["denied by a person, empty reason"] = deniedBy

	redeemed := base()
	redeemed.Status = queue.StatusRedeemed
	redeemed.Grant = "kept.out.ofview"
	redeemed.RedeemedAt = t0.Add(time.Minute)
	redeemed.LeaseUntil = t0.Add(6 * time.Minute)
	calls["redeemed"] = redeemed

	noLease := base()
	noLease.Status = queue.StatusRedeemed
	noLease.RedeemedAt = t0.Add(time.Minute)
	calls["redeemed without a lease"] = noLease

	reported := base()
	reported.Status = queue.StatusRedeemed
	reported.RedeemedAt, reported.LeaseUntil = t0.Add(time.Minute), t0.Add(2*time.Minute)
	reported.Outcome = &queue.Outcome{Status: "succeeded", At: t0.Add(90 * time.Second)}
	calls["redeemed with an outcome, no detail"] = reported

	resolved := base()
	resolved.Status = queue.StatusRedeemed
	resolved.RedeemedAt, resolved.LeaseUntil = t0.Add(time.Minute), t0.Add(2*time.Minute)
	resolved.Outcome = &queue.Outcome{Status: "lease_expired", Detail: "nobody said", At: t0.Add(3 * time.Minute)}
	resolved.Resolution = &queue.Resolution{Verdict: "executed", By: "bob", Note: "in the ledger", Evidence: "https://ledger.example/r/5", At: t0.Add(time.Hour)}
	calls["resolved with evidence"] = resolved

	noEvidence := base()
	noEvidence.Status = queue.StatusRedeemed
	noEvidence.RedeemedAt = t0
	noEvidence.Resolution = &queue.Resolution{Verdict: "not_executed", By: "bob", Note: "no", At: t0}
	calls["resolved without evidence"] = noEvidence

	for _, s := range []queue.Status{queue.StatusExpired, queue.StatusCancelled} {
		c := base()
		c.Status = s
		calls[string(s)] = c
	}
	return calls
}

func TestCallWritesTheMapsBytes(t *testing.T) {
	names := map[string]string{"oidc:idp.example.com/00u-olga": "olga", "alice": "Alice A."}
	public := func(n string) string {
		if p, ok := names[n]; ok {
			return p
		}
		return n
	}
	for name, c := range identityCalls(t) {
		got, err := Call(c, public, mapNow)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sameBytes(t, name, mapCall(c, public), got)
		stored, err := CallAsStored(c, mapNow)
		if err != nil {
			t.Fatal(err)
		}
		sameBytes(t, name+" (as stored)", mapCall(c, func(s string) string { return s }), stored)
	}
}

// TestCallTimesWriteTheMapsBytes: any instant, in any zone, is written as
// the map wrote it, to the second where the map used RFC 3339 and every
// digit where it used RFC3339Nano. The zero instant is left out: the map
// wrote a redeemed call's redeemed_at and an approved call's
// grant_expires_at even when zero (0001-01-01T00:00:00Z), which no stored
// call has; the typed answer leaves a zero time out.
func TestCallTimesWriteTheMapsBytes(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		instant := func(label string) time.Time {
			sec := rapid.Int64Range(-62135596800+1, 253402300799-86400).Draw(rt, label+"_sec") // years 1 to 9999
			nsec := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, 999_999_999),
				rapid.SampledFrom([]int64{100_000_000, 120_000_000, 1, 10, 999_999_999})).Draw(rt, label+"_nsec")
			zone := time.FixedZone("z", rapid.IntRange(-12, 14).Draw(rt, label+"_zone")*3600)
			return time.Unix(sec, nsec).In(zone)
		}
		c := &queue.Call{ID: "call_x", Status: queue.StatusApproved, ApprovalsRequired: 1,
			CreatedAt: instant("created"), DecideBy: instant("decide"), Grant: "a.b.c", GrantExpiresAt: instant("grant"),
			Approvals: []queue.Approval{{Operator: "alice", Channel: "web", At: instant("approval"), Comment: "c",
				Method: "click", Digest: "d", Presented: &queue.Presented{Page: "call", At: instant("presented")}}},
			Denial:  &queue.Denial{By: "bob", At: instant("denial")},
			Revoked: &queue.Revocation{By: "bob", At: instant("revoked")},
			Outcome: &queue.Outcome{Status: "failed", At: instant("outcome")}}
		got, err := Call(c, func(s string) string { return s }, mapNow)
		if err != nil {
			rt.Fatal(err)
		}
		old, _ := json.Marshal(mapCall(c, func(s string) string { return s }))
		typed, err := json.Marshal(got)
		if err != nil {
			rt.Fatal(err)
		}
		if !bytes.Equal(old, typed) {
			rt.Fatalf("map:  %s\nwire: %s", old, typed)
		}
		c.Status, c.RedeemedAt, c.LeaseUntil = queue.StatusRedeemed, instant("redeemed"), instant("lease")
		got, _ = Call(c, func(s string) string { return s }, mapNow)
		old, _ = json.Marshal(mapCall(c, func(s string) string { return s }))
		if typed, _ = json.Marshal(got); !bytes.Equal(old, typed) {
			rt.Fatalf("map:  %s\nwire: %s", old, typed)
		}
		lease, _ := json.Marshal(mapLease(c))
		if typed, _ = json.Marshal(Lease(c)); !bytes.Equal(lease, typed) {
			rt.Fatalf("map:  %s\nwire: %s", lease, typed)
		}
	})
}

func TestRedemptionAndLeaseWriteTheMapsBytes(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 670_000_000, time.FixedZone("x", -5*3600))
	accepted := grant.NewResult()
	for _, n := range grant.CheckNames() {
		accepted.Set(n, true, "")
	}
	rejected := grant.NewResult()
	rejected.Set("shape", true, "")
	rejected.Set("signature", false, "bad_signature")
	call := &queue.Call{ID: "call_abc", Envelope: []byte(`{"actor":"a","args":{"n":"<&>"},"v":1}`), Digest: strings.Repeat("0f", 32),
		LeaseUntil: at, OutcomeWithin: 90 * time.Second}
	tests := map[string]*queue.Redemption{
		"accepted":               {Accepted: true, CallID: "call_abc", Checks: accepted.Checks, Call: call},
		"accepted, default wait": {Accepted: true, CallID: "call_abc", Checks: accepted.Checks, Call: &queue.Call{ID: "call_abc", Envelope: []byte(`{}`), Digest: call.Digest, LeaseUntil: at}},
		"replayed":               {CallID: "call_abc", Reason: "replayed", Checks: accepted.Checks},
		"unreadable":             {Reason: "bad_signature", Checks: rejected.Checks},
		"no checks":              {Reason: "malformed"},
		"tool changed":           {CallID: "c", Reason: grant.ReasonToolChanged, Checks: rejected.Checks},
		"unknown reason":         {CallID: "c", Reason: "something_new", Checks: rejected.Checks},
		"frozen": {CallID: "call_abc", Reason: grant.ReasonFrozen, Checks: rejected.Checks,
			Freeze: &queue.Freeze{Tool: "payments.refund", Reason: "incident <42>", At: at}},
	}
	for _, reason := range []string{"expired", "not_yet_valid", "digest_mismatch", "tool_mismatch", "target_mismatch", "actor_mismatch", "audience_mismatch", "revoked"} {
		tests[reason] = &queue.Redemption{CallID: "c", Reason: reason, Checks: rejected.Checks}
	}
	for name, r := range tests {
		sameBytes(t, name, mapRedemption(r), Redemption(r))
	}
	sameBytes(t, "lease", mapLease(call), Lease(call))
	sameBytes(t, "lease with the default", mapLease(&queue.Call{ID: "c"}), Lease(&queue.Call{ID: "c"}))
}

func TestErrorWritesTheProblemsBytes(t *testing.T) {
	tests := []*problem.Error{
		problem.New(404, "not_found", "no such call"),
		{Status: 422, Code: "invalid_arguments", Message: "2 problems <here>", Problems: canonical.Problems{
			{Code: "unknown_field", Path: "/args/sql", Message: "no", Offset: 7}, {Code: "missing_field", Path: "/args/currency", Message: "required", Offset: -1}}},
		{Status: 422, Code: "invalid_arguments", Message: "none", Problems: canonical.Problems{}},
		{Status: 409, Code: "previously_denied", Message: "m", Reason: "r", CallID: "call_x"},
		{Status: 429, Code: "retry_limit", Message: "m", Hint: "h"},
	}
	for _, e := range tests {
		sameBytes(t, e.Code, map[string]any{"error": e}, Error(e))
	}
	cp := audit.Checkpoint{Seq: 7, Head: strings.Repeat("a", 64), Time: "2030-01-02T03:04:05.000000000Z", KID: "0123456789abcdef", PublicKey: "k", Signature: "s"}
	sameBytes(t, "checkpoint", cp, Checkpoint(cp))
}

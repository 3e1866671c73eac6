package console

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/web/templates"
)

// lifecycle lays out a call's life as separate facts, each from its own
// audit entries: proposed; decided (by whom, how); grant minted; redeemed
// (by which token, with which checks); outcome reported or lease expired;
// resolved. It ends with what the entries prove: for a call that was never
// redeemed, that no redemption was accepted, and how far the audit chain
// around them verifies. Everything shown comes from the entries (and the
// call's status), revealed as text.
func lifecycle(entries []audit.Entry, call *queue.Call, now time.Time, chain templates.ChainStatus) []templates.LifeStep {
	var steps []templates.LifeStep
	var redeemedSeq, lastSeq int64
	refused := 0
	extended, heartbeats := -1, 0 // the one lease_extended step, and how many it stands for
	for _, e := range entries {
		lastSeq = e.Seq
		d := details{e.Details}
		at, _ := time.Parse(time.RFC3339Nano, e.Time)
		st := templates.LifeStep{Seq: e.Seq, Time: at}
		fact := func(label string, value templates.Text, mono, agent bool) {
			st.Facts = append(st.Facts, templates.Fact{Label: label, Value: value, Mono: mono, Agent: agent})
		}
		text := func(label, name string, mono, agent bool) {
			if s, ok := d.str(name); ok && s != "" {
				fact(label, reveal.Of(s), mono, agent)
			}
		}
		stamp := func(label, name string) {
			if s, ok := d.str(name); ok {
				if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
					fact(label, templates.Plain(t.UTC().Format("2006-01-02 15:04:05 UTC")), false, false)
				}
			}
		}
		by := func() { fact("By", reveal.Of(e.Principal), true, false) }
		how := func() { fact("How", templates.Plain(howDecided(e.Principal, e.Channel)), false, false) }
		switch e.Kind {
		case audit.KindSubmitted:
			st.Kind, st.Title = "proposed", "Proposed"
			by()
			text("Digest", "digest", true, false)
			stamp("Decide by", "decide_by")
		case audit.KindApproved:
			st.Kind, st.Title = "decided", "Approved"
			if r, ok1 := d.num("received"); ok1 {
				if q, ok2 := d.num("required"); ok2 {
					st.Title = fmt.Sprintf("Approved (%d of %d)", r, q)
				}
			}
			by()
			how()
			text("Digest approved", "digest", true, false)
		case audit.KindDenied:
			st.Kind, st.Title = "decided", "Denied"
			by()
			how()
			text("Reason", "reason", false, true)
		case audit.KindExpired:
			st.Kind, st.Title = "decided", "Expired: nobody decided in time"
			stamp("Decide by", "decide_by")
		case audit.KindCancelled:
			st.Kind, st.Title = "decided", "Cancelled by the agent"
			by()
		case audit.KindRevoked:
			st.Kind, st.Title = "revoked", "Grant revoked"
			by()
			how()
			text("Reason", "reason", false, true)
			text("Grant id", "jti", true, false)
		case audit.KindGranted:
			st.Kind, st.Title = "granted", "Grant minted"
			text("Grant id", "jti", true, false)
			text("Key id", "kid", true, false)
			if n, ok := d.num("exp"); ok {
				fact("Expires", templates.Plain(time.Unix(n, 0).UTC().Format("2006-01-02 15:04:05 UTC")), false, false)
			}
		case audit.KindRedeemed:
			redeemedSeq = e.Seq
			st.Kind, st.Title = "redeemed", "Redeemed"
			by()
			text("Token", "token", true, false)
			text("Grant id", "jti", true, false)
			if checks := checkNames(d); checks != "" {
				fact("Checks", templates.Plain(checks), false, false)
			}
			stamp("Lease until", "lease_until")
		case audit.KindRedemptionRefused:
			refused++
			st.Kind, st.Warn = "refused", true
			reason, _ := d.str("reason")
			st.Title = "Redemption refused: nothing consumed"
			by()
			fact("Reason", reveal.Of(reason), true, false)
			if checks := checkNames(d); checks != "" {
				fact("Checks", templates.Plain(checks), false, false)
			}
		case audit.KindLeaseExtended:
			// Heartbeats are one step: how many, and the last lease end.
			if extended < 0 {
				extended = len(steps)
				steps = append(steps, templates.LifeStep{Kind: "lease_extended"})
			}
			heartbeats++
			st.Kind, st.Title = "lease_extended", "Lease extended by heartbeats"
			st.Facts = []templates.Fact{{Label: "Heartbeats", Value: templates.Plain(strconv.Itoa(heartbeats))}}
			stamp("Last lease end", "lease_until")
			text("Token", "token", true, false)
			steps[extended] = st
			continue
		case audit.KindOutcome:
			status, _ := d.str("status")
			st.Kind, st.Title = "outcome", "Outcome reported: "+status
			st.Warn = status == queue.OutcomeUnknown
			by()
			text("Detail", "detail", false, true)
			if r, ok := d.str("replaces"); ok {
				fact("Late", templates.Plain("after the lease ended; it replaces "+r), false, false)
			} else if late, ok := d.get("late"); ok && late == true {
				fact("Late", templates.Plain("after the lease ended"), false, false)
			}
		case audit.KindLeaseExpired:
			st.Kind, st.Title, st.Warn = "lease_expired", "Lease expired: nobody reported an outcome, whether it ran is unknown", true
			stamp("Lease ended", "lease_until")
			text("Token", "token", true, false)
		case audit.KindResolved:
			verdict, _ := d.str("verdict")
			st.Kind, st.Title = "resolved", "Resolved by a person: "+strings.ReplaceAll(verdict, "_", " ")
			by()
			how()
			text("Note", "note", false, true)
			text("Evidence", "evidence", true, true)
			text("Outcome it resolves", "outcome", false, false)
		default:
			continue // a refused resubmission and the like: on the timeline only
		}
		steps = append(steps, st)
	}
	return append(steps, conclusion(call, now, redeemedSeq, lastSeq, refused, chain)...)
}

// conclusion is what the entries and the status say about execution.
func conclusion(call *queue.Call, now time.Time, redeemedSeq, lastSeq int64, refused int, chain templates.ChainStatus) []templates.LifeStep {
	plain := func(label, s string) templates.Fact { return templates.Fact{Label: label, Value: templates.Plain(s)} }
	var out []templates.LifeStep
	switch {
	case call.Status == queue.StatusRedeemed && redeemedSeq == 0:
		out = append(out, templates.LifeStep{Kind: "inconsistent", Warn: true,
			Title: "The call is marked redeemed, but no redemption is on the audit chain: check the database"})
	case call.Status != queue.StatusRedeemed && redeemedSeq != 0:
		out = append(out, templates.LifeStep{Kind: "inconsistent", Warn: true,
			Title: "The audit chain records a redemption, but the call is not marked redeemed: check the database"})
	case call.Status == queue.StatusPending:
		out = append(out, templates.LifeStep{Kind: "pending", Title: "Waiting for a decision; no grant exists yet",
			Facts: []templates.Fact{plain("Decide by", call.DecideBy.UTC().Format("2006-01-02 15:04:05 UTC"))}})
	case call.Status == queue.StatusApproved && call.Revoked != nil:
		out = append(out, notRedeemed("an operator revoked its grant before it was redeemed", refused))
	case call.Status == queue.StatusApproved && now.Before(call.GrantExpiresAt):
		out = append(out, templates.LifeStep{Kind: "pending", Title: "Approved; the grant has not been redeemed yet",
			Facts: []templates.Fact{plain("Grant expires", call.GrantExpiresAt.UTC().Format("2006-01-02 15:04:05 UTC"))}})
	case call.Status == queue.StatusRedeemed:
		switch {
		case call.OutcomeOpen():
			out = append(out, templates.LifeStep{Kind: "open", Title: "Running: the executor's lease has not ended",
				Facts: []templates.Fact{plain("Lease until", call.LeaseUntil.UTC().Format("2006-01-02 15:04:05 UTC"))}})
		case call.Unresolved():
			out = append(out, templates.LifeStep{Kind: "unresolved", Warn: true,
				Title: "Waiting for a person: nobody knows whether it ran"})
		}
	default:
		why := map[queue.Status]string{
			queue.StatusDenied:    "it was denied, so no grant was minted",
			queue.StatusExpired:   "it expired without a decision, so no grant was minted",
			queue.StatusCancelled: "the agent cancelled it before a decision, so no grant was minted",
			queue.StatusApproved:  "its grant expired unredeemed",
			queue.StatusCountered: "an operator answered it with an edited call (" + call.CounteredBy + "), so it can never run",
		}[call.Status]
		st := notRedeemed(why, refused)
		if call.Status == queue.StatusApproved {
			st.Facts = append(st.Facts, plain("Grant expired", call.GrantExpiresAt.UTC().Format("2006-01-02 15:04:05 UTC")))
		}
		out = append(out, st)
	}
	if lastSeq > 0 {
		out = append(out, templates.LifeStep{Kind: "proof", Title: "Proof", Facts: []templates.Fact{
			plain("Audit chain", chainProof(chain, lastSeq)),
		}})
	}
	return out
}

// notRedeemed is the conclusion of a call that never ran through the
// console: why, and how many redemptions were refused.
func notRedeemed(why string, refused int) templates.LifeStep {
	st := templates.LifeStep{Kind: "not_redeemed", Title: "No redemption was accepted: it did not run through Countersign",
		Facts: []templates.Fact{{Label: "Why", Value: templates.Plain(why)}}}
	if refused > 0 {
		st.Facts = append(st.Facts, templates.Fact{Label: "Redemptions refused",
			Value: templates.Plain(strconv.Itoa(refused) + ", each consuming nothing")})
	}
	return st
}

// chainProof says how far the entries above are covered by the newest
// verification of the audit chain.
func chainProof(chain templates.ChainStatus, lastSeq int64) string {
	verify := " Anyone can check it offline: export the audit trail and run console audit verify --file."
	switch {
	case chain.State == "verified" && chain.Count >= lastSeq:
		return fmt.Sprintf("every entry above is part of the hash chain, verified through entry %d at %s: none was altered, removed or inserted.%s",
			chain.Count, chain.At.UTC().Format("2006-01-02 15:04:05 UTC"), verify)
	case chain.State == "verified":
		return fmt.Sprintf("the chain verified through entry %d; the entries after it are checked on a later run.%s", chain.Count, verify)
	case chain.State == "broken":
		return "THE AUDIT CHAIN DOES NOT VERIFY (" + chain.Reason + "); what this page shows may have been altered."
	}
	return "the chain has not been verified yet; reload in a few seconds." + verify
}

// howDecided says through what a person or rule decided.
func howDecided(principal, channel string) string {
	if rule, ok := strings.CutPrefix(principal, "policy:"); ok {
		return "by rule " + rule + " of the tools file"
	}
	switch channel {
	case audit.ChannelWeb:
		return "in the browser console"
	case audit.ChannelCLI:
		return "from the command line"
	case audit.ChannelAPI:
		return "through the API"
	}
	return channel
}

// checkNames lists a redemption's checks by result.
func checkNames(d details) string {
	checks, ok := d.get("checks")
	if !ok {
		return ""
	}
	list, _ := checks.([]any)
	var passed, failed []string
	for _, c := range list {
		cd := details{c}
		name, _ := cd.str("name")
		switch ok, _ := cd.get("ok"); ok {
		case true:
			passed = append(passed, name)
		case false:
			failed = append(failed, name)
		}
	}
	out := fmt.Sprintf("%d of %d passed (%s)", len(passed), len(list), strings.Join(passed, ", "))
	if len(failed) > 0 {
		out += "; failed: " + strings.Join(failed, ", ")
	}
	return out
}

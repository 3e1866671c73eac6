// Package wire holds the shapes Countersign sends: the call object as the
// agent API, the control socket and the command line show it.
package wire

import (
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/queue"
)

// CallAsStored is the call object with the people it names as stored (a
// single-sign-on operator by their principal), for operators' own tools:
// the command line and the control socket. Agents receive CallView with the names people see.
func CallAsStored(c *queue.Call) map[string]any {
	return CallView(c, func(name string) string { return name })
}

// CallView is the call object with each person named by name.
func CallView(c *queue.Call, name func(string) string) map[string]any {
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
		"approvals":  approvalsView(c, name),
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
	return v
}

// approvalsView is the call object's approvals: how many the call needs and
// has, and who gave each, through which channel and how (a click, a
// passkey, a command, a rule).
func approvalsView(c *queue.Call, name func(string) string) map[string]any {
	v := map[string]any{"required": c.ApprovalsRequired, "received": len(c.Approvals)}
	if len(c.Approvals) == 0 {
		return v
	}
	given := make([]map[string]string, len(c.Approvals))
	for i, a := range c.Approvals {
		given[i] = map[string]string{"by": name(a.Operator), "channel": a.Channel, "method": a.Method(),
			"at": a.At.UTC().Format(time.RFC3339Nano)}
	}
	v["given"] = given
	return v
}

package store

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/tools"
)

// The columns every engine keeps as JSON text, encoded and decoded here so
// that the engines agree byte for byte.

// EncodeNames encodes a list of names (a user's groups, a token's owners)
// as a JSON array, [] for none.
func EncodeNames(names []string) (string, error) {
	if len(names) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(names)
	if err != nil {
		return "", fmt.Errorf("store: encode names: %w", err)
	}
	return string(b), nil
}

// DecodeNames decodes what EncodeNames wrote; none is nil.
func DecodeNames(text string) ([]string, error) {
	if text == "[]" {
		return nil, nil // most lists are empty: nothing to decode
	}
	var names []string
	if err := json.Unmarshal([]byte(text), &names); err != nil {
		return nil, fmt.Errorf("store: decode names: %w", err)
	}
	if len(names) == 0 {
		return nil, nil
	}
	return names, nil
}

type approversJSON struct {
	Roles  []string `json:"roles,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// Escalate are the tiers the call was made under and Reached how
	// many it reached (Roles and Groups include what they added).
	Escalate []tierJSON `json:"escalate,omitempty"`
	Reached  int        `json:"reached,omitempty"`
}

type tierJSON struct {
	AfterMS   int64    `json:"after_ms"`
	AddRoles  []string `json:"add_roles,omitempty"`
	AddGroups []string `json:"add_groups,omitempty"`
	Notify    []string `json:"notify,omitempty"`
}

// EncodePeople encodes who owns a call's agent and who may approve it, as
// a call's owners and approvers columns hold them.
func EncodePeople(c *queue.Call) (owners, approvers string, err error) {
	if owners, err = EncodeNames(c.Owners); err != nil {
		return "", "", fmt.Errorf("store: encode owners of %s: %w", c.ID, err)
	}
	approvers = "{}"
	if !c.Approvers.Empty() || len(c.Escalate) > 0 {
		a := approversJSON{Roles: c.Approvers.Roles, Groups: c.Approvers.Groups, Reached: c.Reached}
		for _, t := range c.Escalate {
			a.Escalate = append(a.Escalate, tierJSON{AfterMS: t.After.Milliseconds(), AddRoles: t.AddRoles, AddGroups: t.AddGroups, Notify: t.Notify})
		}
		b, err := json.Marshal(a)
		if err != nil {
			return "", "", fmt.Errorf("store: encode approvers of %s: %w", c.ID, err)
		}
		approvers = string(b)
	}
	return owners, approvers, nil
}

// DecodePeople sets c's owners and approvers from what EncodePeople wrote.
func DecodePeople(c *queue.Call, owners, approvers string) error {
	var err error
	if c.Owners, err = DecodeNames(owners); err != nil {
		return fmt.Errorf("store: owners of %s: %w", c.ID, err)
	}
	if approvers == "{}" { // what EncodePeople writes for none: nothing to decode
		c.Approvers.Roles, c.Approvers.Groups, c.Reached = nil, nil, 0
		return nil
	}
	var a approversJSON
	if err := json.Unmarshal([]byte(approvers), &a); err != nil {
		return fmt.Errorf("store: approvers of %s: %w", c.ID, err)
	}
	c.Approvers.Roles, c.Approvers.Groups, c.Reached = a.Roles, a.Groups, a.Reached
	for _, t := range a.Escalate {
		c.Escalate = append(c.Escalate, tools.Tier{After: time.Duration(t.AfterMS) * time.Millisecond, AddRoles: t.AddRoles,
			AddGroups: t.AddGroups, Notify: t.Notify})
	}
	return nil
}

// approvalJSON is one approval as the engines' history queries aggregate
// them: the time in Unix milliseconds, the passkey's credential id in hex
// (either case), null without a passkey.
type approvalJSON struct {
	Operator string `json:"operator"`
	Channel  string `json:"channel"`
	At       int64  `json:"at"`
	Comment  string `json:"comment"`
	Method   string `json:"method"`
	Digest   string `json:"digest"`
	Via      string `json:"via"`
	// PresentedPage and PresentedAt (Unix milliseconds) are the page that
	// presented the call, null when none did.
	PresentedPage *string `json:"presented_page"`
	PresentedAt   *int64  `json:"presented_at"`
	PasskeyID     *string `json:"passkey_id"`
	PasskeyName   *string `json:"passkey_name"`
	// Evidence is the passkey's evidence, when the query aggregated it
	// (a read of one call does; the history's pages leave it out).
	Evidence *string `json:"evidence"`
	// For is the person on whose behalf the approval was given ("" for
	// none); absent in rows aggregated before it was recorded.
	For string `json:"for"`
}

// DecodeApprovals reads the JSON array of a call's approvals that a history
// query aggregated ({"operator","channel","at","comment","method",
// "digest","via","presented_page","presented_at","passkey_id",
// "passkey_name","for"} each, in the order given). A passkey's evidence is left
// out: it is in the audit entry.
func DecodeApprovals(callID, text string) ([]queue.Approval, error) {
	var as []approvalJSON
	if err := json.Unmarshal([]byte(text), &as); err != nil {
		return nil, fmt.Errorf("store: approvals of %s: %w", callID, err)
	}
	if len(as) == 0 {
		return nil, nil
	}
	out := make([]queue.Approval, len(as))
	for i, a := range as {
		out[i] = queue.Approval{Operator: a.Operator, Channel: a.Channel, At: time.UnixMilli(a.At).UTC(), Comment: a.Comment,
			Method: a.Method, Digest: a.Digest, Via: a.Via, For: a.For}
		if a.PresentedPage != nil && a.PresentedAt != nil {
			out[i].Presented = &queue.Presented{Page: *a.PresentedPage, At: time.UnixMilli(*a.PresentedAt).UTC()}
		}
		if a.PasskeyID != nil {
			id, err := hex.DecodeString(*a.PasskeyID)
			if err != nil {
				return nil, fmt.Errorf("store: passkey of an approval of %s: %w", callID, err)
			}
			name := ""
			if a.PasskeyName != nil {
				name = *a.PasskeyName
			}
			out[i].Passkey = &queue.ApprovalPasskey{CredentialID: id, Name: name}
			if a.Evidence != nil {
				out[i].Passkey.Evidence = []byte(*a.Evidence)
			}
		}
	}
	return out, nil
}

// DecodePendingGroup makes a queue.PendingGroup of one row of an engine's
// PendingGroups: the group's tool, actor, tool definition, owners and
// approvers columns, the approvals its calls require, the names in their
// approvals as DecodeApprovals reads them, and its counts.
func DecodePendingGroup(tool, actor, toolDigest, owners, approvers string, required int, approvals string, count, due int) (queue.PendingGroup, error) {
	c := &queue.Call{Tool: tool, Actor: actor, ToolDigest: toolDigest, Status: queue.StatusPending, ApprovalsRequired: required}
	if err := DecodePeople(c, owners, approvers); err != nil {
		return queue.PendingGroup{}, err
	}
	var err error
	if c.Approvals, err = DecodeApprovals("a group of pending calls", approvals); err != nil {
		return queue.PendingGroup{}, err
	}
	return queue.PendingGroup{Call: c, Count: count, Due: due}, nil
}

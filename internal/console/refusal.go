package console

import (
	"errors"
	"net/http"

	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/reveal"
)

// A refused decision re-shows the call's page, which is current, with
// why the decision was refused in an operator's terms and what to do
// next. The agent API's message for the same refusal speaks to the agent
// ("propose it again", "ask a person"); the page speaks to the person at
// the console. Refusals not named here keep the API's message, which
// already speaks to a person.

// refusalShown is what the call page says of a refused decision: the
// reason, what to do next, and the page's status.
func refusalShown(err error, ae *problem.Error, call *queue.Call) (reason, next string, status int) {
	reason, status = ae.Message, ae.Status
	var fz *queue.FrozenError
	switch ae.Code {
	case "frozen":
		// The freeze is the console's own state, not a fault: the page
		// answers as for any other refused decision.
		status = http.StatusConflict
		reason = "Not approved: a freeze is in force for this call."
		if errors.As(err, &fz) {
			reason = "Not approved: " + reveal.String(fz.Freeze.Scope()) + " is frozen (" + reveal.String(fz.Freeze.Reason) +
				"). Nothing is approved or run while a freeze is in force."
		}
		next = "Deny the call if it should not run. To approve it, an admin lifts the freeze under Admin › Freezes; then read the call again here and approve."
	case "tool_changed":
		reason = "Not approved: the tools file now defines " + reveal.String(call.Tool) +
			" differently from the definition this call was proposed under, and a call is approved only under its own definition."
		next = "Deny it (or let it expire) and have the agent propose it again: the new call is checked against the tool as it is now."
	case "presentation_invalid":
		reason = "Nothing was decided: the page you decided on did not show the call as it is now (it changed since, or the page was older than the call's decision window)."
		next = "This page shows the call as it is now: read it again, then decide."
	case "digest_mismatch":
		next = "This page shows the call as it is now: read it again, then decide."
	case "not_pending":
		next = "Its state is shown below; the queue lists the calls still waiting."
	case "own_call":
		next = "Another operator approves it; you can still deny it."
	case "already_approved":
		next = "It needs another person's approval; this page shows it when it comes."
	case "not_an_approver":
		next = "Ask one of the approvers the tool names to decide it."
	case "owner":
		next = "Ask an operator who does not run this agent to decide it."
	case "passkey_required", "passkey_changed":
		next = "Use Approve with a passkey on this page."
	case "confirmation_mismatch", "warning_not_acknowledged":
		next = "Nothing was approved: do what the message asks on this page, then approve again."
	}
	return reason, next, status
}

package console

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// TestApprovalUsesThePagesCall: an approval made on a call's page hands
// the queue the call that page showed, with no read of its own; the hint
// is never trusted: a call denied after its page was shown is refused, and
// an approval with no page shown (another replica's) reads the call.
func TestApprovalUsesThePagesCall(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("olga", account.RoleOperator, "pw-olga-123")
	b := e.browser()
	b.login("olga", "pw-olga-123")
	csrf := b.csrf()
	approve := func(c *queue.Call, shown string) (status int, reads int64) {
		t.Helper()
		before := e.db.Statements()
		p := b.post("/calls/"+c.ID+"/approve", url.Values{"csrf": {csrf}, "digest": {c.Digest}, "presented": {shown},
			"confirm": {c.Target}, "ack_warnings": {"1"}}, "Accept", "")
		return p.status, e.db.Statements() - before
	}

	// Shown, then approved: the call is not read outside the decision's
	// transaction.
	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	shown := b.presented(call.ID)
	_, withHint := approve(call, shown)
	if got := e.loadCall(call.ID); got.Status != queue.StatusApproved {
		t.Fatalf("approved on its page: status %s", got.Status)
	}

	// Approved with no page shown in this console: read first, one
	// statement more.
	other := e.submit("agent:billing-bot", "payments-host", batchRefund(4242, 100, "another"))
	otherShown := b.presented(other.ID)
	e.c.shown.take(other.ID) // as if another replica had shown the page
	if status, without := approve(other, otherShown); status != http.StatusSeeOther || without != withHint+1 {
		t.Errorf("approval with no page kept: status %d, %d statements; want 303 and %d (one read more than %d)",
			status, without, withHint+1, withHint)
	}

	// Shown, then denied by someone else: the page's call says pending,
	// the decision's transaction refuses it.
	third := e.submit("agent:billing-bot", "payments-host", batchRefund(4343, 100, "denied meanwhile"))
	thirdShown := b.presented(third.ID)
	e.deny("petra", audit.ChannelCLI, third, "no")
	if status, _ := approve(third, thirdShown); status != http.StatusConflict {
		t.Errorf("approval of a call denied after its page was shown: status %d, want 409", status)
	}
	if got := e.loadCall(third.ID); got.Status != queue.StatusDenied {
		t.Errorf("call denied after its page was shown: status %s after an approval, want denied", got.Status)
	}
}

// TestPendingCallPageFromTheQueue: a pending call's page, for a person who
// decides, takes the call from the pending calls it reads for the link to
// the next one (one statement for the page), and shows its approvals as a
// read of the call alone does (an auditor's page reads it so): the
// operator, the passkey's name.
func TestPendingCallPageFromTheQueue(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("olga", account.RoleOperator, "pw-olga-123")
	e.addUser("aude", account.RoleAuditor, "pw-aude-123")
	olga, aude := e.browser(), e.browser()
	olga.login("olga", "pw-olga-123")
	aude.login("aude", "pw-aude-123")
	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	e.exec(`UPDATE calls SET approvals_required = 2 WHERE id = ?`, call.ID)
	if err := e.db.Store().Update(context.Background(), func(tx queue.Tx) error {
		return tx.AddApproval(call.ID, queue.Approval{Operator: "petra", Channel: audit.ChannelWeb, At: time.Now(),
			Method: queue.MethodPasskey, Digest: call.Digest,
			Passkey: &queue.ApprovalPasskey{CredentialID: []byte{7, 7}, Name: "petra's key", Evidence: []byte(`{}`)}})
	}); err != nil {
		t.Fatal(err)
	}
	olga.get("/calls/" + call.ID) // the session is kept from here on
	before := e.db.Statements()
	page := olga.get("/calls/" + call.ID)
	if n := e.db.Statements() - before; page.status != http.StatusOK || n != 1 {
		t.Errorf("a pending call's page for an operator: status %d, %d statements; want 200 and 1", page.status, n)
	}
	got := page.doc.Find(`[data-testid="approval-passkey"]`).Text()
	want := aude.get("/calls/" + call.ID).doc.Find(`[data-testid="approval-passkey"]`).Text()
	if got != "petra's key" || got != want {
		t.Errorf("the approval's passkey on the operator's page %q, on the auditor's %q; want %q on both", got, want, "petra's key")
	}
}

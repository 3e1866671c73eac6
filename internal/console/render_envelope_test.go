package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestCallPageRendersFromEnvelope: the call page shows what was hashed. An
// edit of the stored arguments alone does not change what the page shows
// for bound members (and is named in a warning); informational members come
// from the stored arguments, labelled not bound; a record whose envelope,
// or whose columns, no longer match the digest is a loud error page with
// nothing to approve.
func TestCallPageRendersFromEnvelope(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	e.exec(`UPDATE calls SET args = ? WHERE id = ?`,
		`{"amount_minor":1,"currency":"USD","notes":"edited note","reason_code":"duplicate"}`, call.ID)
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/calls/" + call.ID)
	if p.status != http.StatusOK {
		t.Fatalf("call page = %d", p.status)
	}
	amount := p.doc.Find(`[data-pointer="/amount_minor"] [data-testid="arg-value"]`).First().Text()
	if !strings.Contains(amount, "129999") || strings.Contains(p.body, "USD 0.01") {
		t.Errorf("amount shown as %q: the page rendered the edited copy, not what was hashed", amount)
	}
	if got := p.find("warning-item").Text(); !strings.Contains(got, "differs from what was hashed") {
		t.Errorf("no warning names the edited copy: %q", got)
	}
	notes := p.doc.Find(`[data-pointer="/notes"]`)
	if !strings.Contains(notes.Text(), "edited note") || notes.Find(`[data-testid="not-bound"]`).Length() == 0 {
		t.Errorf("informational notes = %q, want the stored copy labelled not bound", notes.Text())
	}

	for name, tc := range map[string]struct{ invoice, sql string }{
		"envelope": {"7001", `UPDATE calls SET envelope = CAST(replace(CAST(envelope AS TEXT), '129999', '000001') AS BLOB) WHERE id = ?`},
		"target":   {"7002", `UPDATE calls SET target = 'invoice:INV-9999' WHERE id = ?`},
	} {
		q := tc.sql
		t.Run(name, func(t *testing.T) {
			c := e.submit("agent:billing-bot", "payments-host", strings.Replace(conRefundBody, "INV-1042", "INV-"+tc.invoice, 1))
			e.exec(q, c.ID)
			p := b.get("/calls/" + c.ID)
			if p.status != http.StatusInternalServerError || !strings.Contains(p.body, "does not match its digest") {
				t.Errorf("tampered %s: page = %d, want 500 naming the mismatch", name, p.status)
			}
			if p.find("approve-form").Length() != 0 {
				t.Error("the error page offers an approve form")
			}
			if _, err := e.q.Approve(context.Background(), "olivia", "web", c.ID, c.Digest); err == nil && name == "envelope" {
				t.Error("a call whose envelope no longer hashes to its digest was approved")
			}
			if p := b.get("/history/calls/" + url.PathEscape(c.ID)); p.status != http.StatusInternalServerError {
				t.Errorf("tampered %s: timeline = %d, want 500", name, p.status)
			}
		})
	}
}

package console

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/countersign/countersign/internal/audit"
)

// TestApprovedCallWhoseGrantExpired: an approved call whose grant ran out
// unredeemed reads "approved — grant expired unredeemed" on its page, its
// status page and its history row, from the second the grant expires,
// never plain "approved"; while the grant lives it reads approved.
func TestApprovedCallWhoseGrantExpired(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	ctx := context.Background()
	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	approved, err := e.q.Approve(ctx, "adam", audit.ChannelCLI, call.ID, call.Digest)
	if err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.login("olivia", rolePassword)
	status := e.browser()
	row := func() *goquery.Selection {
		t.Helper()
		r := b.get("/history").doc.Find(`[data-testid="history-row"][data-call="` + call.ID + `"]`)
		if r.Length() != 1 {
			t.Fatalf("the history shows %d rows of %s, want 1", r.Length(), call.ID)
		}
		return r
	}
	check := func(when, want, label string) {
		t.Helper()
		p := b.get("/calls/" + call.ID)
		if got := p.find("status-value").Text(); got != want {
			t.Errorf("%s: the call page's status reads %q, want %q", when, got, want)
		}
		if got := strings.Join(strings.Fields(p.find("status-first").Text()), " "); !strings.HasPrefix(got, "Status: "+want+" · ") {
			t.Errorf("%s: the call page's status line reads %q, want it to start %q", when, got, "Status: "+want+" · ")
		}
		if got := p.find("grant-expires").Prev().Text(); got != label {
			t.Errorf("%s: the grant's expiry is labelled %q, want %q", when, got, label)
		}
		if got := status.get(e.c.links.Path(call.ID)).find("status-value").Text(); got != want {
			t.Errorf("%s: the status page reads %q, want %q", when, got, want)
		}
		if got := row().Find(`[data-testid="row-status"]`).Text(); got != want {
			t.Errorf("%s: the history row reads %q, want %q", when, got, want)
		}
	}
	check("while the grant lives", "approved", "Grant expires")
	e.clock.Advance(approved.GrantExpiresAt.Sub(e.clock.Now()) - time.Second)
	check("a second before the grant expires", "approved", "Grant expires")
	e.clock.Advance(time.Second)
	check("once the grant expired", "approved — grant expired unredeemed", "Grant expired")
}

// TestStatusPageSaysReissueBeforeTheGrantRunsOut: the status page of an
// approved call tells the agent's user to re-issue the call before its
// grant runs out, and once it ran out, that the call must be proposed
// again; the page is no longer followed, as nothing more can change.
func TestStatusPageSaysReissueBeforeTheGrantRunsOut(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	ctx := context.Background()
	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	if got := e.browser().get(e.c.links.Path(call.ID)).find("status-next").Length(); got != 0 {
		t.Errorf("a pending call's status page shows %d re-issue notes, want none", got)
	}
	approved, err := e.q.Approve(ctx, "adam", audit.ChannelCLI, call.ID, call.Digest)
	if err != nil {
		t.Fatal(err)
	}
	p := e.browser().get(e.c.links.Path(call.ID))
	if got := p.find("status-next").Text(); !strings.Contains(got, "Re-issue the identical call before its grant runs out") ||
		!strings.Contains(got, approved.GrantExpiresAt.UTC().Format("15:04:05")) {
		t.Errorf("a live grant's status page says %q", got)
	}
	if p.doc.Find(`meta[name="countersign-follow"]`).Length() != 1 {
		t.Error("the status page of a live grant is not followed")
	}
	e.clock.Advance(approved.GrantExpiresAt.Sub(e.clock.Now()))
	p = e.browser().get(e.c.links.Path(call.ID))
	if got := p.find("status-next").Text(); !strings.Contains(got, "The grant ran out before the call was re-issued") ||
		!strings.Contains(got, "propose it again") {
		t.Errorf("an expired grant's status page says %q", got)
	}
	if p.doc.Find(`meta[name="countersign-follow"]`).Length() != 0 {
		t.Error("the status page of an expired grant is still followed")
	}
}

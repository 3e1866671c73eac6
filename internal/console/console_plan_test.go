package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

var reportReader = queue.Principal{Actor: "agent:report-bot", Audience: "reports-host", TokenID: "tok_reports"}

func submitReportsPlan(t *testing.T, e *consoleEnv, n int) *queue.Plan {
	t.Helper()
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"tool":"reports.read","target":"report:r%d","args":{"period":"2026-%02d"}}`, i, i+1)
	}
	p, _, err := e.q.SubmitPlan(context.Background(), reportReader,
		[]byte(`{"rationale":"read the reports","items":[`+strings.Join(items, ",")+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// planForm is what one of the plan page's forms posts, read from the page.
func planForm(p *htmlPage, form string) url.Values {
	v := url.Values{}
	p.find(form).Find("input[type=hidden]").Each(func(_ int, s *goquerySelection) {
		name, _ := s.Attr("name")
		val, _ := s.Attr("value")
		v.Add(name, val)
	})
	return v
}

// The plan page decides the whole plan: an auditor reads it and gets no
// form; a stale digest or a missing presentation decides nothing and says
// so; the approval form approves it with the page's presentation; an
// approved plan can be revoked with a reason, and a pending one denied,
// which denies every item.
func TestPlanPageDecides(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	ctx := context.Background()
	p := submitReportsPlan(t, e, 3)

	aude := e.browser()
	aude.login("aude", rolePassword)
	if page := aude.get("/plans/" + p.ID); page.status != http.StatusOK || page.find("plan-item").Length() != 3 || page.find("plan-decide").Length() != 0 {
		t.Fatalf("the auditor's plan page: %d, %d items, decide form %d", page.status, page.find("plan-item").Length(), page.find("plan-decide").Length())
	}

	olivia := e.browser()
	olivia.login("olivia", rolePassword)
	queuePage := olivia.get("/")
	if n := queuePage.find("plan-card").Length(); n != 1 {
		t.Fatalf("the queue shows %d plan cards, want 1", n)
	}
	if n := queuePage.find("call-card").Length(); n != 0 {
		t.Fatalf("the queue shows %d call cards for the plan's items, want none", n)
	}
	if list := olivia.get("/?layout=list"); list.find("rows-view").Length() != 1 || list.find("plan-card").Length() != 1 || list.find("call-card").Length() != 0 {
		t.Fatalf("the list view shows %d plan cards and %d call rows, want 1 and none", list.find("plan-card").Length(), list.find("call-card").Length())
	}
	page := olivia.get("/plans/" + p.ID)
	form := planForm(page, "plan-approve-form")
	if form.Get("digest") != p.Digest || form.Get("presented") == "" {
		t.Fatalf("the approve form posts %v", form)
	}
	stale := url.Values{"csrf": form["csrf"], "digest": {strings.Repeat("0", 64)}, "presented": form["presented"]}
	if after := olivia.post("/plans/"+p.ID+"/approve", stale); !strings.Contains(after.find("plan-error").Text(), "digest") {
		t.Fatalf("a stale digest: %s", after.find("plan-error").Text())
	}
	bare := url.Values{"csrf": form["csrf"], "digest": form["digest"]}
	if after := olivia.post("/plans/"+p.ID+"/approve", bare); !strings.Contains(after.find("plan-error").Text(), "reload the page") {
		t.Fatalf("no presentation: %s", after.find("plan-error").Text())
	}
	_, items, _ := e.q.ReadPlan(ctx, p.ID)
	itemPage := olivia.get("/calls/" + items[1].ID)
	if itemPage.find("decide").Length() != 0 || itemPage.find("plan-item-plan-link").AttrOr("href", "") != "/plans/"+p.ID {
		t.Fatalf("an item's own page offers a decision (%d) or no link to its plan (%q)", itemPage.find("decide").Length(),
			itemPage.find("plan-item-plan-link").AttrOr("href", ""))
	}
	if choices := page.find("plan-valid-for").Find("option").Length(); choices != 2 { // 15 minutes, 1 hour (reports.read's max_for)
		t.Fatalf("the approve form offers %d validities, want 2", choices)
	}
	form.Set("valid_for", "900")
	approvedAt := e.clock.Now()
	after := olivia.post("/plans/"+p.ID+"/approve", form)
	if got := after.find("plan-status").Text(); got != "approved" {
		t.Fatalf("after approving: %q %s", got, after.find("plan-error").Text())
	}
	if got, _, _ := e.q.ReadPlan(ctx, p.ID); !got.ValidUntil.Equal(approvedAt.Add(15 * time.Minute)) {
		t.Fatalf("valid until %s, want 15 minutes after the approval", got.ValidUntil)
	}
	if _, err := e.q.MintPlanItem(ctx, reportReader, p.ID, 0); err != nil {
		t.Fatal(err)
	}
	after = olivia.post("/plans/"+p.ID+"/revoke", url.Values{"csrf": form["csrf"], "reason": {"wrong quarter"}})
	if got := after.find("plan-status").Text(); got != "cancelled" || after.find("plan-reason").Text() != "wrong quarter" {
		t.Fatalf("after revoking: %q %q", got, after.find("plan-error").Text())
	}
	_, items, _ = e.q.ReadPlan(ctx, p.ID)
	if items[0].Shown() != queue.StatusRevoked || items[1].Status != queue.StatusCancelled {
		t.Fatalf("items after the revocation: %s %s", items[0].Shown(), items[1].Status)
	}

	d := submitReportsPlan(t, e, 2)
	if after := olivia.post("/plans/"+d.ID+"/deny", url.Values{"csrf": form["csrf"], "reason": {""}}); after.find("plan-error").Length() == 0 {
		t.Fatal("a denial without a reason was not refused")
	}
	after = olivia.post("/plans/"+d.ID+"/deny", url.Values{"csrf": form["csrf"], "reason": {"not this month"}})
	if got := after.find("plan-status").Text(); got != "denied" {
		t.Fatalf("after denying: %q", got)
	}
	_, items, _ = e.q.ReadPlan(ctx, d.ID)
	for _, c := range items {
		if c.Status != queue.StatusDenied || c.Denial.Reason != "not this month" {
			t.Fatalf("item %d after the denial: %s", c.PlanIndex, c.Status)
		}
	}
}

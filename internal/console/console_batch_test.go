package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// batchRefund is a refund of invoice n; notes differ so that the review
// page has a value to mark, and rationale may hide characters.
func batchRefund(n int, amount int, rationale string) string {
	return fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":{"amount_minor":%d,"currency":"USD","reason_code":"duplicate","notes":"n"},"rationale":%q}`,
		n, amount, rationale)
}

// batchForm is what the review page's form posts, read from the page.
func batchForm(t *testing.T, p *htmlPage, form string) url.Values {
	t.Helper()
	v := url.Values{}
	p.find(form).Find("input[type=hidden]").Each(func(_ int, s *goquerySelection) {
		name, _ := s.Attr("name")
		val, _ := s.Attr("value")
		v.Add(name, val)
	})
	if len(v["id"]) == 0 || v.Get("csrf") == "" {
		t.Fatalf("%s carries no calls or no CSRF token: %v", form, v)
	}
	return v
}

func reviewPath(calls ...*queue.Call) string {
	q := url.Values{}
	for _, c := range calls {
		q.Add("id", c.ID)
	}
	return "/batch?" + q.Encode()
}

// TestBatchSelection: the queue offers a box per call the viewer may
// decide, belonging to the review form (a GET), and no approval form; an
// auditor gets neither.
func TestBatchSelection(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	a := e.submit("agent:billing-bot", "payments-host", batchRefund(1, 100, "a"))
	e.submit("agent:billing-bot", "payments-host", batchRefund(2, 200, "b"))
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/")
	form := p.find("batch-form")
	if m, _ := form.Attr("method"); m != "get" || form.AttrOr("action", "") != "/batch" {
		t.Fatalf("batch form: method %q action %q, want a GET of /batch", m, form.AttrOr("action", ""))
	}
	boxes := p.find("card-select")
	if boxes.Length() != 2 || boxes.First().AttrOr("form", "") != "batch-form" || boxes.First().AttrOr("name", "") != "id" {
		t.Fatalf("%d boxes (form %q), want one per card in the batch form", boxes.Length(), boxes.First().AttrOr("form", ""))
	}
	if p.doc.Find(`#queue-list form[method="post"]`).Length() != 0 || p.doc.Find(`#queue-list [data-testid="approve"]`).Length() != 0 {
		t.Error("a queue row can decide: nothing approves from the queue")
	}
	if got := p.doc.Find(`article[data-call="`+a.ID+`"] [data-testid="card-select"]`).AttrOr("value", ""); got != a.ID {
		t.Errorf("the card's box has value %q, want its call id", got)
	}
	aud := e.browser()
	aud.login("aude", rolePassword)
	if p := aud.get("/"); p.find("batch-form").Length() != 0 || p.find("card-select").Length() != 0 {
		t.Error("an auditor is offered batch selection")
	}
	if p := aud.get(reviewPath(a)); p.status != http.StatusForbidden {
		t.Errorf("an auditor's review page: %d, want 403", p.status)
	}
}

// TestBatchReview: the review page lists every call whole with its digest,
// marks only what differs, and carries every digest shown and the CSRF
// token in its forms.
func TestBatchReview(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	a := e.submit("agent:billing-bot", "payments-host", batchRefund(1, 100, "a"))
	b2 := e.submit("agent:billing-bot", "payments-host", batchRefund(2, 200, "b"))
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get(reviewPath(a, b2, a))
	if p.status != http.StatusOK {
		t.Fatalf("review: %d", p.status)
	}
	calls := p.find("batch-call")
	if calls.Length() != 2 {
		t.Fatalf("%d calls on the review page, want 2 (a repeated id once)", calls.Length())
	}
	for i, c := range []*queue.Call{a, b2} {
		sec := calls.Eq(i)
		if sec.AttrOr("data-call", "") != c.ID || strings.Join(strings.Fields(sec.Find(`[data-testid="digest"]`).Text()), "") != c.Digest {
			t.Errorf("call %d: %s with digest %q, want %s with %s", i, sec.AttrOr("data-call", ""), sec.Find(`[data-testid="digest"]`).Text(), c.ID, c.Digest)
		}
		for _, ptr := range []string{"/amount_minor", "/currency", "/reason_code", "/notes"} {
			if sec.Find(`[data-testid="arg"][data-pointer="`+ptr+`"]`).Length() != 1 {
				t.Errorf("call %d: argument %s not shown", i, ptr)
			}
		}
	}
	differs := map[string]bool{}
	p.doc.Find(`[data-testid="batch-call"]`).First().Find(`li.differs`).Each(func(_ int, s *goquerySelection) {
		differs[s.AttrOr("data-pointer", "")] = true
	})
	if len(differs) != 1 || !differs["/amount_minor"] {
		t.Errorf("marked as differing: %v, want only /amount_minor", differs)
	}
	if n := calls.First().Find(`[data-testid="fact-differs"]`).Length(); n != 1 { // the target
		t.Errorf("%d facts marked as differing, want 1 (the target)", n)
	}
	f := batchForm(t, p, "batch-approve-form")
	if strings.Join(f["id"], ",") != a.ID+","+b2.ID || strings.Join(f["digest"], ",") != a.Digest+","+b2.Digest {
		t.Errorf("approve form posts %v %v", f["id"], f["digest"])
	}
	if _, ok := f["presented"]; !ok {
		t.Error("the approve form posts no presentation token field")
	}
	if got := p.find("batch-approve").Text(); got != "Approve all 2" {
		t.Errorf("approve button %q", got)
	}
}

// TestBatchApproveAll: approving all approves each call that passes, as
// a batch approval with the review page presented; the call with a
// deception warning and the one decided meanwhile drop out, named on the
// result page with what to do next; a form whose digests the page did not
// show decides nothing.
func TestBatchApproveAll(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	var calls []*queue.Call
	for i := range 4 {
		calls = append(calls, e.submit("agent:billing-bot", "payments-host", batchRefund(10+i, 100, "ok")))
	}
	tricky := e.submit("agent:billing-bot", "payments-host", batchRefund(20, 100, "refund \u202etsop rof"))
	all := append(append([]*queue.Call(nil), calls...), tricky)
	b := e.browser()
	b.login("olivia", rolePassword)
	review := b.get(reviewPath(all...))
	if got := review.doc.Find(`[data-call="` + tricky.ID + `"] [data-testid="batch-drops"]`).Text(); !strings.Contains(got, "look-alike") {
		t.Errorf("the review page does not say the deceptive call will be left out: %q", got)
	}
	if strings.ContainsRune(review.body, '\u202e') || review.doc.Find(`[data-call="`+tricky.ID+`"] [data-testid="deception-warning"]`).Length() != 1 {
		t.Error("the review page shows the hidden character raw, or without the call's deception warning")
	}
	f := batchForm(t, review, "batch-approve-form")
	// A form whose digests are not the ones the page showed decides
	// nothing: the page's presentation token covers every call and digest.
	stale := calls[3]
	forged := url.Values{}
	for k, v := range f {
		forged[k] = slices.Clone(v)
	}
	for i, id := range forged["id"] {
		if id == stale.ID {
			forged["digest"][i] = strings.Repeat("0", 64)
		}
	}
	if p := b.post("/batch/approve", forged); p.status != http.StatusConflict || !strings.Contains(p.find("batch-error").Text(), "reload the page") {
		t.Errorf("a batch with a digest the page did not show: %d %q, want 409 saying to reload", p.status, p.find("batch-error").Text())
	}
	for _, c := range all {
		if got := mustCall(t, e, c.ID); got.Status != queue.StatusPending || len(got.Approvals) != 0 {
			t.Fatalf("after a refused batch %s is %s with %d approvals", c.ID, got.Status, len(got.Approvals))
		}
	}
	// One call is decided by someone else after the page was shown.
	if _, err := e.q.Deny(context.Background(), "adam", audit.ChannelCLI, stale.ID, "not now"); err != nil {
		t.Fatal(err)
	}
	p := b.post("/batch/approve", f)
	if p.status != http.StatusOK {
		t.Fatalf("approve all: %d %s", p.status, p.find("batch-error").Text())
	}
	if got := p.find("batch-result-title").Text(); got != "Approved 3 of 5 calls" {
		t.Errorf("title %q", got)
	}
	dropped := map[string]string{}
	p.find("batch-dropped-item").Each(func(_ int, s *goquerySelection) {
		dropped[s.AttrOr("data-call", "")] = s.Find(`[data-testid="batch-dropped-why"]`).Text()
	})
	if !strings.Contains(dropped[tricky.ID], "decide it on its own") || !strings.Contains(dropped[stale.ID], "decided meanwhile") || len(dropped) != 2 {
		t.Errorf("dropped: %v", dropped)
	}
	for _, c := range calls[:3] {
		got := mustCall(t, e, c.ID)
		if got.Status != queue.StatusApproved || got.Grant == "" || got.Approvals[0].Operator != "olivia" {
			t.Errorf("%s is %s", c.ID, got.Status)
			continue
		}
		if a := got.Approvals[0]; a.Method != queue.MethodBatch || a.Human() != queue.HumanTrue || a.Presented == nil || a.Presented.Page != "batch" || a.Via == "" {
			t.Errorf("%s: approval %+v, want a batch approval with the review page presented", c.ID, a)
		}
	}
	if got := mustCall(t, e, tricky.ID); got.Status != queue.StatusPending || len(got.Approvals) != 0 {
		t.Errorf("dropped %s is %s with %d approvals", tricky.ID, got.Status, len(got.Approvals))
	}
	if got := mustCall(t, e, stale.ID); got.Status != queue.StatusDenied || len(got.Approvals) != 0 {
		t.Errorf("the call denied meanwhile is %s with %d approvals", got.Status, len(got.Approvals))
	}
	// Posting again: every call is decided or still dropped; nothing twice.
	p = b.post("/batch/approve", f)
	if got := p.find("batch-result-title").Text(); got != "Approved 0 of 5 calls" {
		t.Errorf("second post: %q", got)
	}
	p.find("batch-dropped-item").Each(func(_ int, s *goquerySelection) {
		why := s.Find(`[data-testid="batch-dropped-why"]`).Text()
		if id := s.AttrOr("data-call", ""); id == calls[0].ID && !strings.Contains(why, "decided meanwhile (it is approved now)") {
			t.Errorf("second post: %s already approved, dropped with %q", id, why)
		}
	})
}

// TestBatchDenyAll: one reason denies every call; a batch denial without
// a reason shows the review page again with what to do; the forms need
// the session's CSRF token.
func TestBatchDenyAll(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	a := e.submit("agent:billing-bot", "payments-host", batchRefund(1, 100, "a"))
	c := e.submit("agent:billing-bot", "payments-host", batchRefund(2, 200, "b"))
	b := e.browser()
	b.login("olivia", rolePassword)
	f := batchForm(t, b.get(reviewPath(a, c)), "batch-deny-form")
	bad := url.Values{"id": f["id"], "digest": f["digest"], "reason": {"forged"}}
	if p := b.post("/batch/deny", bad); p.status != http.StatusForbidden {
		t.Errorf("deny without the CSRF token: %d, want 403", p.status)
	}
	p := b.post("/batch/deny", f)
	if p.find("batch-error").Length() != 1 || p.find("batch-call").Length() != 2 {
		t.Errorf("deny without a reason: %d, error %q", p.status, p.find("batch-error").Text())
	}
	f.Set("reason", "not this week")
	p = b.post("/batch/deny", f)
	if got := p.find("batch-result-title").Text(); got != "Denied 2 of 2 calls" || p.find("batch-reason").Text() != "not this week" {
		t.Errorf("deny all: %q, reason %q", got, p.find("batch-reason").Text())
	}
	for _, call := range []*queue.Call{a, c} {
		if got := mustCall(t, e, call.ID); got.Status != queue.StatusDenied || got.Denial.Reason != "not this week" {
			t.Errorf("%s is %s", call.ID, got.Status)
		}
	}
}

// TestBatchTooLarge: more than MaxBatch calls are refused, on the review
// page and on a posted decision, and nothing is decided.
func TestBatchTooLarge(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	var calls []*queue.Call
	for i := range queue.MaxBatch + 1 {
		calls = append(calls, e.submit("agent:billing-bot", "payments-host", batchRefund(100+i, 100, "x")))
	}
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get(reviewPath(calls...))
	if p.status != http.StatusBadRequest || !strings.Contains(p.find("batch-error").Text(), "at most 50") || p.find("batch-approve-form").Length() != 0 {
		t.Fatalf("review of %d: %d %q", len(calls), p.status, p.find("batch-error").Text())
	}
	f := batchForm(t, b.get(reviewPath(calls[:queue.MaxBatch]...)), "batch-approve-form")
	f.Add("id", calls[queue.MaxBatch].ID)
	f.Add("digest", calls[queue.MaxBatch].Digest)
	p = b.post("/batch/approve", f)
	if p.status != http.StatusBadRequest || !strings.Contains(p.find("batch-error").Text(), "at most 50") {
		t.Errorf("approve %d: %d %q", len(calls), p.status, p.find("batch-error").Text())
	}
	for _, c := range calls {
		if got := mustCall(t, e, c.ID); got.Status != queue.StatusPending {
			t.Fatalf("%s is %s after a refused batch", c.ID, got.Status)
		}
	}
}

package console

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
)

// counterConsoleTools has a refund whose target, amount, reason and memo
// an operator may edit, and a charge without a counter block.
const counterConsoleTools = `tools:
  payments.refund:
    description: Refund an invoice
    audience: payments-host
    target: '^invoice:INV-[0-9]+$'
    counter: {edit: [target, /amount_minor, /reason_code, /memo]}
    args:
      type: object
      additionalProperties: false
      required: [amount_minor, currency, reason_code]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 5000000}
        currency: {type: string, enum: [USD, EUR]}
        reason_code: {type: string, enum: [duplicate, requested]}
        memo: {type: string, maxLength: 20}
  payments.charge:
    description: Charge a card
    audience: payments-host
    target: '^card:[0-9]+$'
    args: {type: object, additionalProperties: false}
  keys.rotate:
    description: Rotate a signing key
    audience: vault-host
    target: '^key:[a-z-]+$'
    confirm: target
    counter: {edit: [target]}
    args: {type: object, additionalProperties: false}
`

func newCounterConsoleEnv(t *testing.T) *consoleEnv {
	t.Helper()
	pol, err := policy.Parse([]byte(counterConsoleTools))
	if err != nil {
		t.Fatal(err)
	}
	e := newConsoleEnvQueueConfig(t, pol.Registry(), pol, nil, nil)
	addRoleUsers(e)
	e.addUser("oscar", account.RoleOperator, rolePassword)
	return e
}

const counterRefund = `{"tool":"payments.refund","target":"invoice:INV-4100","args":{"amount_minor":40000,"currency":"USD","reason_code":"duplicate"}}`

// counterForm is the approve form of the review of call's edit, as the
// browser posts it.
func counterForm(t *testing.T, b *consoleBrowser, call *queue.Call, edit url.Values) (*htmlPage, url.Values) {
	t.Helper()
	review := b.get("/calls/" + call.ID + "/counter?" + edit.Encode())
	if review.status != http.StatusOK || review.find("counter-approve-form").Length() != 1 {
		t.Fatalf("review: %d %q %q", review.status, review.find("counter-error").Text(), review.find("counter-problems").Text())
	}
	f := url.Values{}
	review.find("counter-approve-form").Find("input[type=hidden]").Each(func(_ int, s *goquerySelection) {
		f.Add(s.AttrOr("name", ""), s.AttrOr("value", ""))
	})
	return review, f
}

func fields(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestCounterFromTheCallPage: a pending refund's page offers "Approve with
// an edit" with the listed members only, filled with the call's values;
// an invalid edit lists every problem and shows the form again as typed;
// a valid one shows each change old → new (target included) and the new
// digest, and approving it stores the counter with that digest, the
// original countered.
func TestCounterFromTheCallPage(t *testing.T) {
	e := newCounterConsoleEnv(t)
	orig := e.submit("agent:billing-bot", "payments-host", counterRefund)
	b := e.browser()
	b.login("olivia", rolePassword)

	page := b.get("/calls/" + orig.ID)
	var got []string
	page.find("counter-offer").Find(`[data-testid="counter-input"]`).Each(func(_ int, s *goquerySelection) {
		got = append(got, s.AttrOr("data-pointer", "")+"="+s.AttrOr("value", ""))
	})
	if want := "target=invoice:INV-4100 /amount_minor=40000 /reason_code=duplicate /memo="; strings.Join(got, " ") != want {
		t.Fatalf("the edit form's fields: %q, want %q", strings.Join(got, " "), want)
	}

	bad := url.Values{"set:target": {"invoice:nope"}, "set:/amount_minor": {"99000000"}, "set:/memo": {strings.Repeat("m", 30)}}
	p := b.get("/calls/" + orig.ID + "/counter?" + bad.Encode())
	if p.status != http.StatusOK || p.find("counter-approve-form").Length() != 0 {
		t.Fatalf("an invalid edit: %d, approve form %d", p.status, p.find("counter-approve-form").Length())
	}
	var paths []string
	p.find("counter-problem").Each(func(_ int, s *goquerySelection) { paths = append(paths, strings.SplitN(fields(s.Text()), ":", 2)[0]) })
	if want := "/args/amount_minor /args/memo /target"; strings.Join(slices.Sorted(slices.Values(paths)), " ") != want {
		t.Errorf("the problems listed name %q, want %q", paths, want)
	}
	for ptr, typed := range map[string]string{"target": "invoice:nope", "/amount_minor": "99000000", "/memo": strings.Repeat("m", 30)} {
		in := p.doc.Find(`[data-testid="counter-change-form"] [data-testid="counter-input"][data-pointer="` + ptr + `"]`)
		if in.AttrOr("value", "") != typed || in.AttrOr("aria-invalid", "") != "true" {
			t.Errorf("the form shows %s as %q (aria-invalid %q), want what was typed, %q, marked invalid", ptr, in.AttrOr("value", ""), in.AttrOr("aria-invalid", ""), typed)
		}
	}
	if n := p.find("counter-field-problem").Length(); n != 3 {
		t.Errorf("%d fields carry their problem, want 3", n)
	}

	edit := url.Values{"set:target": {"invoice:INV-4101"}, "set:/amount_minor": {"4000"}, "set:/reason_code": {"duplicate"}}
	review, f := counterForm(t, b, orig, edit)
	var changes []string
	review.find("counter-change").Each(func(_ int, s *goquerySelection) {
		changes = append(changes, s.AttrOr("data-pointer", "")+": "+fields(s.Find(`[data-testid="counter-old"]`).Text())+" "+fields(s.Find(`[data-testid="counter-new"]`).Text()))
	})
	if want := "target: invoice:INV-4100 → invoice:INV-4101 | /amount_minor: 40000 → 4000"; strings.Join(changes, " | ") != want {
		t.Errorf("the diff reads %q, want %q", strings.Join(changes, " | "), want)
	}
	shown := strings.Join(strings.Fields(review.find("counter-digest").Text()), "")
	if !hexDigest.MatchString(shown) || shown == orig.Digest {
		t.Fatalf("the review shows new digest %q (original %s)", shown, orig.Digest)
	}
	if f.Get("presented") == "" || f.Get("digest") != orig.Digest {
		t.Fatalf("the approve form carries presented %q digest %q", f.Get("presented"), f.Get("digest"))
	}

	// The token binds the digest shown: the same token with another edit
	// is refused, and nothing changes.
	other := url.Values{}
	for k, v := range f {
		other[k] = v
	}
	other.Set("set:/amount_minor", "3000")
	if p := b.post("/calls/"+orig.ID+"/counter", other); p.status == http.StatusSeeOther || p.find("counter-error").Length() != 1 {
		t.Fatalf("an edit other than the one reviewed: %d %q", p.status, p.find("counter-error").Text())
	}
	if c, _ := e.q.Call(context.Background(), orig.ID); c.Status != queue.StatusPending {
		t.Fatalf("after a refused counter the original is %s", c.Status)
	}

	res := b.post("/calls/"+orig.ID+"/counter", f)
	loc := res.header.Get("Location")
	if res.status != http.StatusSeeOther || !strings.HasPrefix(loc, "/calls/") || !strings.HasSuffix(loc, "?notice=edited") {
		t.Fatalf("approve the edit: %d %q %q", res.status, loc, res.find("counter-error").Text())
	}
	counterID := strings.TrimSuffix(strings.TrimPrefix(loc, "/calls/"), "?notice=edited")
	ctx := context.Background()
	counter, err := e.q.Call(ctx, counterID)
	if err != nil {
		t.Fatal(err)
	}
	if counter.Digest != shown || counter.Target != "invoice:INV-4101" || counter.EditedBy != "olivia" || counter.CounteredFrom != orig.ID {
		t.Errorf("the counter: digest %s (shown %s) target %s edited_by %q from %q", counter.Digest, shown, counter.Target, counter.EditedBy, counter.CounteredFrom)
	}
	if len(counter.Approvals) != 1 || counter.Approvals[0].Method != queue.MethodCounter || counter.Approvals[0].Presented == nil {
		t.Errorf("the counter's approvals: %+v", counter.Approvals)
	}
	if o, _ := e.q.Call(ctx, orig.ID); o.Status != queue.StatusCountered || o.CounteredBy != counterID {
		t.Errorf("the original: %s countered_by %q", o.Status, o.CounteredBy)
	}
	if p := b.get(loc); !strings.Contains(p.find("notice").Text()+p.body, "You approved this edited call") {
		t.Errorf("the counter's page does not say it was approved with an edit")
	}
}

// TestCounterOfferedOnlyWhereAllowed: the offer and its pages are for
// operators who may approve the call, of tools that opt in; an unchanged
// edit is refused with what to do.
func TestCounterOfferedOnlyWhereAllowed(t *testing.T) {
	e := newCounterConsoleEnv(t)
	orig := e.submit("agent:billing-bot", "payments-host", counterRefund)
	charge := e.submit("agent:billing-bot", "payments-host", `{"tool":"payments.charge","target":"card:1","args":{}}`)
	olivia, aude := e.browser(), e.browser()
	olivia.login("olivia", rolePassword)
	aude.login("aude", rolePassword)

	if n := olivia.get("/calls/" + charge.ID).find("counter-offer").Length(); n != 0 {
		t.Error("a tool without a counter block offers an edit")
	}
	if p := olivia.get("/calls/" + charge.ID + "/counter"); p.status < 400 || p.find("counter-approve-form").Length() != 0 {
		t.Errorf("the counter page of a tool without a counter block: %d", p.status)
	}
	if n := aude.get("/calls/" + orig.ID).find("counter-offer").Length(); n != 0 {
		t.Error("an auditor is offered an edit")
	}
	if p := aude.get("/calls/" + orig.ID + "/counter"); p.status != http.StatusForbidden {
		t.Errorf("an auditor's counter page: %d, want 403", p.status)
	}
	p := olivia.get("/calls/" + orig.ID + "/counter?" + url.Values{"set:/amount_minor": {"40000"}}.Encode())
	if p.find("counter-approve-form").Length() != 0 || !strings.Contains(p.find("counter-error").Text(), "approve or deny") {
		t.Errorf("an unchanged edit: %q", p.find("counter-error").Text())
	}
}

// TestCounterAsksWhatTheToolAsks: where the tool asks for the target to be
// typed, the review asks for the edited call's, and the counter is refused
// without it.
func TestCounterAsksWhatTheToolAsks(t *testing.T) {
	e := newCounterConsoleEnv(t)
	orig := e.submit("agent:ops-bot", "vault-host", `{"tool":"keys.rotate","target":"key:signing","args":{}}`)
	b := e.browser()
	b.login("olivia", rolePassword)
	review, f := counterForm(t, b, orig, url.Values{"set:target": {"key:backup"}})
	if got := fields(review.find("counter-confirm-expected").Text()); got != "key:backup" {
		t.Fatalf("the review asks for %q to be typed, want the edited call's target", got)
	}
	for _, typed := range []string{"", "key:signing"} {
		f.Set("confirm", typed)
		p := b.post("/calls/"+orig.ID+"/counter", f)
		msg := p.find("counter-error").Text()
		if p.status == http.StatusSeeOther || !strings.Contains(msg, "key:backup") {
			t.Fatalf("approving with %q typed: %d %q", typed, p.status, msg)
		}
		// The counter page's own words: its field, not the call page's or
		// the command line's.
		if !strings.Contains(msg, `Approve the edited call`) || !strings.Contains(msg, "on this page") ||
			strings.Contains(msg, "console approve") || strings.Contains(msg, "call page") {
			t.Errorf("the refusal with %q typed does not say where on this page to type: %q", typed, msg)
		}
	}
	f.Set("confirm", "key:backup")
	if p := b.post("/calls/"+orig.ID+"/counter", f); p.status != http.StatusSeeOther {
		t.Fatalf("approving with the edited target typed: %d %q", p.status, p.find("counter-error").Text())
	}
}

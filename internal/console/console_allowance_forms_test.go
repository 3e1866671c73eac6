package console

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
)

// allowanceTools are three tools that opt into allowances: refunds one
// operator approves, payouts that need two, and key rotations only an
// admin approves, each typing the key's name.
const allowanceTools = `tools:
  payments.refund:
    description: Refund an invoice
    audience: payments-host
    target: '^invoice:INV-[0-9]+$'
    display:
      money: {amount: /amount_minor, currency: /currency}
    allowance: {max_uses: 20, max_for: 1h, vary: [target, /amount_minor]}
    args:
      type: object
      additionalProperties: false
      required: [amount_minor, currency]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 5000000}
        currency: {type: string, enum: [USD, EUR]}
        memo: {type: string, maxLength: 200}
  payments.payout:
    description: Pay a supplier
    audience: payments-host
    target: '^supplier:[a-z]+$'
    approvals: 2
    confirm: {word: PAYOUT}
    allowance: {max_uses: 10, max_for: 1h, vary: [/amount_minor]}
    args:
      type: object
      additionalProperties: false
      required: [amount_minor]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 900000}
  keys.rotate:
    description: Rotate a signing key
    audience: vault-host
    target: '^key:[a-z-]+$'
    approvers: {roles: [admin]}
    confirm: target
    allowance: {max_uses: 5, max_for: 30m, vary: [target]}
    args:
      type: object
      additionalProperties: false
      required: [why]
      properties:
        why: {type: string, enum: [schedule, leak]}
`

// newAllowanceEnv is a console over allowanceTools, its queue's Config
// adjusted (adjust may be nil), with one user per role (olivia, aude,
// adam) and a second operator, oscar.
func newAllowanceEnv(t *testing.T, adjust func(*queue.Config)) *consoleEnv {
	t.Helper()
	pol, err := policy.Parse([]byte(allowanceTools))
	if err != nil {
		t.Fatal(err)
	}
	e := newConsoleEnvQueueConfig(t, pol.Registry(), pol, adjust, nil)
	addRoleUsers(e)
	e.addUser("oscar", account.RoleOperator, rolePassword)
	return e
}

// give gives an allowance from call's page in b with choices (and extra
// fields posted with the give, such as confirm), and returns its id.
func give(t *testing.T, b *consoleBrowser, call *queue.Call, choices url.Values, extra url.Values) string {
	t.Helper()
	_, f := giveForm(t, b, call, choices)
	for k, v := range extra {
		f[k] = v
	}
	p := b.post("/calls/"+call.ID+"/allowance", f)
	loc := p.header.Get("Location")
	if p.status != http.StatusSeeOther || !strings.HasPrefix(loc, "/allowances/alw_") {
		t.Fatalf("give: %d %q %q", p.status, loc, p.find("allowance-error").Text())
	}
	return strings.TrimPrefix(strings.Split(loc, "?")[0], "/allowances/")
}

// card is allowance id's card on a list page.
func card(p *htmlPage, id string) *goquerySelection {
	return p.doc.Find(`[data-testid="allowance"][data-allowance="` + id + `"]`)
}

func cardText(s *goquerySelection, testid string) string {
	return strings.Join(strings.Fields(s.Find(`[data-testid="`+testid+`"]`).Text()), " ")
}

var hexDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)

// TestAllowancesList: the list shows each allowance with its scope in
// words, digest, giver, confirmers, uses left, until and state; the
// revocation is offered to whom may revoke, and asks for a reason; a
// refused revocation says why; one without the session's CSRF token
// changes nothing; an auditor reads the list, with nothing to do.
func TestAllowancesList(t *testing.T) {
	e := newAllowanceEnv(t, nil)
	refund := e.submit("agent:billing-bot", "payments-host", `{"tool":"payments.refund","target":"invoice:INV-5001","args":{"amount_minor":1200,"currency":"USD"}}`)
	rotate := e.submit("agent:ops-bot", "vault-host", `{"tool":"keys.rotate","target":"key:signing","args":{"why":"schedule"}}`)
	olivia, adam, aude := e.browser(), e.browser(), e.browser()
	olivia.login("olivia", rolePassword)
	adam.login("adam", rolePassword)
	aude.login("aude", rolePassword)
	refundID := give(t, olivia, refund, url.Values{"uses": {"2"}, "minutes": {"30"}, "max:/amount_minor": {"5000"}}, nil)
	rotateID := give(t, adam, rotate, url.Values{"uses": {"3"}, "minutes": {"20"}}, url.Values{"confirm": {"key:signing"}})

	list := olivia.get("/allowances")
	if list.status != http.StatusOK || list.find("nav-allowances").Length() != 1 {
		t.Fatalf("the list: %d, nav link %d", list.status, list.find("nav-allowances").Length())
	}
	stored, err := e.q.Allowance(context.Background(), refundID)
	if err != nil {
		t.Fatal(err)
	}
	c := card(list, refundID)
	for testid, want := range map[string]string{
		"allowance-state":        "live",
		"allowance-uses-left":    "0 of 2 used, 2 left",
		"allowance-giver":        "olivia at",
		"allowance-confirmers":   "olivia (1 of 1 needed)",
		"allowance-scope-digest": stored.ScopeDigest,
		"allowance-words":        "up to 2 payments.refund calls by agent:billing-bot",
	} {
		if got := cardText(c, testid); !strings.Contains(got, want) {
			t.Errorf("the refund allowance's %s reads %q, want %q in it", testid, got, want)
		}
	}
	if !hexDigest.MatchString(cardText(c, "allowance-scope-digest")) {
		t.Errorf("the scope digest is shown as %q", cardText(c, "allowance-scope-digest"))
	}
	if c.Find(`[data-testid="allowance-until"] time`).Length() != 1 {
		t.Error("the card does not say until when")
	}
	if c.Find(`[data-testid="allowance-revoke-form"]`).Length() != 1 {
		t.Error("its giver is not offered the revocation")
	}
	if card(list, rotateID).Find(`[data-testid="allowance-revoke-form"]`).Length() != 0 {
		t.Error("an operator who may not approve key rotations is offered to revoke an allowance of them")
	}
	if got := card(adam.get("/allowances"), refundID).Find(`[data-testid="allowance-revoke-form"]`).Length(); got != 1 {
		t.Error("an admin is not offered the revocation")
	}
	if p := olivia.get("/allowances/" + rotateID); p.find("allowance-no-revoke").Length() != 1 {
		t.Error("the allowance's page does not say who revokes it")
	}

	// Refused: not someone who may revoke it. The page says why, and
	// what was typed stays.
	p := olivia.post("/allowances/"+rotateID+"/revoke", url.Values{"csrf": {olivia.csrf()}, "reason": {"not needed"}})
	if p.status != http.StatusForbidden || !strings.Contains(p.find("allowance-error").Text(), "giver") {
		t.Errorf("a revocation by an operator of another tool: %d %q", p.status, p.find("allowance-error").Text())
	}
	if got := p.find("allowance-revoke-reason").Text(); got != "" {
		t.Errorf("a page without the revocation form has a reason field: %q", got)
	}
	p = adam.post("/allowances/"+rotateID+"/revoke", url.Values{"csrf": {adam.csrf()}, "reason": {"  "}})
	if p.find("allowance-error").Length() != 1 || p.find("allowance-revoke-form").Length() != 1 {
		t.Errorf("a revocation without a reason: %d %q", p.status, p.find("allowance-error").Text())
	}
	// Without the session's CSRF token nothing changes.
	if p := adam.post("/allowances/"+rotateID+"/revoke", url.Values{"reason": {"x"}}); p.status != http.StatusForbidden {
		t.Errorf("a revocation without the CSRF token: %d", p.status)
	}
	if a, _ := e.q.Allowance(context.Background(), rotateID); a.Ended() {
		t.Fatalf("refused revocations ended the allowance: %s", a.EndReason)
	}

	// An auditor reads them, and is offered nothing to do.
	if p := aude.get("/allowances"); p.status != http.StatusOK || p.find("allowance").Length() != 2 || p.find("allowance-revoke-form").Length() != 0 {
		t.Errorf("an auditor's list: %d, %d allowances, %d revoke forms", p.status, p.find("allowance").Length(), p.find("allowance-revoke-form").Length())
	}
	if p := aude.post("/allowances/"+rotateID+"/revoke", url.Values{"csrf": {aude.csrf()}, "reason": {"audit"}}); p.status != http.StatusForbidden {
		t.Errorf("an auditor's revocation: %d", p.status)
	}

	// Revoked from the list's own form.
	form := c.Find(`[data-testid="allowance-revoke-form"]`)
	action, _ := form.Attr("action")
	csrf, _ := form.Find(`input[name="csrf"]`).Attr("value")
	if p := olivia.post(action, url.Values{"csrf": {csrf}, "reason": {"the duplicates are refunded"}}); p.status != http.StatusSeeOther {
		t.Fatalf("revoke from the list: %d %q", p.status, p.find("allowance-error").Text())
	}
	list = olivia.get("/allowances")
	c = card(list, refundID)
	if got := cardText(c, "allowance-state"); got != "ended: revoked" {
		t.Errorf("after its revocation the card's state reads %q", got)
	}
	if !strings.Contains(cardText(c, "allowance-ended"), "olivia") || c.Find(`[data-testid="allowance-revoke-form"]`).Length() != 0 {
		t.Errorf("the ended card: %q, revoke forms %d", cardText(c, "allowance-ended"), c.Find(`[data-testid="allowance-revoke-form"]`).Length())
	}

	if aude.get("/").find("nav-allowances").Length() != 1 || adam.get("/").find("nav-allowances").Length() != 1 {
		t.Error("the navigation does not link the allowances for an auditor or an admin")
	}
}

// payout is a payout of amount cents to supplier.
func payout(supplier string, amount int) string {
	return `{"tool":"payments.payout","target":"supplier:` + supplier + `","args":{"amount_minor":` + strconv.Itoa(amount) + `}}`
}

// confirmForm is the hidden fields of the confirm form on allowance id's
// page in b.
func confirmForm(t *testing.T, b *consoleBrowser, id string) (*htmlPage, url.Values) {
	t.Helper()
	p := b.get("/allowances/" + id)
	form := p.find("allowance-confirm-form")
	if form.Length() != 1 {
		t.Fatalf("no confirm form: %d %q", p.status, p.find("allowance-no-confirm").Text())
	}
	f := url.Values{}
	form.Find("input[type=hidden]").Each(func(_ int, s *goquerySelection) {
		f.Add(s.AttrOr("name", ""), s.AttrOr("value", ""))
	})
	return p, f
}

// TestAllowanceConfirm: an allowance of a tool that needs two approvals
// waits for a second person, who sees on its page the scope in words and
// its digest and the base call whole, types what the call asks, and
// confirms on the page's token, approving the base call too; from then
// on a covered call arrives approved in both names. Another scope digest,
// no token, another page's token, no typed word, the giver, someone who
// may not approve the calls, or one confirmation too many confirm
// nothing.
func TestAllowanceConfirm(t *testing.T) {
	e := newAllowanceEnv(t, nil)
	base := e.submit("agent:billing-bot", "payments-host", payout("acme", 5000))
	olivia, oscar, adam, aude := e.browser(), e.browser(), e.browser(), e.browser()
	for b, name := range map[*consoleBrowser]string{olivia: "olivia", oscar: "oscar", adam: "adam", aude: "aude"} {
		b.login(name, rolePassword)
	}
	_, f := giveForm(t, olivia, base, url.Values{"uses": {"3"}, "minutes": {"30"}, "max:/amount_minor": {"9000"}})
	f.Set("confirm", "PAYOUT")
	p := olivia.post("/calls/"+base.ID+"/allowance", f)
	if p.status != http.StatusSeeOther || !strings.HasSuffix(p.header.Get("Location"), "?notice=waiting") {
		t.Fatalf("give: %d %q %q", p.status, p.header.Get("Location"), p.find("allowance-error").Text())
	}
	id := strings.TrimPrefix(strings.Split(p.header.Get("Location"), "?")[0], "/allowances/")
	if got := mustCall(t, e, base.ID); got.Status != queue.StatusPending || len(got.Approvals) != 1 {
		t.Fatalf("the base call after the give: %s, %d approvals", got.Status, len(got.Approvals))
	}
	if c := e.submit("agent:billing-bot", "payments-host", payout("acme", 6000)); c.Status != queue.StatusPending || len(c.Approvals) != 0 {
		t.Errorf("an allowance waiting for its second confirmer approved a call: %s", c.Status)
	}
	gp := olivia.get(p.header.Get("Location"))
	if gp.find("allowance-notice").Length() != 1 || gp.find("allowance-confirm-form").Length() != 0 || gp.find("allowance-no-confirm").Length() != 1 {
		t.Errorf("the giver's page: notice %q, confirm forms %d", gp.find("allowance-notice").Text(), gp.find("allowance-confirm-form").Length())
	}
	if got := strings.TrimSpace(gp.find("allowance-state").Text()); got != "waiting for its confirmers" {
		t.Errorf("the state reads %q", got)
	}

	page, cf := confirmForm(t, oscar, id)
	stored, _ := e.q.Allowance(context.Background(), id)
	if got := strings.TrimSpace(page.find("allowance-scope-digest").Text()); got != stored.ScopeDigest {
		t.Errorf("the confirmer is shown scope digest %q, the allowance's is %s", got, stored.ScopeDigest)
	}
	if words := page.find("allowance-words").Text(); !strings.Contains(words, "up to 3 payments.payout calls") || !strings.Contains(words, "9000") {
		t.Errorf("the confirmer is shown the words %q", words)
	}
	if ungroup(page.find("allowance-base").Find(`[data-testid="digest"]`).Text()) != base.Digest || cf.Get("digest") != base.Digest {
		t.Error("the confirmer is not shown the base call's digest, or the form does not carry it")
	}
	if page.find("allowance-confirm-form").Find(`[data-testid="confirm-input"]`).Length() != 1 {
		t.Fatal("the confirm form does not ask for the word the base call's approval needs")
	}
	cf.Set("confirm", "PAYOUT")
	for name, edit := range map[string]func(url.Values){
		"another scope digest":  func(v url.Values) { v.Set("scope_digest", strings.Repeat("0", 64)) },
		"no page token":         func(v url.Values) { v.Del("presented") },
		"the call page's token": func(v url.Values) { v.Set("presented", oscar.presented(base.ID)) },
		"no typed word":         func(v url.Values) { v.Del("confirm") },
		"another call digest":   func(v url.Values) { v.Set("digest", strings.Repeat("a", 64)) },
	} {
		bad := url.Values{}
		for k, v := range cf {
			bad[k] = append([]string(nil), v...)
		}
		edit(bad)
		if p := oscar.post("/allowances/"+id+"/confirm", bad); p.status < 400 || p.find("allowance-error").Length() != 1 {
			t.Errorf("%s: %d, error %q", name, p.status, p.find("allowance-error").Text())
		}
	}
	if a, _ := e.q.Allowance(context.Background(), id); len(a.Confirmers) != 1 {
		t.Fatalf("refused confirmations added confirmers: %v", a.Confirmers)
	}
	if got := mustCall(t, e, base.ID); len(got.Approvals) != 1 {
		t.Fatalf("refused confirmations approved the base call: %d approvals", len(got.Approvals))
	}
	if p := olivia.post("/allowances/"+id+"/confirm", url.Values{"csrf": {olivia.csrf()}, "scope_digest": {stored.ScopeDigest}}); p.status != http.StatusConflict {
		t.Errorf("the giver confirms: %d %q", p.status, p.find("allowance-error").Text())
	}
	if p := aude.get("/allowances/" + id); p.status != http.StatusOK || p.find("allowance-confirm-form").Length() != 0 || p.find("allowance-no-confirm").Length() != 1 {
		t.Errorf("an auditor opens the waiting allowance: %d, confirm forms %d", p.status, p.find("allowance-confirm-form").Length())
	}
	if p := aude.post("/allowances/"+id+"/confirm", url.Values{"csrf": {aude.csrf()}, "scope_digest": {stored.ScopeDigest}}); p.status != http.StatusForbidden {
		t.Errorf("an auditor confirms: %d", p.status)
	}
	noCSRF := url.Values{}
	for k, v := range cf {
		if k != "csrf" {
			noCSRF[k] = v
		}
	}
	if p := oscar.post("/allowances/"+id+"/confirm", noCSRF); p.status != http.StatusForbidden {
		t.Errorf("a confirmation without the CSRF token: %d", p.status)
	}

	if p := oscar.post("/allowances/"+id+"/confirm", cf); p.status != http.StatusSeeOther {
		t.Fatalf("confirm: %d %q", p.status, p.find("allowance-error").Text())
	}
	got := mustCall(t, e, base.ID)
	if got.Status != queue.StatusApproved || len(got.Approvals) != 2 || got.Approvals[1].Operator != "oscar" || got.Approvals[1].Presented == nil {
		t.Fatalf("the base call after the confirmation: %s %+v", got.Status, got.Approvals)
	}
	if p := oscar.get("/allowances/" + id); strings.TrimSpace(p.find("allowance-state").Text()) != "live" ||
		!strings.Contains(p.find("allowance-confirmers").Text(), "olivia, oscar (2 of 2 needed)") {
		t.Errorf("after the confirmation: %q, %q", p.find("allowance-state").Text(), p.find("allowance-confirmers").Text())
	}
	covered := e.submit("agent:billing-bot", "payments-host", payout("acme", 7000))
	if covered.Status != queue.StatusApproved || len(covered.Approvals) != 2 {
		t.Fatalf("a covered payout: %s, %d approvals", covered.Status, len(covered.Approvals))
	}
	if p := adam.get("/allowances/" + id); p.find("allowance-confirm-form").Length() != 0 {
		t.Error("a confirmed allowance offers a third confirmation")
	}
	if p := adam.post("/allowances/"+id+"/confirm", url.Values{"csrf": {adam.csrf()}, "scope_digest": {stored.ScopeDigest}}); p.status != http.StatusConflict {
		t.Errorf("a third confirmation: %d %q", p.status, p.find("allowance-error").Text())
	}
}

// ungroup removes the spaces that group a digest for reading.
func ungroup(s string) string { return strings.Join(strings.Fields(s), "") }

// refundOf is a refund of amount cents of invoice n, with memo when it is
// not "".
func refundOf(n, amount int, memo string) string {
	m := ""
	if memo != "" {
		m = `,"memo":"` + memo + `"`
	}
	return `{"tool":"payments.refund","target":"invoice:INV-` + strconv.Itoa(n) + `","args":{"amount_minor":` + strconv.Itoa(amount) + `,"currency":"USD"` + m + `}}`
}

// TestAllowanceGiveRefusals: the review step is refused, on the call's
// page with why, to whom may not approve the call; a give without the
// session's CSRF token, with another call digest, without the word the
// call asks to be typed or the acknowledgement of its warning, for a call
// decided meanwhile, or beyond the live allowances a giver or a tool may
// have gives nothing and shows the review again with what to do, the
// choices kept.
func TestAllowanceGiveRefusals(t *testing.T) {
	e := newAllowanceEnv(t, func(cfg *queue.Config) { cfg.MaxAllowancesPerGiver, cfg.MaxAllowancesPerTool = 1, 2 })
	olivia, oscar, adam := e.browser(), e.browser(), e.browser()
	olivia.login("olivia", rolePassword)
	oscar.login("oscar", rolePassword)
	adam.login("adam", rolePassword)
	choices := url.Values{"uses": {"4"}, "minutes": {"25"}, "max:/amount_minor": {"3000"}, "target_prefix": {"invoice:INV-6"}}
	nothingGiven := func(what string) {
		t.Helper()
		if list, _ := e.q.Allowances(context.Background(), queue.AllowanceFilter{}); len(list) != 0 {
			t.Fatalf("%s gave %d allowances", what, len(list))
		}
	}

	rotate := e.submit("agent:ops-bot", "vault-host", `{"tool":"keys.rotate","target":"key:signing","args":{"why":"leak"}}`)
	own := e.submit("olivia", "payments-host", refundOf(6001, 100, ""))
	twice := e.submit("agent:billing-bot", "payments-host", payout("acme", 100))
	if p := olivia.post("/calls/"+twice.ID+"/approve", url.Values{"csrf": {olivia.csrf()}, "digest": {twice.Digest},
		"presented": {olivia.presented(twice.ID)}, "confirm": {"PAYOUT"}}); p.status != http.StatusSeeOther {
		t.Fatalf("olivia approves the payout: %d %q", p.status, p.find("decision-error").Text())
	}
	for name, tc := range map[string]struct {
		call   *queue.Call
		status int
		says   string
	}{
		"not an approver": {rotate, http.StatusForbidden, "admin"},
		"their own call":  {own, http.StatusForbidden, "own name"},
		"approved it":     {twice, http.StatusConflict, "already approved"},
	} {
		p := olivia.get("/calls/" + tc.call.ID + "/allowance?" + url.Values{"uses": {"2"}, "minutes": {"10"}}.Encode())
		if p.status != tc.status || !strings.Contains(p.find("decision-error").Text(), tc.says) || p.find("allowance-give-form").Length() != 0 {
			t.Errorf("%s: %d %q, give forms %d", name, p.status, p.find("decision-error").Text(), p.find("allowance-give-form").Length())
		}
		if olivia.get("/calls/"+tc.call.ID).find("allowance-offer").Length() != 0 {
			t.Errorf("%s: the call's page offers an allowance", name)
		}
	}

	// Refusals of the give itself show the review again with the choices.
	base := e.submit("agent:billing-bot", "payments-host", refundOf(6100, 1200, ""))
	_, f := giveForm(t, olivia, base, choices)
	kept := func(name string, p *htmlPage, chosen url.Values) {
		t.Helper()
		if p.find("allowance-error").Length() != 1 {
			t.Errorf("%s: %d, no error shown", name, p.status)
			return
		}
		change := p.find("allowance-change-form")
		for field := range chosen {
			want := chosen.Get(field)
			if field == "minutes" {
				continue // fixed as an until by the review
			}
			if got := change.Find(`input[name="`+field+`"]`).AttrOr("value", ""); got != want {
				t.Errorf("%s: the choice %s reads %q after the refusal, want %q", name, field, got, want)
			}
		}
	}
	for name, edit := range map[string]func(url.Values){
		"another call digest": func(v url.Values) { v.Set("digest", strings.Repeat("b", 64)) },
		"a longer until":      func(v url.Values) { v.Set("until", e.clock.Now().Add(50*time.Minute).UTC().Format(time.RFC3339)) },
		"more uses":           func(v url.Values) { v.Set("uses", "5") },
	} {
		bad := url.Values{}
		for k, v := range f {
			bad[k] = append([]string(nil), v...)
		}
		edit(bad)
		p := olivia.post("/calls/"+base.ID+"/allowance", bad)
		if p.status < 400 {
			t.Errorf("%s: %d", name, p.status)
		}
		kept(name, p, url.Values{"uses": {bad.Get("uses")}, "target_prefix": {bad.Get("target_prefix")},
			"max:/amount_minor": {bad.Get("max:/amount_minor")}})
	}
	noCSRF := url.Values{}
	for k, v := range f {
		if k != "csrf" {
			noCSRF[k] = v
		}
	}
	if p := olivia.post("/calls/"+base.ID+"/allowance", noCSRF); p.status != http.StatusForbidden {
		t.Errorf("a give without the CSRF token: %d", p.status)
	}
	nothingGiven("refused gives")

	// What the call asks to be typed, and the warning's acknowledgement.
	_, rf := giveForm(t, adam, rotate, url.Values{"uses": {"2"}, "minutes": {"10"}})
	if p := adam.post("/calls/"+rotate.ID+"/allowance", rf); p.status != http.StatusConflict || p.find("allowance-error").Length() != 1 {
		t.Errorf("a give without the typed target: %d %q", p.status, p.find("allowance-error").Text())
	}
	sly := e.submit("agent:billing-bot", "payments-host", refundOf(6200, 1200, "dup\u200bcharge"))
	review, sf := giveForm(t, oscar, sly, url.Values{"uses": {"2"}, "minutes": {"10"}})
	if review.find("allowance-give-form").Find(`[data-testid="ack-warnings"]`).Length() != 1 || review.find("deception-warning").Length() == 0 {
		t.Errorf("the review of a call with a hidden character does not warn and ask for the acknowledgement")
	}
	if p := oscar.post("/calls/"+sly.ID+"/allowance", sf); p.status != http.StatusConflict || p.find("allowance-error").Length() != 1 {
		t.Errorf("a give without the acknowledgement: %d %q", p.status, p.find("allowance-error").Text())
	}
	nothingGiven("gives without what the call asks")

	// A call decided meanwhile: its page says so.
	if p := oscar.post("/calls/"+base.ID+"/approve", url.Values{"csrf": {oscar.csrf()}, "digest": {base.Digest},
		"presented": {oscar.presented(base.ID)}}); p.status != http.StatusSeeOther {
		t.Fatalf("oscar approves the refund: %d", p.status)
	}
	if p := olivia.post("/calls/"+base.ID+"/allowance", f); p.status != http.StatusConflict || !strings.Contains(p.find("decision-error").Text(), "no longer pending") {
		t.Errorf("a give for a call approved meanwhile: %d %q", p.status, p.find("decision-error").Text())
	}
	nothingGiven("a give for a decided call")

	// Bounds: one live allowance per giver, two per tool. Each covers
	// its own invoice only.
	choices = url.Values{"uses": {"4"}, "minutes": {"25"}, "max:/amount_minor": {"3000"}}
	first := e.submit("agent:billing-bot", "payments-host", refundOf(6300, 1200, ""))
	give(t, olivia, first, choices, nil)
	second := e.submit("agent:billing-bot", "payments-host", refundOf(6301, 1200, ""))
	_, f2 := giveForm(t, olivia, second, choices)
	p := olivia.post("/calls/"+second.ID+"/allowance", f2)
	if p.status != http.StatusTooManyRequests || p.find("allowance-error-list").Length() != 1 {
		t.Errorf("a second allowance of one giver: %d %q", p.status, p.find("allowance-error").Text())
	}
	kept("a second allowance of one giver", p, choices)
	give(t, oscar, second, choices, nil)
	third := e.submit("agent:billing-bot", "payments-host", refundOf(6302, 1200, ""))
	_, f3 := giveForm(t, adam, third, choices)
	if p := adam.post("/calls/"+third.ID+"/allowance", f3); p.status != http.StatusTooManyRequests || !strings.Contains(p.find("allowance-error").Text(), "this tool") {
		t.Errorf("a third allowance of one tool: %d %q", p.status, p.find("allowance-error").Text())
	}
	if got := mustCall(t, e, third.ID); got.Status != queue.StatusPending {
		t.Errorf("a refused give approved its call: %s", got.Status)
	}
}

// TestCoveredOnTheQueue: a call an allowance approves arrives on the
// queue pages live, under "Approved by allowances", approved, linked to
// the allowance with what it has left and in whose name; a page rendered
// later reads it from the history, a filter that leaves it out leaves out
// its card, and a revocation of the allowance turns it revoked live. A
// call a person approved is not there, and one approved more than an
// hour ago is gone.
func TestCoveredOnTheQueue(t *testing.T) {
	e := newAllowanceEnv(t, nil)
	olivia, aude := e.browser(), e.browser()
	olivia.login("olivia", rolePassword)
	aude.login("aude", rolePassword)
	base := e.submit("agent:billing-bot", "payments-host", refundOf(7000, 1200, ""))
	id := give(t, olivia, base, url.Values{"uses": {"3"}, "minutes": {"30"}, "target_prefix": {"invoice:INV-7"}, "max:/amount_minor": {"5000"}}, nil)

	conn, first := olivia.mustDial("/ws")
	if doc := fragmentDoc(t, first); doc.Find(`#covered-list`).Length() != 1 || doc.Find(`[data-testid="covered-card"]`).Length() != 0 {
		t.Fatalf("the queue's first message: %s", first)
	}
	covered := e.submit("agent:billing-bot", "payments-host", refundOf(7001, 4000, ""))
	if covered.Status != queue.StatusApproved {
		t.Fatalf("the refund inside the allowance is %s", covered.Status)
	}
	msg := wsReadUntil(t, conn, `data-covered="`+covered.ID+`"`)
	doc := fragmentDoc(t, msg)
	if got := doc.Find(`[hx-swap-oob="afterbegin:#covered-list"]`).Length(); got != 1 {
		t.Errorf("the covered card is not put into the list: %s", msg)
	}
	check := func(where string, s *goquerySelection, status, left string) {
		t.Helper()
		if s.Length() != 1 {
			t.Fatalf("%s: %d covered cards of %s", where, s.Length(), covered.ID)
		}
		if got := strings.TrimSpace(s.Find(`[data-testid="covered-status"]`).Text()); got != status {
			t.Errorf("%s: status %q, want %q", where, got, status)
		}
		if href := s.Find(`[data-testid="covered-allowance"]`).AttrOr("href", ""); href != "/allowances/"+id {
			t.Errorf("%s: the allowance link is %q", where, href)
		}
		if got := s.Find(`[data-testid="covered-left"]`).Text(); !strings.HasPrefix(got, left) {
			t.Errorf("%s: what the allowance has left reads %q, want %q", where, got, left)
		}
		if by := s.Find(`[data-testid="covered-by"]`).Text(); !strings.Contains(by, "in the name of") || !strings.Contains(by, "olivia") {
			t.Errorf("%s: %q", where, by)
		}
		if s.Find(`[data-testid="card-select"], form`).Length() != 0 {
			t.Errorf("%s: a covered card has something to decide", where)
		}
	}
	check("the push", doc.Find(`[data-testid="covered-card"]`), "approved", "2 of 3 left, until ")

	sel := `[data-testid="covered-card"][data-covered="` + covered.ID + `"]`
	for name, b := range map[string]*consoleBrowser{"an operator": olivia, "an auditor": aude} {
		p := b.get("/")
		check(name+"'s queue page", p.doc.Find(sel), "approved", "2 of 3 left")
		if p.find("call-card").Length() != 0 {
			t.Errorf("%s's queue lists %d pending calls", name, p.find("call-card").Length())
		}
	}
	if p := olivia.get("/?tool=keys.rotate"); p.doc.Find(sel).Length() != 0 {
		t.Error("a queue filtered to another tool shows the covered refund")
	}

	// A refund a person approves is not on the list.
	outside := e.submit("agent:billing-bot", "payments-host", refundOf(8001, 100, ""))
	if p := olivia.post("/calls/"+outside.ID+"/approve", url.Values{"csrf": {olivia.csrf()}, "digest": {outside.Digest},
		"presented": {olivia.presented(outside.ID)}}); p.status != http.StatusSeeOther {
		t.Fatalf("approve: %d", p.status)
	}
	if n := olivia.get("/").find("covered-card").Length(); n != 1 {
		t.Errorf("the list holds %d cards after a person approved a call, want 1", n)
	}

	if p := olivia.post("/allowances/"+id+"/revoke", url.Values{"csrf": {olivia.csrf()}, "reason": {"enough"}}); p.status != http.StatusSeeOther {
		t.Fatalf("revoke: %d", p.status)
	}
	msg = wsReadUntil(t, conn, `data-covered="`+covered.ID+`"`)
	check("the push after the revocation", fragmentDoc(t, msg).Find(`[data-testid="covered-card"]`), "revoked", "ended: revoked")

	e.clock.Advance(coveredShownFor + time.Minute)
	if n := olivia.get("/").find("covered-card").Length(); n != 0 {
		t.Errorf("a call approved more than %v ago is still listed", coveredShownFor)
	}
}

// TestAllowanceBaseDeniedIsNotOffered: an allowance waiting for its second
// confirmer whose base call a person denied offers nobody its
// confirmation, and says why.
func TestAllowanceBaseDeniedIsNotOffered(t *testing.T) {
	e := newAllowanceEnv(t, nil)
	base := e.submit("agent:billing-bot", "payments-host", payout("acme", 5000))
	olivia, oscar := e.browser(), e.browser()
	olivia.login("olivia", rolePassword)
	oscar.login("oscar", rolePassword)
	id := give(t, olivia, base, url.Values{"uses": {"2"}, "minutes": {"30"}}, url.Values{"confirm": {"PAYOUT"}})
	if p := oscar.post("/calls/"+base.ID+"/deny", url.Values{"csrf": {oscar.csrf()}, "reason": {"not this supplier"}}); p.status != http.StatusSeeOther {
		t.Fatalf("deny: %d %q", p.status, p.find("decision-error").Text())
	}
	p := oscar.get("/allowances/" + id)
	if p.find("allowance-confirm-form").Length() != 0 || !strings.Contains(p.find("allowance-no-confirm").Text(), "denied") {
		t.Errorf("the allowance of a denied call: confirm forms %d, %q", p.find("allowance-confirm-form").Length(), p.find("allowance-no-confirm").Text())
	}
}

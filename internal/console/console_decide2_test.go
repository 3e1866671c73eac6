package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/gorilla/websocket"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/queue"
)

const conMailDeceptive = `{"tool":"email.send","target":"mailbox:billing@example.com","args":{"to":[{"address":"ops@example.com"}],"subject":"report\u202Efdp.exe","body":"hi"}}`

func (b *consoleBrowser) approveForm(id string, extra url.Values) *htmlPage {
	b.e.t.Helper()
	call, err := b.e.q.Call(context.Background(), id)
	if err != nil {
		b.e.t.Fatal(err)
	}
	form := url.Values{"csrf": {b.csrf()}, "digest": {call.Digest}, "presented": {b.presented(id)}}
	for k, v := range extra {
		form[k] = v
	}
	return b.post("/calls/"+id+"/approve", form)
}

func statusOf(t *testing.T, e *consoleEnv, id string) queue.Status {
	t.Helper()
	c, err := e.q.Call(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return c.Status
}

// A tool with confirm: target is approved only with its target typed, and
// a call with a deception warning only with the warning acknowledged: the
// server refuses the POST otherwise, whatever the page did.
func TestApproveConfirmations(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	b.login("olivia", rolePassword)

	files := e.submit("agent:janitor", "files-host", conFilesBody)
	p := b.get("/calls/" + files.ID)
	if got := p.find("confirm-expected").Text(); got != files.Target {
		t.Errorf("the page asks to type %q, want the target %q", got, files.Target)
	}
	if v, _ := p.find("confirm-input").Attr("data-expected"); v != files.Target {
		t.Errorf("the field expects %q", v)
	}
	for _, typed := range []string{"", "file:/srv/shared/exports/old-2.csv", "FILE:/srv/shared/exports/old-1.csv"} {
		p := b.approveForm(files.ID, url.Values{"confirm": {typed}})
		if p.status != http.StatusConflict || !strings.Contains(p.find("decision-error").Text(), "type the target") {
			t.Errorf("confirm %q: %d %q, want 409 asking for the target", typed, p.status, p.find("decision-error").Text())
		}
		if got := statusOf(t, e, files.ID); got != queue.StatusPending {
			t.Fatalf("confirm %q approved the call (%s)", typed, got)
		}
	}
	if p := b.approveForm(files.ID, url.Values{"confirm": {" " + files.Target + " "}}); p.status != http.StatusSeeOther {
		t.Fatalf("the right target: %d %q", p.status, p.find("decision-error").Text())
	}
	if got := statusOf(t, e, files.ID); got != queue.StatusApproved {
		t.Errorf("status %s, want approved", got)
	}

	mail := e.submit("agent:mailer", "mail-host", conMailDeceptive)
	if b.get("/calls/"+mail.ID).find("ack-warnings").Length() != 1 {
		t.Error("no acknowledgement box on a deceptive call")
	}
	if p := b.approveForm(mail.ID, nil); p.status != http.StatusConflict || !strings.Contains(p.find("decision-error").Text(), "hidden or look-alike") {
		t.Errorf("without the acknowledgement: %d %q", p.status, p.find("decision-error").Text())
	}
	if got := statusOf(t, e, mail.ID); got != queue.StatusPending {
		t.Fatalf("approved without the acknowledgement (%s)", got)
	}
	if p := b.approveForm(mail.ID, url.Values{"ack_warnings": {"1"}}); p.status != http.StatusSeeOther {
		t.Fatalf("with it: %d %q", p.status, p.find("decision-error").Text())
	}
	// A call without warnings or confirmation needs neither.
	refund := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	rp := b.get("/calls/" + refund.ID)
	if rp.find("ack-warnings").Length()+rp.find("confirm-input").Length() != 0 {
		t.Error("a plain call asks for a confirmation")
	}
	if p := b.approveForm(refund.ID, nil); p.status != http.StatusSeeOther {
		t.Errorf("plain approve: %d", p.status)
	}
}

// An approval's comment is stored, shown on the call page and in the
// timeline, and handed to the agent with the call.
func TestApprovalComment(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	b.login("olivia", rolePassword)
	refund := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	const comment = "Checked INV-1042 against the bank statement."
	if p := b.approveForm(refund.ID, url.Values{"comment": {"  " + comment + "\n"}}); p.status != http.StatusSeeOther {
		t.Fatalf("approve: %d %q", p.status, p.find("decision-error").Text())
	}
	p := b.get("/calls/" + refund.ID)
	if got := strings.TrimSpace(p.find("approval-comment").Text()); got != comment {
		t.Errorf("comment on the call page %q, want %q", got, comment)
	}
	tl := b.get("/history/calls/" + refund.ID)
	if !strings.Contains(tl.doc.Find(`[data-testid="timeline-entry"][data-kind="approved"]`).Text(), comment) {
		t.Error("the timeline's approval does not show the comment")
	}
	call, _ := e.q.Call(context.Background(), refund.ID)
	body, _ := json.Marshal(mustStored(t, call))
	var got struct {
		Comments []struct{ By, Comment, At string } `json:"comments"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Comments) != 1 || got.Comments[0].By != "olivia" || got.Comments[0].Comment != comment || got.Comments[0].At == "" {
		t.Errorf("the agent's call object has comments %+v", got.Comments)
	}
	// Too long a comment approves nothing.
	other := e.submit("agent:billing-bot", "payments-host", strings.Replace(conRefundBody, "INV-1042", "INV-1043", 1))
	p = b.approveForm(other.ID, url.Values{"comment": {strings.Repeat("x", queue.MaxReasonBytes+1)}})
	if p.status != http.StatusBadRequest || statusOf(t, e, other.ID) != queue.StatusPending {
		t.Errorf("a long comment: %d, status %s", p.status, statusOf(t, e, other.ID))
	}
	if v := p.find("approve-comment").Text(); len(v) != queue.MaxReasonBytes+1 {
		t.Error("the refused page lost the typed comment")
	}
}

// Deny offers the tool's preset reasons beside free text; the agent gets
// the preset, with the text added when both are given.
func TestDenyReasons(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	b.login("olivia", rolePassword)
	deny := func(id string, form url.Values) *htmlPage {
		form.Set("csrf", b.csrf())
		return b.post("/calls/"+id+"/deny", form)
	}
	n := 0
	fresh := func() *queue.Call {
		n++
		return e.submit("agent:billing-bot", "payments-host", strings.Replace(conRefundBody, "INV-1042", "INV-20"+string(rune('0'+n)), 1))
	}
	cases := []struct {
		form   url.Values
		status int
		want   string
	}{
		{url.Values{"preset": {"Already refunded"}}, http.StatusSeeOther, "Already refunded"},
		{url.Values{"preset": {"Already refunded"}, "reason": {"see INV-1001"}}, http.StatusSeeOther, "Already refunded: see INV-1001"},
		{url.Values{"reason": {"my own words"}}, http.StatusSeeOther, "my own words"},
		{url.Values{"preset": {"Because I said so"}}, http.StatusBadRequest, ""},
		{url.Values{}, http.StatusBadRequest, ""},
	}
	for _, c := range cases {
		call := fresh()
		p := deny(call.ID, c.form)
		if p.status != c.status {
			t.Errorf("deny %v: %d %q, want %d", c.form, p.status, p.find("decision-error").Text(), c.status)
			continue
		}
		got, _ := e.q.Call(context.Background(), call.ID)
		if c.want == "" {
			if got.Status != queue.StatusPending {
				t.Errorf("deny %v changed the call to %s", c.form, got.Status)
			}
			continue
		}
		if got.Denial == nil || got.Denial.Reason != c.want {
			t.Errorf("deny %v: reason %+v, want %q", c.form, got.Denial, c.want)
		}
	}
}

// The call page offers the next pending call in the queue's order and
// filter, skipping the viewer's own calls and those they approved; a
// decision keeps the order in its redirect.
func TestNextPendingCall(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	e.addUser("agent:deployer", "operator", rolePassword)
	b := e.browser()
	b.login("olivia", rolePassword)
	deploy := e.submit("agent:deployer", "deploy-host", conDeployBody) // 1 h
	e.clock.Advance(time.Second)
	refund := e.submit("agent:billing-bot", "payments-host", conRefundBody) // 15 min
	e.clock.Advance(time.Second)
	search := e.submit("agent:support-bot", "search-host", conSearchBody) // 5 min

	next := func(path string) string {
		href, _ := b.get(path).find("next-pending").Attr("href")
		return href
	}
	if got, want := next("/calls/"+search.ID), "/calls/"+refund.ID; got != want {
		t.Errorf("next after the search by deadline %q, want %q", got, want)
	}
	if got, want := next("/calls/"+refund.ID+"?sort=newest"), "/calls/"+search.ID+"?sort=newest"; got != want {
		t.Errorf("next by newest %q, want %q", got, want)
	}
	if got, want := next("/calls/"+search.ID+"?tool=releases.deploy"), "/calls/"+deploy.ID+"?tool=releases.deploy"; got != want {
		t.Errorf("next with a tool filter %q, want %q", got, want)
	}
	// After approving the refund, the page offers the next one in the same
	// order; the refund itself is no longer offered anywhere.
	p := b.approveForm(refund.ID, url.Values{"q": {"sort=oldest&bogus=1"}})
	loc := p.header.Get("Location")
	if p.status != http.StatusSeeOther || loc != "/calls/"+refund.ID+"?notice=approved&sort=oldest" {
		t.Fatalf("approve redirects %d to %q", p.status, loc)
	}
	if got, want := next(loc), "/calls/"+deploy.ID+"?sort=oldest"; got != want {
		t.Errorf("next after the decision %q, want %q", got, want)
	}
	// The deploy's proposer, an operator too, is never offered their own call.
	own := e.browser()
	own.login("agent:deployer", rolePassword)
	if got, _ := own.get("/calls/" + search.ID).find("next-pending").Attr("href"); got != "" {
		t.Errorf("the proposer is offered %q", got)
	}
	// An auditor decides nothing and is offered nothing.
	aud := e.browser()
	aud.login("aude", rolePassword)
	if p := aud.get("/calls/" + search.ID); p.find("next-pending").Length()+p.find("no-next").Length() != 0 {
		t.Error("an auditor is offered a next call")
	}
}

// The pages of one call are told, live, who has it open; closing a page
// tells the others.
func TestCallPresence(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	refund := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	olivia, adam := e.browser(), e.browser()
	olivia.login("olivia", rolePassword)
	adam.login("adam", rolePassword)
	if olivia.get("/calls/"+refund.ID).find("presence").Length() != 1 {
		t.Fatal("the call page has no presence block")
	}
	viewers := func(msg string) []string {
		var names []string
		// A message may join several fragments; the last one is current.
		fragmentDoc(t, msg).Find(`#presence`).Last().Find(`[data-viewer]`).Each(func(_ int, s *goquery.Selection) {
			n, _ := s.Attr("data-viewer")
			names = append(names, n)
		})
		return names
	}
	oc, _ := olivia.mustDial("/ws?call=" + refund.ID)
	ac, _ := adam.mustDial("/ws?call=" + refund.ID)
	for _, c := range []*websocket.Conn{oc, ac} {
		msg := wsReadUntil(t, c, `data-viewer="adam"`)
		if got := viewers(msg); !slices.Equal(got, []string{"adam", "olivia"}) {
			t.Errorf("viewers %v, want adam and olivia", got)
		}
	}
	// Another call's page hears nothing of it.
	other := e.submit("agent:billing-bot", "payments-host", strings.Replace(conRefundBody, "INV-1042", "INV-1043", 1))
	xc, first := olivia.mustDial("/ws?call=" + other.ID)
	if strings.Contains(first, "adam") {
		t.Errorf("another call's page names adam: %s", first)
	}
	ac.Close()
	msg := wsReadUntil(t, oc, `id="presence"`)
	if got := viewers(msg); !slices.Equal(got, []string{"olivia"}) {
		t.Errorf("after adam left: viewers %v, want only olivia", got)
	}
	xc.Close()
}

// The canonical call on the page parses back to the call it shows and,
// with the tool's informational members left out as `console digest
// --tools` does, to the digest the page shows; it holds no character that
// could hide.
func TestCanonicalCallRecomputesTheDigest(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	b.login("olivia", rolePassword)
	for _, body := range []string{conRefundBody, conMailDeceptive} {
		call := e.submit("agent:billing-bot", map[bool]string{true: "payments-host", false: "mail-host"}[strings.Contains(body, "payments")], body)
		p := b.get("/calls/" + call.ID)
		text := p.find("canonical-call").Text()
		for _, r := range text {
			if r < 0x20 || r >= 0x7f {
				t.Fatalf("the canonical call holds %U", r)
			}
		}
		prop, err := canonical.ParseProposal([]byte(text))
		if err != nil {
			t.Fatalf("the canonical call does not parse: %v\n%s", err, text)
		}
		tool, _ := e.q.Tools().Tool(prop.Tool)
		env := prop.Envelope(call.Actor, call.Audience)
		env.Args = tool.Bound(prop.Args)
		if d, err := env.Digest(); err != nil || d != call.Digest {
			t.Errorf("the canonical call digests to %s (%v), want %s", d, err, call.Digest)
		}
		if cmd := p.find("digest-command").Text(); cmd != "console digest --actor agent:billing-bot --audience "+call.Audience+" --tools TOOLS.yaml call.json" {
			t.Errorf("command %q", cmd)
		}
	}
}

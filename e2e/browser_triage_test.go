package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/client"
)

// queueOrder is the calls on the open queue page, in the page's order.
func (tb *tab) queueOrder() []string {
	tb.t.Helper()
	return eval[[]string](tb, `Array.from(document.querySelectorAll("#queue-list article[data-call]"), e => e.dataset.call)`)
}

// waitFor polls a JavaScript condition until it holds.
func (tb *tab) waitFor(what, js string) {
	tb.t.Helper()
	tb.do(what, waitShort, discard(chromedp.Poll[bool](js, chromedp.WithPollingInterval(50*time.Millisecond))))
}

// press sends one key to the page.
func (tb *tab) press(key string) {
	tb.t.Helper()
	tb.do("press "+key, waitShort, chromedp.KeyEvent(key))
}

// TestBrowserTriage works a backlog in Chromium as an operator would:
// a filtered and sorted queue that stays so as calls arrive, the keyboard
// from the queue to a decision, the next pending call, a tool that asks
// for its target to be typed, two operators on one call, a 19 KB argument
// beside a decision panel that stays in view, and times in the viewer's
// own zone.
func TestBrowserTriage(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	s := startServer(t, "")
	alice := s.addUser("alice", "operator")
	bob := s.addUser("bob", "operator")
	agent := func(actor, audience string) *client.Client {
		return client.New(s.url, s.token(actor, audience), client.WithPollWait(30*time.Second))
	}
	payments, deploys, searches, files, mail := agent("agent:billing-bot", "payments-host"), agent("agent:release-bot", "deploy-host"),
		agent("agent:support-bot", "search-host"), agent("agent:janitor", "files-host"), agent("agent:mailer", "mail-host")
	search := func(q string) client.Proposal {
		return client.Proposal{Tool: "search.query", Target: "index:tickets", Args: map[string]any{"query": q, "limit": 5}}
	}
	deploy := func(v string) client.Proposal {
		return client.Proposal{Tool: "releases.deploy", Target: "service:checkout",
			Args: map[string]any{"version": v, "environment": "production", "change_ticket": "CHG-4400"}}
	}

	b := startBrowser(t, ctx)
	aliceWin := b.window(t, "alice")
	aliceWin.login(s.url, alice)
	bobWin := b.window(t, "bob")
	bobWin.login(s.url, bob)

	t.Run("the queue's filter and sort hold for calls that arrive live", func(t *testing.T) {
		op := aliceWin.with(t)
		op.navigate(s.url + "/?tool=payments.refund")
		op.waitLive()
		op.mark()
		d := submit(t, ctx, deploys, deploy("v2.0.0"))
		r := submit(t, ctx, payments, refund("INV-3001", 1299))
		op.do("wait for the refund", waitShort, chromedp.WaitVisible(cardSel(r.ID)))
		if got := op.queueOrder(); !slices.Equal(got, []string{r.ID}) {
			t.Errorf("the refund filter shows %v, want only the refund (the deploy %s was pushed to it)", got, d.ID)
		}
		op.checkMarked()

		// By deadline: a search (5 min) arriving after the refund (15 min)
		// and the deploy (1 h) goes first; a second deploy of the same
		// service joins the first under one heading.
		op.navigate(s.url + "/")
		op.waitLive()
		op.mark()
		q := submit(t, ctx, searches, search("checkout timeout"))
		d2 := submit(t, ctx, deploys, deploy("v2.0.1"))
		op.do("wait for both", waitShort, chromedp.WaitVisible(cardSel(q.ID)), chromedp.WaitVisible(cardSel(d2.ID)))
		op.waitFor("the order by deadline", `(() => { const o = Array.from(document.querySelectorAll("#queue-list article[data-call]"), e => e.dataset.call); return o.join() === `+jsString(strings.Join([]string{q.ID, r.ID, d.ID, d2.ID}, ","))+`; })()`)
		head := op.text(chromedp.CSS(`[data-testid="group-head"]`))
		if !strings.HasPrefix(head, "2 calls of releases.deploy on service:checkout by agent:release-bot") {
			t.Errorf("group heading %q", head)
		}
		op.checkMarked()
		// The card links carry the queue's order to the call page.
		op.navigate(s.url + "/?sort=newest")
		href := eval[string](op, `document.querySelector('article[data-call="`+r.ID+`"] a[href^="/calls/"]').getAttribute("href")`)
		if href != "/calls/"+r.ID+"?sort=newest" {
			t.Errorf("card link %q, want it to carry the sort", href)
		}
	})

	t.Run("the keyboard goes from the queue to a decision and on to the next call", func(t *testing.T) {
		op := aliceWin.with(t)
		op.navigate(s.url + "/?tool=search.query")
		op.waitLive()
		first := op.queueOrder()
		if len(first) != 1 {
			t.Fatalf("search queue %v", first)
		}
		second := submit(t, ctx, searches, search("refund stuck"))
		op.do("wait for the second search", waitShort, chromedp.WaitVisible(cardSel(second.ID)))
		op.press("?")
		op.do("the keys help", waitShort, chromedp.WaitVisible(testID("keys-help")))
		op.press("?")
		op.press("j")
		if got := eval[string](op, `document.querySelector("#queue-list article.selected").dataset.call`); got != first[0] {
			t.Errorf("j selected %s, want the first card %s", got, first[0])
		}
		op.press("j")
		op.press("k")
		op.press("o")
		op.do("open the call", waitShort, chromedp.WaitVisible(testID("approve")))
		if loc := eval[string](op, `location.pathname + location.search`); loc != "/calls/"+first[0]+"?tool=search.query" {
			t.Errorf("o opened %s", loc)
		}
		op.waitLive()
		// a goes to Approve once it is armed; it approves nothing by itself.
		op.press("a")
		op.waitFor("Approve focused once armed", `document.activeElement && document.activeElement.dataset.testid === "approve" && !document.activeElement.disabled`)
		op.press("a")
		op.press("d")
		if got := eval[string](op, `document.activeElement.dataset.testid`); got != "deny-reason" {
			t.Errorf("d focused %q, want the deny reason", got)
		}
		if st := op.text(testID("status-value")); st != "pending" {
			t.Fatalf("keys alone changed the call to %s", st)
		}
		op.do("back to Approve", waitShort, chromedp.Focus(testID("approve")))
		op.press("\r")
		op.do("approved", waitShort, chromedp.WaitVisible(statusIs("approved")))
		href := eval[string](op, `document.querySelector('[data-testid="next-pending"]').getAttribute("href")`)
		if href != "/calls/"+second.ID+"?tool=search.query" {
			t.Errorf("next pending %q, want the other search in the same filter", href)
		}
		op.do("next pending", waitShort, chromedp.Click(testID("next-pending")), chromedp.WaitVisible(testID("approve")))
		if got := op.text(testID("call-id")); got != second.ID {
			t.Errorf("next pending opened %s, want %s", got, second.ID)
		}
	})

	t.Run("a tool that asks for its target is approved only with it typed", func(t *testing.T) {
		op := aliceWin.with(t)
		call := submit(t, ctx, files, client.Proposal{Tool: "files.delete", Target: "file:/srv/shared/exports/old-7.csv",
			Args: map[string]any{"reason": "past retention"}})
		op.navigate(s.url + "/calls/" + call.ID)
		op.do("type a wrong target and approve", waitShort,
			chromedp.SendKeys(testID("confirm-input"), "file:/srv/shared/exports/old-8.csv"),
			chromedp.WaitEnabled(testID("approve")),
			chromedp.Click(testID("approve")),
			chromedp.WaitVisible(testID("decision-error")))
		if msg := op.text(testID("decision-error")); !strings.Contains(msg, "type the target") {
			t.Errorf("refusal %q", msg)
		}
		got, err := files.Get(ctx, call.ID)
		if err != nil || got.Status != client.StatusPending {
			t.Fatalf("after a wrong target the call is %v (%v), want pending", got.Status, err)
		}
		op.do("type the target and approve", waitShort,
			chromedp.SendKeys(testID("confirm-input"), call.Target),
			chromedp.WaitEnabled(testID("approve")),
			chromedp.Click(testID("approve")),
			chromedp.WaitVisible(statusIs("approved")))
	})

	t.Run("two operators on one call see each other", func(t *testing.T) {
		call := submit(t, ctx, payments, refund("INV-3002", 5000))
		a, bb := aliceWin.with(t), bobWin.with(t)
		a.navigate(s.url + "/calls/" + call.ID)
		a.waitLive()
		bb.navigate(s.url + "/calls/" + call.ID)
		bb.waitLive()
		a.do("alice sees bob", waitShort, chromedp.WaitVisible(chromedp.CSS(`#presence li[data-viewer="bob"]`)))
		bb.do("bob sees alice", waitShort, chromedp.WaitVisible(chromedp.CSS(`#presence li[data-viewer="alice"]`)))
		if n := eval[int](a, `document.querySelectorAll('#presence li[data-viewer="alice"]').length`); n != 0 {
			t.Error("alice is told that she is viewing")
		}
		bb.navigate(s.url + "/history")
		a.waitFor("the indicator to go when bob leaves", `document.getElementById("presence").hidden === true`)
	})

	t.Run("a 19 KB argument leaves the decision in view", func(t *testing.T) {
		op := aliceWin.with(t)
		call := submit(t, ctx, mail, client.Proposal{Tool: "email.send", Target: "mailbox:reports@example.com",
			Args: map[string]any{"to": []any{map[string]any{"address": "cfo@example.com"}}, "subject": "Monthly numbers", "body": longBody(19 * 1024)}})
		op.do("1280 px", waitShort, chromedp.EmulateViewport(1280, 900))
		op.navigate(s.url + "/calls/" + call.ID)
		op.do("the long value", waitShort, chromedp.WaitVisible(testID("show-all")))
		inView := `(() => { const r = document.querySelector('[data-testid="approve"]').getBoundingClientRect(); return r.top >= 0 && r.bottom <= window.innerHeight; })()`
		if !eval[bool](op, inView) {
			t.Error("the approve button is out of view when the page opens")
		}
		op.do("show all", waitShort, chromedp.Click(testID("show-all")))
		eval[chromedp.Void](op, `window.scrollTo(0, document.documentElement.scrollHeight)`)
		if !eval[bool](op, inView) {
			t.Error("the approve button scrolled out of view with the whole 19 KB value open")
		}
		// Every line break is shown as the escape \n and a break.
		if got := eval[int](op, `document.querySelector('[data-pointer="/body"] [data-testid="arg-value"]').textContent.replaceAll("\\n", "\n").length`); got != 19*1024 {
			t.Errorf("the value in the page has %d characters, want all %d", got, 19*1024)
		}
		op.screenshot("call-long-value")
	})

	t.Run("times are shown in the viewer's zone with UTC on hover", func(t *testing.T) {
		tokyo := aliceWin.tab(t, "alice in Tokyo")
		zctx, zcancel := context.WithTimeout(tokyo.ctx, waitShort)
		_, err := chromedp.Call(zctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Asia/Tokyo"})
		zcancel()
		if err != nil {
			t.Fatalf("set the time zone: %v", err)
		}
		call := submit(t, ctx, payments, refund("INV-3003", 700))
		tokyo.navigate(s.url + "/calls/" + call.ID)
		sel := `[data-testid="call-created"] time`
		tokyo.waitFor("the local time", `document.querySelector('`+sel+`').dataset.localized === "1"`)
		shown := eval[string](tokyo, `document.querySelector('`+sel+`').textContent`)
		title := eval[string](tokyo, `document.querySelector('`+sel+`').title`)
		want := call.CreatedAt.In(time.FixedZone("JST", 9*3600)).Format("2006-01-02 15:04:05")
		if !strings.HasPrefix(shown, want) || !strings.Contains(shown, "GMT+9") {
			t.Errorf("shown %q, want %s in GMT+9", shown, want)
		}
		if wantUTC := call.CreatedAt.UTC().Format("2006-01-02 15:04:05 UTC"); title != wantUTC {
			t.Errorf("hover %q, want %q", title, wantUTC)
		}
	})
}

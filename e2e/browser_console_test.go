package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/client"
)

// waitResult is what an agent's long-poll returned.
type waitResult struct {
	call *client.Call
	err  error
}

// waitInBackground starts the agent's long-poll for a decision and
// returns where its result will arrive.
func waitInBackground(ctx context.Context, c *client.Client, id string) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		call, err := c.Wait(ctx, id)
		ch <- waitResult{call, err}
	}()
	return ch
}

// received waits for the long-poll's result.
func received(t *testing.T, ch <-chan waitResult) *client.Call {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("agent Wait: %v", r.err)
		}
		return r.call
	case <-time.After(waitLong):
		t.Fatalf("agent Wait did not return within %v of the decision", waitLong)
	}
	return nil
}

func submit(t *testing.T, ctx context.Context, c *client.Client, p client.Proposal) *client.Call {
	t.Helper()
	call, err := c.Submit(ctx, p)
	if err != nil {
		t.Fatalf("submit %s %s: %v", p.Tool, p.Target, err)
	}
	if !call.Created || call.Status != client.StatusPending {
		t.Fatalf("submit %s %s: created %v status %s, want a new pending call", p.Tool, p.Target, call.Created, call.Status)
	}
	return call
}

func refund(invoice string, amount int) client.Proposal {
	return client.Proposal{Tool: "payments.refund", Target: "invoice:" + invoice,
		Args:      map[string]any{"amount_minor": amount, "currency": "EUR", "reason_code": "duplicate"},
		Rationale: "The customer was charged twice for " + invoice + "."}
}

// statusIs selects the status on a call's page when it is status.
func statusIs(status string) chromedp.CSS {
	return chromedp.CSS(`[data-testid="status-value"].` + status)
}

// TestBrowserConsole drives the console in Chromium: operators log in,
// watch calls arrive live, read them, approve and deny them, while agents
// use the Go client against the same server.
func TestBrowserConsole(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()

	s := startServer(t, "")
	alice := s.addUser("alice", "operator")
	bob := s.addUser("bob", "operator")
	agent := func(actor, audience string) *client.Client {
		return client.New(s.url, s.token(actor, audience), client.WithPollWait(30*time.Second))
	}
	payments := agent("agent:billing-bot", "payments-host")
	deploys := agent("agent:release-bot", "deploy-host")
	weather := agent("agent:concierge", "weather-host")

	b := startBrowser(t, ctx)
	aliceWin := b.window(t, "alice")
	aliceWin.login(s.url, alice)

	t.Run("a proposed call appears on the open queue without a reload", func(t *testing.T) {
		op := aliceWin.with(t)
		op.openQueue(s.url)
		op.mark()
		call := submit(t, ctx, payments, refund("INV-1001", 1299))
		// A card that only a reload could bring fails here by timeout.
		op.do("wait for the pushed card", waitShort, chromedp.WaitVisible(cardSel(call.ID)))
		op.checkMarked()
		card := `article[data-call="` + call.ID + `"] `
		for _, c := range []struct{ sel, want string }{
			{"card-tool", "payments.refund"},
			{"card-target", "invoice:INV-1001"},
			{"card-actor", "agent:billing-bot"},
			{"card-quorum", "0 of 1 approvals"},
		} {
			if got := op.text(chromedp.CSS(card + `[data-testid="` + c.sel + `"]`)); got != c.want {
				t.Errorf("card %s = %q, want %q", c.sel, got, c.want)
			}
		}
		if got, want := op.text(testID("pending-count")), "1"; got != want {
			t.Errorf("pending count = %q, want %q", got, want)
		}
	})

	t.Run("the call page shows the digest the agent was given", func(t *testing.T) {
		op := aliceWin.with(t)
		op.openQueue(s.url)
		call := submit(t, ctx, payments, refund("INV-1002", 4250))
		op.do("open the call from its card", waitShort,
			chromedp.Click(chromedp.CSS(`article[data-call="`+call.ID+`"] [data-testid="card-decide"]`), chromedp.NodeVisible),
			chromedp.WaitVisible(testID("digest")))
		if got := op.text(testID("call-id")); got != call.ID {
			t.Fatalf("call page id = %q, want %q", got, call.ID)
		}
		shown := op.text(testID("digest"))
		if got := ungroup(shown); got != call.Digest {
			t.Errorf("digest shown %q (%q without spaces), API gave the agent %q", shown, got, call.Digest)
		}
		groups := strings.Fields(shown)
		if len(groups) != 16 || slices.ContainsFunc(groups, func(g string) bool { return len(g) != 4 }) {
			t.Errorf("digest shown as %q, want 16 groups of four", shown)
		}
		bound := run(op, "read the approve form's digest", chromedp.Value(testID("approve-digest")))
		if bound != call.Digest {
			t.Errorf("approve form posts digest %q, want %q", bound, call.Digest)
		}
	})

	t.Run("approving in the browser wakes the agent and the grant redeems once", func(t *testing.T) {
		op := aliceWin.with(t)
		call := submit(t, ctx, payments, refund("INV-1003", 990))
		decision := waitInBackground(ctx, payments, call.ID)
		op.navigate(s.url + "/calls/" + call.ID)
		if eval[bool](op, `document.querySelector('[data-testid="approve"]').disabled`) != true {
			t.Errorf("the approve button is enabled as soon as the page renders, want it disabled for a second")
		}
		op.do("approve", waitShort,
			chromedp.WaitEnabled(testID("approve")),
			chromedp.Click(testID("approve")),
			chromedp.WaitVisible(statusIs("approved")))
		if got := op.texts(testID("approval-by")); !slices.Equal(got, []string{"alice"}) {
			t.Errorf("approved by %q, want [alice]", got)
		}

		got := received(t, decision)
		if got.Status != client.StatusApproved || got.Grant == "" {
			t.Fatalf("agent got status %s grant %q, want approved with a grant", got.Status, got.Grant)
		}
		if got.Digest != call.Digest {
			t.Errorf("approved digest %s, want %s", got.Digest, call.Digest)
		}
		red, err := payments.Redeem(ctx, got.Grant, got.Spec())
		if err != nil || !red.Accepted {
			t.Fatalf("first redemption: %+v, %v; want accepted", red, err)
		}
		again, err := payments.Redeem(ctx, got.Grant, got.Spec())
		if err != nil {
			t.Fatalf("second redemption: %v", err)
		}
		if again.Accepted || again.Reason != "replayed" || again.StatusCode != http.StatusConflict {
			t.Errorf("second redemption: accepted %v reason %q status %d, want rejected replayed 409",
				again.Accepted, again.Reason, again.StatusCode)
		}
	})

	t.Run("denying with a reason hands the reason to the agent", func(t *testing.T) {
		op := aliceWin.with(t)
		call := submit(t, ctx, payments, refund("INV-1004", 15000))
		decision := waitInBackground(ctx, payments, call.ID)
		op.navigate(s.url + "/calls/" + call.ID)
		const reason = "Already refunded under INV-1001; ask the customer before refunding again."
		op.do("deny with a reason", waitShort,
			chromedp.SendKeys(testID("deny-reason"), reason),
			chromedp.WaitEnabled(testID("deny")),
			chromedp.Click(testID("deny")),
			chromedp.WaitVisible(statusIs("denied")))
		if got := op.text(testID("deny-reason-shown")); got != reason {
			t.Errorf("reason shown %q, want %q", got, reason)
		}
		got := received(t, decision)
		if got.Status != client.StatusDenied || got.Decision == nil {
			t.Fatalf("agent got status %s decision %+v, want denied", got.Status, got.Decision)
		}
		if got.Decision.Reason != reason || got.Decision.By != "alice" || got.Grant != "" {
			t.Errorf("agent got reason %q by %q grant %q, want %q by alice and no grant",
				got.Decision.Reason, got.Decision.By, got.Grant, reason)
		}
	})

	t.Run("a two-approver call needs two operators", func(t *testing.T) {
		first := aliceWin.with(t)
		second := b.window(t, "bob")
		second.login(s.url, bob)
		call := submit(t, ctx, deploys, client.Proposal{Tool: "releases.deploy", Target: "service:checkout",
			Args: map[string]any{"version": "v1.4.2", "environment": "production", "change_ticket": "CHG-20417", "canary_percent": 10}})
		if call.Approvals.Required != 2 {
			t.Fatalf("releases.deploy requires %d approvals, want 2", call.Approvals.Required)
		}
		decision := waitInBackground(ctx, deploys, call.ID)

		first.navigate(s.url + "/calls/" + call.ID)
		first.do("first approval", waitShort,
			chromedp.WaitEnabled(testID("approve")),
			chromedp.Click(testID("approve")),
			chromedp.WaitVisible(testID("approved-by-you")))
		first.waitLive()
		if got := first.text(testID("status-value")); got != "pending" {
			t.Errorf("status after one of two approvals = %q, want pending", got)
		}
		if got := first.text(testID("quorum")); got != "1 of 2" {
			t.Errorf("quorum after one approval = %q, want 1 of 2", got)
		}
		mid, err := deploys.Get(ctx, call.ID)
		if err != nil {
			t.Fatal(err)
		}
		if mid.Status != client.StatusPending || mid.Grant != "" || mid.Approvals.Received != 1 {
			t.Errorf("after one approval the agent sees status %s, %d received, grant %q; want pending, 1, no grant",
				mid.Status, mid.Approvals.Received, mid.Grant)
		}
		select {
		case r := <-decision:
			t.Fatalf("the agent's wait returned after one of two approvals: %+v", r)
		default:
		}

		second.navigate(s.url + "/calls/" + call.ID)
		if got := second.texts(testID("approval-by")); !slices.Equal(got, []string{"alice"}) {
			t.Errorf("second operator sees approvals by %q, want [alice]", got)
		}
		second.do("second approval", waitShort,
			chromedp.WaitEnabled(testID("approve")),
			chromedp.Click(testID("approve")),
			chromedp.WaitVisible(statusIs("approved")))
		got := received(t, decision)
		if got.Status != client.StatusApproved || got.Grant == "" || got.Approvals.Received != 2 {
			t.Fatalf("after two approvals the agent got status %s, %d received, grant %q; want approved with a grant",
				got.Status, got.Approvals.Received, got.Grant)
		}
		// The first operator's open page follows the decision.
		first.do("first operator's page turns approved", waitShort, chromedp.WaitVisible(statusIs("approved")))
		if red, err := deploys.Redeem(ctx, got.Grant, got.Spec()); err != nil || !red.Accepted {
			t.Fatalf("redeem the two-approver grant: %+v, %v", red, err)
		}
	})

	t.Run("hidden and direction-changing characters are shown as escapes with a warning", func(t *testing.T) {
		op := aliceWin.with(t)
		op.openQueue(s.url)
		submit(t, ctx, deploys, client.Proposal{Tool: "releases.deploy", Target: "service:search-api",
			Args:      map[string]any{"version": "v2.0.0", "environment": "staging", "change_ticket": "CHG-20501"},
			Rationale: "Staging deploy for the release train."})
		city := "Par\u202eis\u200b"
		call := submit(t, ctx, weather, client.Proposal{Tool: "weather.search", Target: "weather:forecast",
			Args: map[string]any{"city": city, "limit": 3}, Rationale: "The user asked for the weekend forecast."})
		card := `article[data-call="` + call.ID + `"] `
		op.do("wait for the card with its warning", waitShort,
			chromedp.WaitVisible(chromedp.CSS(card+`[data-testid="card-warning"]`)))
		op.screenshot("queue")

		op.navigate(s.url + "/calls/" + call.ID)
		op.do("wait for the warning and the armed buttons", waitShort,
			chromedp.WaitVisible(testID("deception-warning")),
			chromedp.WaitEnabled(testID("approve")))
		value := op.text(chromedp.CSS(`[data-testid="arg"][data-pointer="/city"] [data-testid="arg-value"]`))
		if want := "Par[U+202E]is[U+200B]"; value != want {
			t.Errorf("city shown as %q, want %q", value, want)
		}
		escapes := op.texts(testID("escape"))
		for _, want := range []string{"[U+202E]", "[U+200B]"} {
			if !slices.Contains(escapes, want) {
				t.Errorf("escapes shown %q, want %s among them", escapes, want)
			}
		}
		whole := eval[string](op, `document.body.innerText`)
		if strings.ContainsAny(whole, "\u202e\u200b") {
			t.Errorf("the page text holds the raw characters U+202E or U+200B")
		}
		warning := op.text(testID("deception-warning"))
		if !strings.Contains(warning, "/city") || !strings.Contains(warning, "bidirectional") {
			t.Errorf("warning %q does not name /city and its bidirectional control", warning)
		}
		op.screenshot("call-deceptive")
	})

	t.Run("a page from another origin cannot open the socket", func(t *testing.T) {
		reports := make(chan string, 16)
		handshakeCookies := make(chan string, 4)
		// mirror stands for the console on yet another port of 127.0.0.1:
		// it records the cookies a WebSocket handshake from the other
		// page carries there, which are the cookies it carries to the
		// console (cookies do not depend on the port).
		mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case handshakeCookies <- r.Header.Get("Cookie"):
			default:
			}
			http.Error(w, "no socket here", http.StatusForbidden)
		}))
		defer mirror.Close()
		wsURL := "ws" + strings.TrimPrefix(s.url, "http") + "/ws"
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/":
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				fmt.Fprintf(w, otherOriginPage, "ws"+strings.TrimPrefix(mirror.URL, "http")+"/ws", wsURL)
			case "/report":
				select {
				case reports <- r.URL.Query().Get("event"):
				default:
				}
			default:
				http.NotFound(w, r)
			}
		}))
		defer other.Close()
		for _, u := range []string{other.URL, mirror.URL} {
			if !strings.HasPrefix(u, "http://127.0.0.1:") || u == s.url {
				t.Fatalf("%s must be another port on 127.0.0.1 than the console's %s", u, s.url)
			}
		}

		// The operator is logged in in this browser, and the other page's
		// tab shares the session cookie.
		evil := aliceWin.tab(t, "other origin")
		evil.navigate(other.URL + "/")
		var events []string
	collect:
		for {
			select {
			case ev := <-reports:
				events = append(events, ev)
				if ev == "open" || strings.HasPrefix(ev, "close") {
					break collect
				}
			case <-time.After(waitShort):
				t.Fatalf("the other origin's page reported %q and no close within %v", events, waitShort)
			}
		}
		if slices.Contains(events, "open") {
			t.Fatalf("a page from %s opened the console's socket: events %q", other.URL, events)
		}
		select {
		case c := <-handshakeCookies:
			if !strings.Contains(c, "countersign=") {
				t.Errorf("a handshake from the other page carried cookies %q, want the session cookie "+
					"(without it this test proves nothing about the Origin check)", c)
			}
		case <-time.After(waitShort):
			t.Fatal("the other page's handshake to the mirror never arrived")
		}
	})

	t.Run("logging out in one tab closes the other tab's socket", func(t *testing.T) {
		win := b.window(t, "alice again")
		win.login(s.url, alice)
		stays := win.tab(t, "second tab")
		stays.recordSockets()
		stays.openQueue(s.url)
		win.openQueue(s.url)
		win.do("log out", waitShort,
			chromedp.Click(testID("logout")),
			chromedp.WaitVisible(testID("login-form")))
		stays.do("wait for the ended indicator", waitShort,
			chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="ended"]`)))
		closed := `window.__ws.some(e => e.startsWith("close:"))`
		stays.do("wait for the socket to close", waitShort,
			discard(chromedp.Poll[bool](closed)))
		// Longer than the socket's first reconnection delay: it must stay
		// closed.
		time.Sleep(1500 * time.Millisecond)
		if got := eval[[]string](stays, `window.__ws`); !slices.Equal(got, []string{"open", "close:1008"}) {
			t.Errorf("the other tab's socket events = %q, want [open close:1008] and no reconnection", got)
		}
		// The session is over for every tab.
		stays.navigate(s.url + "/")
		stays.do("the queue now asks for a login", waitShort, chromedp.WaitVisible(testID("login-form")))
	})

	// How fast it arrives is measured by BenchmarkWSFanout
	// (docs/performance.md); here only that it arrives over the socket.
	t.Run("a decision in one tab reaches the other tab without a reload", func(t *testing.T) {
		a := aliceWin.with(t)
		other := aliceWin.tab(t, "second tab")
		a.openQueue(s.url)
		other.openQueue(s.url)
		call := submit(t, ctx, payments, refund("INV-1009", 2500))
		a.do("card in tab A", waitShort, chromedp.WaitVisible(cardSel(call.ID)))
		other.do("card in tab B", waitShort, chromedp.WaitVisible(cardSel(call.ID)))
		other.mark()
		a.do("open the call and wait until approve is armed", waitShort,
			chromedp.Click(chromedp.CSS(`article[data-call="`+call.ID+`"] [data-testid="card-decide"]`), chromedp.NodeVisible),
			chromedp.WaitEnabled(testID("approve")))
		clicked := time.Now()
		a.do("approve", waitShort, chromedp.Click(testID("approve")))
		other.do("the card leaves the other tab", waitShort, chromedp.WaitNotPresent(cardSel(call.ID)))
		t.Logf("the card left the other tab %v after the click", time.Since(clicked).Round(time.Millisecond))
		other.checkMarked()
		a.do("approval confirmed", waitShort, chromedp.WaitVisible(statusIs("approved")))
	})
}

// otherOriginPage is served from another origin. It tries to open the
// console's socket with the browser's cookies and reports what happens.
const otherOriginPage = `<!DOCTYPE html>
<html><head><title>another site</title></head><body><p>another site</p>
<script>
function report(e) { fetch("/report?event=" + encodeURIComponent(e)); }
new WebSocket(%q);
const ws = new WebSocket(%q);
ws.onopen = () => report("open");
ws.onerror = () => report("error");
ws.onclose = (e) => report("close:" + e.code);
</script></body></html>`

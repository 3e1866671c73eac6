package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/client"
)

// TestBrowserOperatorToken: an operator makes a decide token on their
// account's tokens page in a real browser (the secret shown once), a
// script approves a call through the operator API of the real binary run
// with --operator-api (recorded command over api, unattested), and the
// token revoked on the page is refused at the script's next request. The
// page is laid out at both widths, with screenshots.
func TestBrowserOperatorToken(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s := startServer(t, "", "--operator-api")
	alice := s.addUser("alice", "operator")
	agent := client.New(s.url, s.token("agent:billing-bot", "payments-host"))
	call := submit(t, ctx, agent, refund("INV-8801", 1299))

	b := startBrowser(t, ctx)
	tb := b.window(t, "alice")
	tb.login(s.url, alice)
	tb.navigate(s.url + "/account/tokens")
	tb.do("make a decide token", waitShort,
		chromedp.Click(testID("optoken-scope-decide")),
		chromedp.SendKeys(testID("optoken-note"), "terminal on my laptop"),
		chromedp.Click(testID("optoken-make")),
		chromedp.WaitVisible(testID("optoken-secret")),
	)
	secret := strings.TrimSpace(tb.text(testID("optoken-secret")))
	if !strings.HasPrefix(secret, "cso_") {
		t.Fatalf("the secret shown: %q", secret)
	}
	for _, w := range layoutWidths {
		tb.do("set the window to "+w.name+" px", waitShort, chromedp.EmulateViewport(w.width, w.height))
		if problems := eval[[]string](tb, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the tokens page at %s px:\n  %s", w.name, strings.Join(problems, "\n  "))
		}
		tb.screenshot("operator-tokens-" + w.name)
	}

	do := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, s.url+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+secret)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		json.NewDecoder(res.Body).Decode(&out)
		return res.StatusCode, out
	}
	code, q := do("GET", "/api/v1/operator/queue", "")
	if code != http.StatusOK {
		t.Fatalf("the queue through the operator API: %d %v", code, q)
	}
	var listing string
	for _, c := range q["calls"].([]any) {
		if m := c.(map[string]any); m["call"].(map[string]any)["id"] == call.ID {
			listing, _ = m["listing"].(string)
		}
	}
	body, _ := json.Marshal(map[string]string{"digest": call.Digest, "listing": listing})
	code, approved := do("POST", "/api/v1/operator/calls/"+call.ID+"/approve", string(body))
	if code != http.StatusOK {
		t.Fatalf("approve through the operator API: %d %v", code, approved)
	}
	given := approved["call"].(map[string]any)["approvals"].(map[string]any)["given"].([]any)[0].(map[string]any)
	if given["channel"] != "api" || given["method"] != "command" || given["human"] != "unattested" || given["by"] != "alice" {
		t.Errorf("the approval through the operator API: %v", given)
	}

	tb.do("set the window to 1280 px", waitShort, chromedp.EmulateViewport(1280, 900))
	tb.navigate(s.url + "/account/tokens")
	tb.do("revoke the token", waitShort,
		chromedp.Click(testID("optoken-revoke")),
		chromedp.WaitVisible(testID("optoken-notice")),
	)
	if code, _ := do("GET", "/api/v1/operator/queue", ""); code != http.StatusUnauthorized {
		t.Errorf("the revoked token at its next request: %d", code)
	}
}

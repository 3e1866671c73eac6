package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestBrowserStatusPage follows a call's status link as the user of an MCP
// client does, without a console login: the demo's MCP gateway answers a
// held tools/call with its approval_url; the page it names is laid out
// without an element outside its box and with no axe-core violation at
// 1280, 1024 and 390 px, while the call waits and once it is approved; an
// open page follows the approval in place, without reloading.
func TestBrowserStatusPage(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	data := t.TempDir()
	s := startProcess(t, data, "demo", "--addr", "127.0.0.1:0", "--data", data, "--no-agent", "--hold", "1s")
	var endpoint, token string
	for end := time.Now().Add(30 * time.Second); token == "" && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for _, line := range strings.Split(s.logs.String(), "\n") {
			if i := strings.Index(line, "MCP gateway: the example MCP server's tools at "); i >= 0 {
				endpoint = strings.Fields(line[i+len("MCP gateway: the example MCP server's tools at "):])[0]
			}
			if _, rest, ok := strings.Cut(line, "token (also in "); ok {
				if _, tok, ok := strings.Cut(rest, "): "); ok {
					token = strings.TrimSpace(tok)
				}
			}
		}
	}
	if endpoint == "" || token == "" {
		t.Fatalf("the demo printed no MCP endpoint and token:\n%s", s.logs.String())
	}
	tr := &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearerTransport{token}}}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "status-test", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", endpoint, err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"s": "the status page", "n": 7}})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var held struct {
		Status      string `json:"status"`
		CallID      string `json:"call_id"`
		ApprovalURL string `json:"approval_url"`
		Digest      string `json:"digest"`
	}
	if err := json.Unmarshal(raw, &held); err != nil || held.ApprovalURL == "" || held.CallID == "" {
		t.Fatalf("the held call's answer: %s (%v)", raw, err)
	}

	b := startBrowser(t, ctx)
	user := b.window(t, "the agent's user")
	check := func(state string) {
		t.Helper()
		for _, w := range boxWidths {
			t.Run(state+" at "+w.name+" px", func(t *testing.T) {
				tb := user.with(t)
				tb.do("set the window to "+w.name+" px", waitShort, chromedp.EmulateViewport(w.width, w.height))
				tb.navigate(held.ApprovalURL)
				tb.do("wait for the page", waitShort, chromedp.WaitVisible(chromedp.CSS("main")))
				if got := tb.liveText("status-value"); got != state {
					t.Errorf("the status page reads %q, want %q", got, state)
				}
				if problems := eval[[]string](tb, boxProblemsJS); len(problems) > 0 {
					t.Errorf("the status page (%s) at %s px:\n  %s", state, w.name, strings.Join(problems, "\n  "))
				}
				accessible(t, tb, "the status page ("+state+") at "+w.name)
				if w.name != "1024" {
					tb.screenshot("status-" + state + "-" + w.name)
				}
			})
		}
	}
	check("pending")
	// The open page follows the call in place: no reload, and a polite
	// live region says what changed.
	user.do("a laptop", waitShort, chromedp.EmulateViewport(1280, 900))
	user.navigate(held.ApprovalURL)
	user.mark()
	if controlDecide(t, s, "approve", held.CallID, "alice", held.Digest) != 200 {
		t.Fatal("alice approves the held call from the shell")
	}
	user.waitFor("the page to follow the approval", `(() => { const e = document.querySelector('[data-testid="status-value"]'); return !!e && e.textContent.trim() === "approved"; })()`)
	user.checkMarked()
	if got := user.liveText("follow-news"); got != "The call is now approved." {
		t.Errorf("the live region says %q", got)
	}
	check("approved")
}

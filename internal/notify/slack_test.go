package notify_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/notify"
)

// fakeSlack speaks the part of the Slack Web API Countersign uses
// (chat.postMessage, chat.update: form posts authenticated by the bot
// token, answering {"ok":...}) and an incoming webhook (a JSON post to a
// secret URL, answering "ok").
type fakeSlack struct {
	t     *testing.T
	token string
	hook  string // the incoming webhook's path

	mu       sync.Mutex
	messages map[string]*slackMessage // by ts
	order    []string
	calls    []string // method and ts, in order
	webhook  []map[string]any
	fail     func(method string) (status int, body string)
	next     int
}

type slackMessage struct {
	Channel, TS, ThreadTS, Text string
	Blocks                      []map[string]any
	Updates                     int
}

func newFakeSlack(t *testing.T, token string) (*fakeSlack, *httptest.Server) {
	f := &fakeSlack{t: t, token: token, hook: "/services/T0/B0/secretpart", messages: map[string]*slackMessage{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeSlack) answer(w http.ResponseWriter, v map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (f *fakeSlack) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == f.hook {
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			http.Error(w, "invalid_payload", http.StatusBadRequest)
			return
		}
		var msg map[string]any
		if err := json.NewDecoder(r.Body).Decode(&msg); err != nil || msg["text"] == nil {
			http.Error(w, "invalid_payload", http.StatusBadRequest)
			return
		}
		f.webhook = append(f.webhook, msg)
		io.WriteString(w, "ok")
		return
	}
	method := strings.TrimPrefix(r.URL.Path, "/api/")
	if f.fail != nil {
		if status, body := f.fail(method); status != 0 {
			if status == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "30")
			}
			w.WriteHeader(status)
			io.WriteString(w, body)
			return
		}
	}
	if err := r.ParseForm(); err != nil {
		f.answer(w, map[string]any{"ok": false, "error": "invalid_form_data"})
		return
	}
	token := r.PostForm.Get("token")
	if h := r.Header.Get("Authorization"); h != "" {
		token = strings.TrimPrefix(h, "Bearer ")
	}
	if token != f.token {
		f.answer(w, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	var blocks []map[string]any
	if err := json.Unmarshal([]byte(r.PostForm.Get("blocks")), &blocks); err != nil || len(blocks) == 0 {
		f.answer(w, map[string]any{"ok": false, "error": "invalid_blocks"})
		return
	}
	channel, text := r.PostForm.Get("channel"), r.PostForm.Get("text")
	switch method {
	case "chat.postMessage":
		f.next++
		ts := fmt.Sprintf("1700000000.%06d", f.next)
		f.messages[ts] = &slackMessage{Channel: channel, TS: ts, ThreadTS: r.PostForm.Get("thread_ts"), Text: text, Blocks: blocks}
		f.order = append(f.order, ts)
		f.calls = append(f.calls, method+" "+ts)
		f.answer(w, map[string]any{"ok": true, "channel": channel, "ts": ts})
	case "chat.update":
		ts := r.PostForm.Get("ts")
		m, ok := f.messages[ts]
		if !ok || m.Channel != channel {
			f.answer(w, map[string]any{"ok": false, "error": "message_not_found"})
			return
		}
		m.Text, m.Blocks = text, blocks
		m.Updates++
		f.calls = append(f.calls, method+" "+ts)
		f.answer(w, map[string]any{"ok": true, "channel": channel, "ts": ts, "text": text})
	default:
		f.answer(w, map[string]any{"ok": false, "error": "unknown_method"})
	}
}

// texts collects every text in a block layout.
func texts(blocks []map[string]any) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if s, ok := x["text"].(string); ok {
				out = append(out, s)
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	for _, b := range blocks {
		walk(b)
	}
	return out
}

// checkNoApproval asserts the message's only interactive element is a
// button that opens the call's URL: nothing in Slack can decide.
func checkNoApproval(t *testing.T, blocks []map[string]any, url string) {
	t.Helper()
	buttons := 0
	for _, b := range blocks {
		if b["type"] != "actions" {
			continue
		}
		for _, e := range b["elements"].([]any) {
			el := e.(map[string]any)
			buttons++
			if el["type"] != "button" || el["url"] != url {
				t.Fatalf("interactive element %v: want only a button opening %s", el, url)
			}
			label := strings.ToLower(el["text"].(map[string]any)["text"].(string))
			if strings.Contains(label, "approve") || strings.Contains(label, "deny") {
				t.Fatalf("button %q decides in Slack", label)
			}
		}
	}
	if buttons != 1 {
		t.Fatalf("%d buttons, want the one that opens the call", buttons)
	}
}

func has(list []string, want string) bool {
	for _, s := range list {
		if s == want {
			return true
		}
	}
	return false
}

func TestSlackPostsThenUpdatesAndThreads(t *testing.T) {
	fake, srv := newFakeSlack(t, "xoxb-test-token")
	cfg := mustConfig(t, `
channels:
  slack:
    type: slack
    token: {env: SLACK_TOKEN}
    channel: C0123456789
    api_url: `+srv.URL+`/api/
routes:
  - tools: ["*"]
    notify: [slack]
    escalate_after: 10m
    escalate_to: [slack]
`, map[string]string{"SLACK_TOKEN": "xoxb-test-token"})
	r := newRig(t, cfg, notify.BuildOptions{}, 0.5)
	c := testCall("call_a", r.clk.Now())
	c.Target = "invoice:INV-1042 <!channel> \u202e"
	r.outbox.Enqueue(r.router.Notices(submitted(c))...)
	deliverAll(t, r.disp)
	r.clk.Advance(10 * time.Minute)
	deliverAll(t, r.disp) // the escalation, in the thread
	r.clk.Advance(time.Minute)
	r.outbox.Enqueue(r.router.Notices(approved(c, "alice", r.clk.Now()))...)
	deliverAll(t, r.disp)

	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.order) != 2 || len(fake.calls) != 3 {
		t.Fatalf("calls %v, want a post, a thread reply, and an update of the first post", fake.calls)
	}
	first, reply := fake.messages[fake.order[0]], fake.messages[fake.order[1]]
	if fake.calls[2] != "chat.update "+first.TS || first.Updates != 1 {
		t.Fatalf("calls %v: the approval must update %s", fake.calls, first.TS)
	}
	if reply.ThreadTS != first.TS || !strings.HasPrefix(reply.Text, "Escalated: still waiting after 10m0s") {
		t.Fatalf("escalation %+v, want a reply in the thread of %s", reply, first.TS)
	}
	if first.Channel != "C0123456789" {
		t.Fatalf("posted to %s", first.Channel)
	}
	// The updated message says who approved, keeps the link, and still
	// has no way to decide in Slack.
	all := texts(first.Blocks)
	for _, want := range []string{"Approved", "Tool: payments.refund", "Target: invoice:INV-1042 <!channel> [U+202E]",
		"Actor: agent:billing-bot", "Digest: 3f2a…", "Decide by: 2030-03-04 10:15:00 UTC", "approved by alice"} {
		if !has(all, want) {
			t.Errorf("updated message lacks %q: %q", want, all)
		}
	}
	checkNoApproval(t, first.Blocks, "https://approvals.example.com/calls/call_a")
	// The plain text is what Slack formats: the target cannot mention
	// anyone.
	if strings.Contains(first.Text, "<!channel>") || !strings.Contains(first.Text, "&lt;!channel&gt;") {
		t.Fatalf("text %q: the target's <!channel> must be escaped", first.Text)
	}
	for _, b := range reply.Blocks {
		if b["type"] == "header" {
			if txt := b["text"].(map[string]any); txt["type"] != "plain_text" {
				t.Fatalf("header %v is not plain text", txt)
			}
		}
	}
	if rows := rowsOf(r.outbox, "slack"); rows[0].Receipt != "C0123456789 "+first.TS || rows[1].Receipt != "" {
		t.Fatalf("receipts %q %q", rows[0].Receipt, rows[1].Receipt)
	}
}

func TestSlackIncomingWebhookPostsAFollowUp(t *testing.T) {
	fake, srv := newFakeSlack(t, "unused")
	cfg := mustConfig(t, `
channels:
  slack:
    type: slack
    webhook_url: {env: SLACK_WEBHOOK}
`, map[string]string{"SLACK_WEBHOOK": srv.URL + fake.hook})
	r := newRig(t, cfg, notify.BuildOptions{}, 0.5)
	c := testCall("call_a", r.clk.Now())
	r.outbox.Enqueue(r.router.Notices(submitted(c))...)
	r.outbox.Enqueue(r.router.Notices(denied(c, "bob", "not this invoice", r.clk.Now()))...)
	deliverAll(t, r.disp)
	deliverAll(t, r.disp)
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.webhook) != 2 {
		t.Fatalf("webhook got %d messages, want the call and a follow-up", len(fake.webhook))
	}
	raw, _ := json.Marshal(fake.webhook[0]["blocks"])
	var blocks []map[string]any
	json.Unmarshal(raw, &blocks)
	checkNoApproval(t, blocks, "https://approvals.example.com/calls/call_a")
	follow := fake.webhook[1]["text"].(string)
	if !strings.HasPrefix(follow, "Denied: payments.refund on invoice:INV-1042") || !strings.Contains(follow, "denied by bob: not this invoice") ||
		!strings.Contains(follow, "https://approvals.example.com/calls/call_a") || fake.webhook[1]["blocks"] != nil {
		t.Fatalf("follow-up %v", fake.webhook[1])
	}
}

func TestSlackRefusalsAndRateLimits(t *testing.T) {
	cases := []struct {
		name  string
		token string
		fail  func(string) (int, string)
		state notify.State
		want  string
	}{
		{"a wrong token is permanent", "xoxb-wrong", nil, notify.StateDead, "invalid_auth"},
		{"a rate limit is retried after Retry-After", "xoxb-ok", func(string) (int, string) { return 429, "" }, notify.StatePending, "rate limit"},
		{"a server error is retried", "xoxb-ok", func(string) (int, string) { return 503, "<html>" }, notify.StatePending, "503"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake, srv := newFakeSlack(t, "xoxb-ok")
			fake.fail = tc.fail
			cfg := mustConfig(t, "channels:\n  slack: {type: slack, token: {env: T}, channel: C1, api_url: \""+srv.URL+"/api/\"}\n",
				map[string]string{"T": tc.token})
			r := newRig(t, cfg, notify.BuildOptions{}, 0)
			r.outbox.Enqueue(r.router.Notices(submitted(testCall("call_a", r.clk.Now())))...)
			deliverAll(t, r.disp)
			row := rowsOf(r.outbox, "slack")[0]
			if row.State != tc.state || !strings.Contains(row.LastError, tc.want) {
				t.Fatalf("row %s %q, want %s %q", row.State, row.LastError, tc.state, tc.want)
			}
			if tc.fail != nil && strings.Contains(tc.name, "Retry-After") && row.DueAt.Sub(r.clk.Now()) < 30*time.Second {
				t.Fatalf("retry in %s, want at least 30s", row.DueAt.Sub(r.clk.Now()))
			}
		})
	}
}

package notify

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

// Every message about a call names the risk and effects its tool declares:
// the webhook body carries them, and email, Slack and push say them.
func TestMessagesShowTheToolsRisk(t *testing.T) {
	cfg, err := ParseConfig([]byte("channels:\n  hook:\n    type: webhook\n    url: https://hooks.example.com/cs\n    secret: {env: S}\nroutes:\n  - tools: ['*']\n    notify: [hook]\n"), Env{Getenv: func(string) string { return "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 32)) }})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRouter(cfg, "http://127.0.0.1:8080")
	r.SetRisk(func(tool string) (string, []string) {
		if tool == "files.delete" {
			return "high", []string{"destructive"}
		}
		return "", nil
	})
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	call := &queue.Call{ID: "call_1", Tool: "files.delete", Target: "file:/srv/shared/a", Actor: "agent:janitor",
		Status: queue.StatusPending, CreatedAt: now, DecideBy: now.Add(time.Hour), ApprovalsRequired: 1}
	ns := r.Notices(queue.Event{Kind: "submitted", Call: call})
	if len(ns) == 0 {
		t.Fatal("no notices")
	}
	var ev Event
	if err := json.Unmarshal(ns[0].Body, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Data.Risk != "high" || len(ev.Data.Effects) != 1 || ev.Data.Effects[0] != "destructive" {
		t.Fatalf("webhook data risk %q effects %v", ev.Data.Risk, ev.Data.Effects)
	}
	const want = "high risk · destructive"
	if p := pushPayload(ev); !strings.Contains(p.Body, want) {
		t.Errorf("push body %q lacks %q", p.Body, want)
	}
	found := false
	for _, row := range mailView(ev).Rows {
		found = found || row.Value == want
	}
	if !found {
		t.Errorf("email rows %+v lack %q", mailView(ev).Rows, want)
	}
	b, _ := json.Marshal(blocks(ev))
	if !strings.Contains(string(b), "Risk: "+want) {
		t.Errorf("slack blocks %s lack the risk", b)
	}
	// A tool that declares nothing adds nothing.
	call.Tool = "search.query"
	ns = r.Notices(queue.Event{Kind: "submitted", Call: call})
	if strings.Contains(string(ns[0].Body), `"risk"`) {
		t.Errorf("undeclared risk in %s", ns[0].Body)
	}
}

package notify_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/notify"
)

// TestDocumentedConfigurationsLoad parses every YAML example of
// docs/notifications.md, so the documentation cannot drift from what the
// console accepts.
func TestDocumentedConfigurationsLoad(t *testing.T) {
	doc, err := os.ReadFile("../../docs/notifications.md")
	if err != nil {
		t.Fatal(err)
	}
	whsk, _ := newSigningKey(t)
	env := notify.Env{
		Getenv: func(k string) string {
			switch k {
			case "COUNTERSIGN_HOOK_SIGNING_KEY":
				return whsk
			case "SLACK_BOT_TOKEN":
				return "xoxb-test"
			case "W":
				return "https://hooks.slack.com/services/T0/B0/X"
			case "S":
				return newSecret(t)
			}
			return "a-secret"
		},
		ReadFile: func(name string) ([]byte, error) {
			switch {
			case strings.Contains(name, "slack-webhook-url"):
				return []byte("https://hooks.slack.com/services/T0/B0/X"), nil
			case strings.HasSuffix(name, ".secret"):
				return []byte(newSecret(t)), nil
			}
			return os.ReadFile(name)
		},
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	if len(blocks) < 6 {
		t.Fatalf("%d YAML examples, want one per channel and the overview", len(blocks))
	}
	for i, b := range blocks {
		y := b[1]
		// The overview names its placeholders; give them real channels.
		y = strings.Replace(y, "  NAME:\n    type: webhook | slack | email | push\n", "", 1)
		y = strings.Replace(y, "    # … the type's own fields, below\n", "", 1)
		y = strings.Replace(y, "    events: [call.submitted, call.escalated]  # optional: only these events\n    timeout: 10s                              # one attempt\n",
			"  ops-hook: {type: webhook, url: \"https://h.example.com/\", secret: {env: S}, events: [call.submitted], timeout: 10s}\n"+
				"  browsers: {type: push, subject: \"mailto:ops@example.com\"}\n  oncall-slack: {type: slack, webhook_url: {env: W}}\n", 1)
		if !strings.Contains(y, "channels:") {
			continue
		}
		if _, err := notify.ParseConfig([]byte(y), env); err != nil {
			t.Errorf("example %d:\n%s\n%v", i+1, y, err)
		}
	}
}

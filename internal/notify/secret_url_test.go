package notify_test

import (
	"net"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/notify"
)

// A channel's URL can be its credential (a Slack incoming webhook's URL
// is; a webhook URL may carry a token): a network error must not copy it
// into the delivery's last error, which the database keeps, the
// deliveries page shows and the log writes.
func TestSendErrorsDoNotRevealTheChannelsURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close() // nothing answers there: every attempt fails to connect
	// One channel per rig: the rig's jitter is not made for attempts
	// failing at once.
	for _, c := range []struct{ name, yaml string }{
		{"slack", `
channels:
  slack:
    type: slack
    webhook_url: {env: SLACK_WEBHOOK}
`},
		{"hook", `
channels:
  hook:
    type: webhook
    url: ` + closed + `/hooks/in?token=HookSecretPart
    secret: {env: HOOK_SECRET}
`},
	} {
		cfg := mustConfig(t, c.yaml, map[string]string{
			"SLACK_WEBHOOK": closed + "/services/T0001/B0001/SlackSecretPart",
			"HOOK_SECRET":   newSecret(t),
		})
		r := newRig(t, cfg, notify.BuildOptions{}, 0.5)
		r.outbox.Enqueue(r.router.Notices(submitted(testCall("call_a", r.clk.Now())))...)
		deliverAll(t, r.disp)
		rows := rowsOf(r.outbox, c.name)
		if len(rows) != 1 {
			t.Fatalf("%s: %d rows, want one", c.name, len(rows))
		}
		row := rows[0]
		if row.State != notify.StatePending || row.Attempts != 1 || row.LastError == "" {
			t.Fatalf("%s: %s after %d attempts (%q), want a failed attempt to retry", row.Channel, row.State, row.Attempts, row.LastError)
		}
		if strings.Contains(row.LastError, "SecretPart") {
			t.Errorf("%s: the last error reveals the channel's URL: %s", row.Channel, row.LastError)
		}
		if !strings.Contains(row.LastError, closed) {
			t.Errorf("%s: the last error %q does not name the host it could not reach", row.Channel, row.LastError)
		}
	}
}

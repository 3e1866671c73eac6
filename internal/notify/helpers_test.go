package notify_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/notify/outboxtest"
	"github.com/countersign/countersign/internal/queue"
)

var quiet = slog.New(slog.DiscardHandler)

var t0 = time.Date(2030, 3, 4, 10, 0, 0, 0, time.UTC)

// testCall is a pending call as the queue would publish it.
func testCall(id string, created time.Time) *queue.Call {
	args, err := canonical.Parse([]byte(`{"amount_minor":9007199254740991,"currency":"USD","secret_note":"s3cr3t"}`))
	if err != nil {
		panic(err)
	}
	return &queue.Call{
		ID: id, Actor: "agent:billing-bot", Audience: "payments-host", Tool: "payments.refund",
		Target: "invoice:INV-1042", Args: args.(canonical.Object),
		Digest: "3f2a9c0d1e2f3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3", Status: queue.StatusPending,
		ApprovalsRequired: 1, CreatedAt: created, DecideBy: created.Add(15 * time.Minute),
	}
}

func submitted(c *queue.Call) queue.Event {
	return queue.Event{Kind: audit.KindSubmitted, Call: c.Clone()}
}

func approved(c *queue.Call, by string, at time.Time) queue.Event {
	c.Status, c.DecidedAt = queue.StatusApproved, at
	c.Approvals = append(c.Approvals, queue.Approval{Operator: by, Channel: "web", At: at})
	return queue.Event{Kind: audit.KindGranted, Call: c.Clone()}
}

func denied(c *queue.Call, by, reason string, at time.Time) queue.Event {
	c.Status, c.DecidedAt = queue.StatusDenied, at
	c.Denial = &queue.Denial{By: by, Channel: "web", Reason: reason, At: at}
	return queue.Event{Kind: audit.KindDenied, Call: c.Clone()}
}

func mustConfig(t testing.TB, yaml string, env map[string]string) *notify.Config {
	t.Helper()
	cfg, err := notify.ParseConfig([]byte(yaml), notify.Env{Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	return cfg
}

func newSecret(t testing.TB) string {
	b := make([]byte, 32)
	rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

func newSigningKey(t testing.TB) (whsk, whpk string) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return "whsk_" + base64.StdEncoding.EncodeToString(priv), "whpk_" + base64.StdEncoding.EncodeToString(pub)
}

// deliverAll runs the dispatcher until nothing is due at the clock's now.
func deliverAll(t testing.TB, d *notify.Dispatcher) int {
	t.Helper()
	total := 0
	for i := 0; i < 1000; i++ {
		n, err := d.Dispatch(context.Background())
		if err != nil {
			t.Fatalf("Dispatch: %v", err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
	t.Fatal("Dispatch never ran out of rows")
	return total
}

func rowsOf(m *outboxtest.Memory, channel string) []notify.Delivery {
	var out []notify.Delivery
	for _, r := range m.Rows() {
		if channel == "" || r.Channel == channel {
			out = append(out, r)
		}
	}
	return out
}

package server

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/testkit"
)

// records is a slog handler that keeps every record, for tests.
type records struct {
	mu   sync.Mutex
	list []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, rec)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) all() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]slog.Record(nil), r.list...)
}

// A refusal that applies the console's rules (here a freeze, answered
// 503) is logged at INFO, by the access log only; a fault is an ERROR.
func TestRefusalsLoggedAtInfo(t *testing.T) {
	logs := &records{}
	st := startAPIStackIn(t, t.TempDir(), func(c *Config) { c.Logger = slog.New(logs) })
	testkit.SeedUsers(t, st.db.Accounts(), account.RoleAdmin, "ada")
	token := st.token("agent:billing-bot", "payments-host")
	if _, err := st.queue.Freeze(context.Background(), "ada", audit.ChannelCLI, "payments.refund", "", "incident 7"); err != nil {
		t.Fatal(err)
	}
	r := st.submit(token, refundBody, http.StatusServiceUnavailable)
	if code := r.errorCode(); code != "frozen" {
		t.Fatalf("code %q, want frozen", code)
	}
	var access int
	for _, rec := range logs.all() {
		if rec.Level >= slog.LevelError {
			t.Errorf("a freeze refusal logged at %v: %q", rec.Level, rec.Message)
		}
		if rec.Message == "request" {
			access++
			if rec.Level != slog.LevelInfo {
				t.Errorf("access log of the refusal at %v, want INFO", rec.Level)
			}
		}
	}
	if access != 1 {
		t.Errorf("%d access log records, want 1", access)
	}
}

func TestRefusalCodes(t *testing.T) {
	for _, code := range []string{"frozen", "denied_by_policy", "previously_denied", "retry_limit", "audience_not_allowed"} {
		if !(&problem.Error{Code: code}).Refusal() {
			t.Errorf("%s is not a refusal", code)
		}
	}
	for _, code := range []string{"internal", "unavailable", "integrity"} {
		if (&problem.Error{Code: code}).Refusal() {
			t.Errorf("%s is a refusal; it is a fault and must be logged as an ERROR", code)
		}
	}
}

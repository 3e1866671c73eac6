package queue_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// TestExportCallsFormat: the one format of call exports, over rows a store
// would stream: JSONL with null for what the store holds as NULL, CSV with
// a header and every cell kept from being read as a formula, and a stream
// stopped by the writer's error or the context.
func TestExportCallsFormat(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	rows := []*queue.ExportRow{
		{Seq: 2, ID: "c2", Status: "denied", Actor: "agent:a", Audience: "h", Tool: "payments.refund", Target: "=cmd",
			Args: `{"amount_minor":1}`, Digest: "d2", ApprovalsRequired: 1, CreatedAt: at, DecideBy: at.Add(time.Minute),
			DecidedAt: at.Add(time.Second), Denial: &queue.Denial{By: "alice", Channel: "web", Reason: "no"}},
		{Seq: 1, ID: "c1", Status: "redeemed", Actor: "agent:a", Audience: "h", Tool: "payments.refund", Target: "invoice:1",
			Args: `{"amount_minor":2}`, Digest: "d1", ApprovalsRequired: 1, CreatedAt: at, DecideBy: at,
			Approvals: []queue.Approval{{Operator: "bob", Channel: "cli", At: at, Passkey: &queue.ApprovalPasskey{Name: "yubi"}}},
			GrantJTI:  "j", GrantKID: "k", GrantExpiresAt: at, RedeemedAt: at, RedeemedBy: "tok_1",
			Outcome: &queue.Outcome{Status: "succeeded", Detail: "ok", At: at}},
	}
	stream := func(ctx context.Context, f queue.HistoryFilter, fn func(*queue.ExportRow) error) error {
		for _, r := range rows {
			if err := fn(r); err != nil {
				return err
			}
		}
		return nil
	}
	ctx := context.Background()
	var jb bytes.Buffer
	if err := queue.ExportCalls(ctx, stream, queue.HistoryFilter{}, &jb, "jsonl"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(jb.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), jb.String())
	}
	for _, want := range []string{`"denial":{"by":"alice","channel":"web","reason":"no"}`, `"grant_jti":null`, `"outcome":null`,
		`"decided_at":"2030-01-02T03:04:06.600Z"`, `"target":"=cmd"`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("line 1 lacks %s:\n%s", want, lines[0])
		}
	}
	for _, want := range []string{`"approvals":[{"at":"2030-01-02T03:04:05.600Z","channel":"cli","operator":"bob","passkey":"yubi"}]`,
		`"redeemed_by_token":"tok_1"`, `"denial":null`, `"decided_at":null`, `"args":{"amount_minor":2}`} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("line 2 lacks %s:\n%s", want, lines[1])
		}
	}
	var cb bytes.Buffer
	if err := queue.ExportCalls(ctx, stream, queue.HistoryFilter{}, &cb, "csv"); err != nil {
		t.Fatal(err)
	}
	records, err := csv.NewReader(&cb).ReadAll()
	if err != nil || len(records) != 3 || records[0][0] != "seq" {
		t.Fatalf("CSV = %v %v", records, err)
	}
	if records[1][7] != "'=cmd" || records[2][10] != "bob via cli at 2030-01-02T03:04:05.600Z" || records[1][11] != "2030-01-02T03:04:06.600Z" {
		t.Errorf("CSV rows = %q", records[1:])
	}
	if err := queue.ExportCalls(ctx, stream, queue.HistoryFilter{}, &cb, "pdf"); !errors.Is(err, audit.ErrFormat) {
		t.Errorf("pdf = %v, want audit.ErrFormat", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := queue.ExportCalls(cancelled, stream, queue.HistoryFilter{}, &bytes.Buffer{}, "jsonl"); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled export = %v, want context.Canceled", err)
	}
}

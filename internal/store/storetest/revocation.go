package storetest

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

var _ = add("calls/grant revocation read back", func(t *testing.T, s Stores) {
	c := newCall("agent:a", "pay.refund", t0)
	insert(t, s, c)
	c.Status, c.DecidedAt, c.Grant, c.GrantJTI, c.GrantKID, c.GrantExpiresAt = queue.StatusApproved, t0, "g.g.g", randomID("jti_"), "k1", t0.Add(time.Minute)
	update(t, s, func(tx queue.Tx) error { return tx.UpdateCall(c) })
	got, err := s.Queue.Call(context.Background(), c.ID)
	if err != nil || got.Revoked != nil {
		t.Fatalf("Call before revoking: %+v, %v", got, err)
	}
	r := queue.Revocation{CallID: c.ID, JTI: c.GrantJTI, By: "olivia", Channel: "web", Reason: "wrong\u00a0customer", At: t0.Add(time.Second)}
	update(t, s, func(tx queue.Tx) error { return tx.InsertRevocation(r) })
	got, err = s.Queue.Call(context.Background(), c.ID)
	if err != nil || got.Revoked == nil || *got.Revoked != r || got.Shown() != queue.StatusRevoked {
		t.Fatalf("Call after revoking: %+v, %v; want revocation %+v", got.Revoked, err, r)
	}
	update(t, s, func(tx queue.Tx) error {
		in, err := tx.Call(c.ID)
		if err == nil && (in.Revoked == nil || *in.Revoked != r) {
			t.Errorf("tx.Call revocation = %+v, want %+v", in.Revoked, r)
		}
		return err
	})
})

// Exports say what became of each approved call's grant at the export's
// time: live, expired (ran out unredeemed), revoked or redeemed; nothing
// for a call never approved. JSONL and CSV alike.
var _ = add("history/exports carry grant_state", func(t *testing.T, s Stores) {
	approved := func(c *queue.Call, expires time.Time) {
		c.Status, c.DecidedAt, c.Grant, c.GrantJTI, c.GrantKID, c.GrantExpiresAt = queue.StatusApproved, t0, "g.g.g", randomID("jti_"), "k1", expires
		update(t, s, func(tx queue.Tx) error { return tx.UpdateCall(c) })
	}
	pending := newCall("agent:a", "pay.refund", t0)
	live := newCall("agent:a", "pay.refund", t0.Add(time.Second))
	expired := newCall("agent:a", "pay.refund", t0.Add(2*time.Second))
	revoked := newCall("agent:a", "pay.refund", t0.Add(3*time.Second))
	redeemed := newCall("agent:a", "pay.refund", t0.Add(4*time.Second))
	for _, c := range []*queue.Call{pending, live, expired, revoked, redeemed} {
		insert(t, s, c)
	}
	at := t0.Add(10 * time.Minute)
	approved(live, at.Add(time.Minute))
	approved(expired, at.Add(-time.Minute))
	approved(revoked, at.Add(time.Minute))
	update(t, s, func(tx queue.Tx) error {
		return tx.InsertRevocation(queue.Revocation{CallID: revoked.ID, JTI: revoked.GrantJTI, By: "olivia", Channel: "web", Reason: "wrong customer", At: t0.Add(5 * time.Second)})
	})
	approved(redeemed, at.Add(-time.Minute))
	redeemed.Status, redeemed.RedeemedAt = queue.StatusRedeemed, t0.Add(6*time.Second)
	update(t, s, func(tx queue.Tx) error { return tx.UpdateCall(redeemed) })
	want := map[string]string{pending.ID: "", live.ID: "live", expired.ID: "expired", revoked.ID: "revoked", redeemed.ID: "redeemed"}

	var buf bytes.Buffer
	if err := s.History.ExportCalls(context.Background(), queue.HistoryFilter{At: at}, &buf, "jsonl"); err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var row struct {
			ID         string  `json:"id"`
			GrantState *string `json:"grant_state"`
		}
		if err := json.Unmarshal(line, &row); err != nil {
			t.Fatal(err)
		}
		got := ""
		if row.GrantState != nil {
			got = *row.GrantState
		}
		if got != want[row.ID] || (want[row.ID] == "") != (row.GrantState == nil) {
			t.Errorf("jsonl: %s grant_state %q (null: %v), want %q (null when never approved)", row.ID, got, row.GrantState == nil, want[row.ID])
		}
	}
	buf.Reset()
	if err := s.History.ExportCalls(context.Background(), queue.HistoryFilter{At: at}, &buf, "csv"); err != nil {
		t.Fatal(err)
	}
	records, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := slices.Index(records[0], "grant_state")
	if col < 0 {
		t.Fatalf("csv header %v has no grant_state", records[0])
	}
	for _, r := range records[1:] {
		if got := r[col]; got != want[r[1]] {
			t.Errorf("csv: %s grant_state %q, want %q", r[1], got, want[r[1]])
		}
	}
})

package storetest

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// historyFixture stores seven calls, one a second, with two actors, two
// tools and every kind of decision; it returns them oldest first.
func historyFixture(t *testing.T, s Stores) []*queue.Call {
	t.Helper()
	var calls []*queue.Call
	for i, x := range []struct{ actor, tool string }{
		{"agent:a", "pay.refund"}, {"agent:b", "pay.refund"}, {"agent:a", "files.delete"}, {"agent:b", "files.delete"},
		{"agent:a", "pay.refund"}, {"agent:a", "pay.refund"}, {"agent:b", "pay.refund"},
	} {
		c := newCall(x.actor, x.tool, t0.Add(time.Duration(i)*time.Second))
		insert(t, s, c)
		calls = append(calls, c)
	}
	at := t0.Add(time.Minute)
	update(t, s, func(tx queue.Tx) error {
		// calls[1] approved by alice on the web, calls[2] denied by bob from
		// the shell, calls[3] approved by bob on the web.
		for _, d := range []struct {
			c       *queue.Call
			op, ch  string
			approve bool
		}{{calls[1], "alice", audit.ChannelWeb, true}, {calls[2], "bob", audit.ChannelCLI, false}, {calls[3], "bob", audit.ChannelWeb, true}} {
			d.c.DecidedAt = at
			if d.approve {
				if err := tx.AddApproval(d.c.ID, queue.Approval{Operator: d.op, Channel: d.ch, At: at}); err != nil {
					return err
				}
				d.c.Approvals = []queue.Approval{{Operator: d.op, Channel: d.ch, At: at}}
				d.c.Status = queue.StatusApproved
			} else {
				d.c.Status = queue.StatusDenied
				d.c.Denial = &queue.Denial{By: d.op, Channel: d.ch, Reason: "no", At: at}
			}
			if err := tx.UpdateCall(d.c); err != nil {
				return err
			}
		}
		return nil
	})
	return calls
}

func ids(calls []*queue.Call) []string {
	out := []string{}
	for _, c := range calls {
		out = append(out, c.ID)
	}
	return out
}

// newestFirst lists the calls at the given indexes of the fixture, newest
// first.
func newestFirst(calls []*queue.Call, idx ...int) []string {
	out := []string{}
	for i := len(idx) - 1; i >= 0; i-- {
		out = append(out, calls[idx[i]].ID)
	}
	return out
}

var _ = add("history/pages follow the cursor, newest first", func(t *testing.T, s Stores) {
	ctx := context.Background()
	calls := historyFixture(t, s)
	var got []string
	after := int64(0)
	for pages := 0; ; pages++ {
		if pages > len(calls) {
			t.Fatal("the cursor never ends")
		}
		page, next, err := s.History.History(ctx, queue.HistoryFilter{Limit: 3, After: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 3 {
			t.Fatalf("page of %d calls, want at most 3", len(page))
		}
		got = append(got, ids(page)...)
		if next == 0 {
			break
		}
		after = next
	}
	if want := newestFirst(calls, 0, 1, 2, 3, 4, 5, 6); !reflect.DeepEqual(got, want) {
		t.Errorf("paged history = %v, want %v", got, want)
	}
	// A page carries the calls complete, approvals included.
	page, _, err := s.History.History(ctx, queue.HistoryFilter{Actor: "agent:b", Tool: "pay.refund", Status: "approved"})
	if err != nil || len(page) != 1 || !reflect.DeepEqual(page[0], calls[1]) {
		t.Errorf("History of the approved call = %+v, %v; want %+v", page, err, calls[1])
	}
})

var _ = add("history/filters", func(t *testing.T, s Stores) {
	ctx := context.Background()
	calls := historyFixture(t, s)
	d := calls[4].Digest
	for _, tc := range []struct {
		name string
		f    queue.HistoryFilter
		want []string
	}{
		{"actor", queue.HistoryFilter{Actor: "agent:b"}, newestFirst(calls, 1, 3, 6)},
		{"tool", queue.HistoryFilter{Tool: "files.delete"}, newestFirst(calls, 2, 3)},
		{"status", queue.HistoryFilter{Status: "pending"}, newestFirst(calls, 0, 4, 5, 6)},
		{"actor and tool", queue.HistoryFilter{Actor: "agent:a", Tool: "pay.refund"}, newestFirst(calls, 0, 4, 5)},
		{"operator", queue.HistoryFilter{Operator: "bob"}, newestFirst(calls, 2, 3)},
		{"channel", queue.HistoryFilter{Channel: audit.ChannelWeb}, newestFirst(calls, 1, 3)},
		{"operator and channel", queue.HistoryFilter{Operator: "bob", Channel: audit.ChannelCLI}, newestFirst(calls, 2)},
		{"since and until", queue.HistoryFilter{Since: t0.Add(2 * time.Second), Until: t0.Add(5 * time.Second)}, newestFirst(calls, 2, 3, 4)},
		{"digest prefix in groups", queue.HistoryFilter{DigestPrefix: d[:4] + " " + d[4:12]}, newestFirst(calls, 4)},
		{"nothing matches", queue.HistoryFilter{Actor: "agent:nobody"}, []string{}},
	} {
		page, next, err := s.History.History(ctx, tc.f)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := ids(page); !reflect.DeepEqual(got, tc.want) || next != 0 {
			t.Errorf("%s: History = %v (next %d), want %v", tc.name, got, next, tc.want)
		}
	}
	for _, f := range []queue.HistoryFilter{{Status: "bogus"}, {DigestPrefix: "xyz"}, {After: 1 << 40}} {
		var fe *queue.FilterError
		if _, _, err := s.History.History(ctx, f); !errors.As(err, &fe) || !errors.Is(err, queue.ErrFilter) {
			t.Errorf("History(%+v) = %v, want a *queue.FilterError", f, err)
		}
	}
})

var _ = add("history/exports stream every match", func(t *testing.T, s Stores) {
	ctx := context.Background()
	calls := historyFixture(t, s)
	var buf bytes.Buffer
	if err := s.History.ExportCalls(ctx, queue.HistoryFilter{Actor: "agent:a", Limit: 1}, &buf, "jsonl"); err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
	if len(lines) != 4 {
		t.Fatalf("jsonl export has %d lines, want the 4 calls of agent:a (Limit is ignored)", len(lines))
	}
	for i, want := range newestFirst(calls, 0, 2, 4, 5) {
		if !bytes.Contains(lines[i], []byte(`"`+want+`"`)) {
			t.Errorf("line %d = %s, want call %s", i, lines[i], want)
		}
	}
	buf.Reset()
	if err := s.History.ExportCalls(ctx, queue.HistoryFilter{}, &buf, "csv"); err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(buf.Bytes(), []byte("\n")); n != len(calls)+1 {
		t.Errorf("csv export has %d lines, want a header and %d rows", n, len(calls))
	}
	if err := s.History.ExportCalls(ctx, queue.HistoryFilter{}, &buf, "pdf"); !errors.Is(err, audit.ErrFormat) {
		t.Errorf("ExportCalls as pdf = %v, want audit.ErrFormat", err)
	}
})

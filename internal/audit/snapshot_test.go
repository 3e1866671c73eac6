package audit

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/canonical"
)

// sliceSource is a Snapshot over entries held in memory, as a store
// would read them.
type sliceSource struct {
	es   []*Entry
	cps  []Checkpoint
	all  bool  // Entries hands over every entry whatever the range (es not indexed by seq)
	fail error // Entries fails after the first entry
}

func (s sliceSource) Range(_ context.Context, since, until time.Time) (int64, int64, error) {
	var from, to int64
	for _, e := range s.es {
		if from == 0 && (since.IsZero() || e.Time >= FormatTime(since)) {
			from = e.Seq
		}
		if until.IsZero() || e.Time < FormatTime(until) {
			to = e.Seq
		}
	}
	if from == 0 || to < from {
		return 0, 0, nil
	}
	return from, to, nil
}

func (s sliceSource) Hash(_ context.Context, seq int64) (string, error) { return s.es[seq-1].Hash, nil }

func (s sliceSource) Checkpoints(_ context.Context, from, to int64) ([]Checkpoint, error) {
	var out []Checkpoint
	for _, c := range s.cps {
		if c.Seq >= from && c.Seq <= to {
			out = append(out, c)
		}
	}
	return out, nil
}

func (s sliceSource) Entries(_ context.Context, from, to int64, fn func(*Entry, []byte) error) error {
	es := s.es
	if !s.all {
		es = es[max(from, 1)-1 : min(to, int64(len(es)))]
	}
	for i, e := range es {
		if s.fail != nil && i == 1 {
			return s.fail
		}
		details, err := canonical.Encode(detailsValue(e.Details))
		if err != nil {
			return err
		}
		cp := *e // the reader may set Details: keep es as built
		if err := fn(&cp, details); err != nil {
			return err
		}
	}
	return nil
}

// TestWriteExport: the one writer of audit exports, over entries without a
// store: a JSONL export (whole or a time range) verifies offline with its
// checkpoints, CSV has a header and a guarded row per entry, an empty range
// is a header alone, and a bad format or a cancelled context stops it.
func TestWriteExport(t *testing.T) {
	ctx := context.Background()
	es := chain(t, 40)
	es[3].Principal = "=HYPERLINK(1)"
	if err := es[3].Seal(es[2].Seq, es[2].Hash); err != nil {
		t.Fatal(err)
	}
	for i := 4; i < len(es); i++ {
		if err := es[i].Seal(es[i-1].Seq, es[i-1].Hash); err != nil {
			t.Fatal(err)
		}
	}
	s := testSigner(t)
	c10, _ := s.Sign(10, es[9].Hash, time.Now())
	c30, _ := s.Sign(30, es[29].Hash, time.Now())
	src := sliceSource{es: es, cps: []Checkpoint{c10, c30}}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

	var buf bytes.Buffer
	res, err := WriteExport(ctx, &buf, src, ExportOptions{Format: "jsonl", Signer: s}, "db1", now)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ExportResult{FromSeq: 1, ToSeq: 40, Count: 40, Head: es[39].Hash, Checkpoints: 2}); res != want {
		t.Errorf("result = %+v, want %+v", res, want)
	}
	rep, err := VerifyExport(bytes.NewReader(buf.Bytes()), VerifyOptions{})
	if err != nil || rep.Count != 40 || rep.Head != es[39].Hash || rep.Checkpoints != 2 || rep.CheckpointSeq != 30 {
		t.Fatalf("VerifyExport = %+v, %v", rep, err)
	}

	// A time range: entries 21..35 (one a second from the first).
	t0, _ := time.Parse(TimeFormat, es[0].Time)
	buf.Reset()
	res, err = WriteExport(ctx, &buf, src, ExportOptions{Format: "jsonl", Since: t0.Add(20 * time.Second), Until: t0.Add(35 * time.Second)}, "db1", now)
	if err != nil || res.FromSeq != 21 || res.ToSeq != 35 || res.Count != 15 || res.Checkpoints != 1 {
		t.Fatalf("range export = %+v, %v", res, err)
	}
	rep, err = VerifyExport(bytes.NewReader(buf.Bytes()), VerifyOptions{})
	if err != nil || rep.FromSeq != 21 || rep.PrevHash != es[19].Hash || rep.Head != es[34].Hash {
		t.Errorf("range VerifyExport = %+v, %v", rep, err)
	}

	buf.Reset()
	if res, err = WriteExport(ctx, &buf, src, ExportOptions{Format: "csv"}, "db1", now); err != nil || res.Count != 40 {
		t.Fatalf("CSV export = %+v, %v", res, err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil || len(rows) != 41 {
		t.Fatalf("CSV = %d rows, %v; want a header and 40", len(rows), err)
	}
	if got := rows[0]; len(got) != len(csvHeader) || got[0] != "seq" || got[8] != "hash" {
		t.Errorf("CSV header = %q", got)
	}
	if got := rows[4][4]; got != "'=HYPERLINK(1)" {
		t.Errorf("principal cell = %q, want it kept from being read as a formula", got)
	}

	// Nothing in the range: a header alone, counting nothing.
	buf.Reset()
	res, err = WriteExport(ctx, &buf, src, ExportOptions{Format: "jsonl", Since: now}, "db1", now)
	if err != nil || res != (ExportResult{}) {
		t.Fatalf("empty export = %+v, %v", res, err)
	}
	if rep, err := VerifyExport(bytes.NewReader(buf.Bytes()), VerifyOptions{}); err != nil || rep.Count != 0 {
		t.Errorf("empty VerifyExport = %+v, %v", rep, err)
	}

	if _, err := WriteExport(ctx, &buf, src, ExportOptions{Format: "pdf"}, "db1", now); !errors.Is(err, ErrFormat) {
		t.Errorf("format pdf: %v, want ErrFormat", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := WriteExport(cancelled, &buf, src, ExportOptions{Format: "csv"}, "db1", now); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v, want context.Canceled", err)
	}
}

// TestVerifySnapshot: the one verification of a stored chain, over entries
// without a store: a good chain with its checkpoints verifies; an altered
// entry, or a row outside 1..head, breaks it where it stands; a failure to
// read is an error, not a verdict.
func TestVerifySnapshot(t *testing.T) {
	ctx := context.Background()
	es := chain(t, 40)
	s := testSigner(t)
	c10, _ := s.Sign(10, es[9].Hash, time.Now())
	res, err := VerifySnapshot(ctx, sliceSource{es: es, cps: []Checkpoint{c10}}, VerifyOptions{})
	if err != nil || !res.OK || res.Count != 40 || res.Head != es[39].Hash || res.Checkpoints != 1 || res.CheckpointSeq != 10 {
		t.Fatalf("VerifySnapshot = %+v, %v", res, err)
	}

	altered := append([]*Entry(nil), es...)
	e := *es[24]
	e.Details = map[string]any{"n": int64(999)}
	altered[24] = &e
	res, err = VerifySnapshot(ctx, sliceSource{es: altered}, VerifyOptions{})
	if err != nil || res.OK || breakSeq(t, res.Err) != 25 || res.Count != 24 {
		t.Errorf("an altered entry 25: %+v, %v", res, err)
	}

	// A row before entry 1 (an edited seq) is read and breaks the chain.
	stray := *es[0]
	stray.Seq = 0
	res, err = VerifySnapshot(ctx, sliceSource{es: append([]*Entry{&stray}, es...), all: true}, VerifyOptions{})
	if err != nil || res.OK {
		t.Errorf("a row with seq 0: %+v, %v; want a break", res, err)
	}

	if _, err := VerifySnapshot(ctx, sliceSource{es: es, fail: errors.New("disk gone")}, VerifyOptions{}); err == nil || err.Error() != "disk gone" {
		t.Errorf("a read failure = %v, want it returned", err)
	}
}

package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/countersign/countersign/internal/canonical"
)

// export writes a JSONL export of es[from-1:to] with checkpoints cps.
func export(tb testing.TB, es []*Entry, from, to int64, cps ...Checkpoint) []byte {
	tb.Helper()
	h := &ExportHeader{Format: ExportFormat, Database: "db1", FromSeq: from, ToSeq: to, PrevHash: GenesisHash,
		Head: es[to-1].Hash, ExportedAt: FormatTime(time.Now())}
	if from > 1 {
		h.PrevHash = es[from-2].Hash
	}
	h.Count = to - from + 1
	if err := testSigner(tb).SignHeader(h); err != nil {
		tb.Fatal(err)
	}
	buf, err := AppendHeaderLine(nil, h)
	if err != nil {
		tb.Fatal(err)
	}
	for _, c := range cps {
		if buf, err = AppendCheckpointLine(buf, c); err != nil {
			tb.Fatal(err)
		}
	}
	for _, e := range es[from-1 : to] {
		if buf, err = AppendEntryLine(buf, e, nil); err != nil {
			tb.Fatal(err)
		}
	}
	return buf
}

func TestEntryLineIsCanonical(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		e := &Entry{
			Time: FormatTime(time.Unix(rapid.Int64Range(0, 1<<33).Draw(rt, "t"), 0)), Kind: rapid.String().Draw(rt, "kind"),
			CallID: rapid.String().Draw(rt, "call"), Principal: rapid.String().Draw(rt, "who"), Channel: rapid.String().Draw(rt, "ch"),
			Details: map[string]any{rapid.String().Draw(rt, "k"): rapid.String().Draw(rt, "v"), "n": rapid.Int64Range(-1<<53+1, 1<<53-1).Draw(rt, "n")},
		}
		if err := e.Seal(rapid.Int64Range(0, 1<<40).Draw(rt, "seq"), ""); err != nil {
			rt.Fatal(err)
		}
		line, err := AppendEntryLine(nil, e, nil)
		if err != nil {
			rt.Fatal(err)
		}
		want, err := canonical.Encode(map[string]any{"seq": e.Seq, "time": e.Time, "kind": e.Kind, "call_id": e.CallID,
			"principal": e.Principal, "channel": e.Channel, "details": e.Details, "prev_hash": e.PrevHash, "hash": e.Hash})
		if err != nil {
			rt.Fatal(err)
		}
		if string(line) != string(want)+"\n" {
			rt.Fatalf("line  %s\nwant  %s", line, want)
		}
		rec, err := ParseLine(line[:len(line)-1])
		if err != nil || rec.Entry == nil {
			rt.Fatalf("ParseLine: %v", err)
		}
		if h, _ := rec.Entry.ComputeHash(); h != e.Hash {
			rt.Fatalf("hash after parsing the line = %s, want %s", h, e.Hash)
		}
		details, _ := canonical.Encode(e.Details)
		if raw, ok := rec.Entry.Details.(RawDetails); !ok || string(raw) != string(details) {
			rt.Fatalf("details from the line = %s, want %s", rec.Entry.Details, details)
		}
	})
}

func TestVerifyExport(t *testing.T) {
	es := chain(t, 40)
	s := testSigner(t)
	c10, _ := s.Sign(10, es[9].Hash, time.Now())
	c30, _ := s.Sign(30, es[29].Hash, time.Now())

	rep, err := VerifyExport(bytes.NewReader(export(t, es, 1, 40, c10, c30)), VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Count != 40 || rep.Head != es[39].Hash || rep.FromSeq != 1 || rep.Checkpoints != 2 || rep.CheckpointSeq != 30 {
		t.Errorf("report = %+v", rep)
	}

	// A range export verifies from its first entry's prev_hash, which is
	// the head of the entry before it.
	rep, err = VerifyExport(bytes.NewReader(export(t, es, 21, 35, c30)), VerifyOptions{Checkpoints: []Checkpoint{c10}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Count != 15 || rep.FromSeq != 21 || rep.PrevHash != es[19].Hash || rep.Head != es[34].Hash {
		t.Errorf("range report = %+v", rep)
	}
	if len(rep.Uncovered) != 1 || rep.Uncovered[0] != 10 {
		t.Errorf("Uncovered = %v, want [10]", rep.Uncovered)
	}

	// An outside checkpoint beyond the export's end exposes a short copy.
	c40, _ := s.Sign(40, es[39].Hash, time.Now())
	_, err = VerifyExport(bytes.NewReader(export(t, es, 1, 35)), VerifyOptions{Checkpoints: []Checkpoint{c40}})
	if got := breakSeq(t, err); got != 36 {
		t.Errorf("short export with a newer outside checkpoint: bad entry = %d, want 36", got)
	}
}

// TestVerifyExportDetectsEveryByteFlip flips each byte of every entry and
// checkpoint line in turn.
func TestVerifyExportDetectsEveryByteFlip(t *testing.T) {
	es := chain(t, 4)
	c, _ := testSigner(t).Sign(2, es[1].Hash, time.Now())
	data := export(t, es, 1, 4, c)
	headerEnd := bytes.IndexByte(data, '\n') + 1
	for i := headerEnd; i < len(data); i++ {
		for _, x := range []byte{0x01, 0x20, 0x80} {
			bad := bytes.Clone(data)
			bad[i] ^= x
			if _, err := VerifyExport(bytes.NewReader(bad), VerifyOptions{}); err == nil {
				t.Fatalf("byte %d (%q) ^ %#x went unnoticed", i, data[i], x)
			}
		}
	}
}

func TestVerifyExportNamesBadEntry(t *testing.T) {
	es := chain(t, 12)
	lines := func(data []byte) []string { return strings.SplitAfter(string(data), "\n") }
	join := func(ls []string) []byte { return []byte(strings.Join(ls, "")) }
	tests := []struct {
		name   string
		change func(ls []string) []string // ls[0] is the header; ls[k] is entry k
		want   int64
	}{
		{"edited details", func(ls []string) []string {
			ls[5] = strings.Replace(ls[5], `"entry 4"`, `"entry 9"`, 1)
			return ls
		}, 5},
		{"white space", func(ls []string) []string { ls[7] = strings.Replace(ls[7], `,"kind"`, `, "kind"`, 1); return ls }, 7},
		{"not JSON", func(ls []string) []string { ls[3] = "{oops\n"; return ls }, 3},
		{"deleted line", func(ls []string) []string { return append(ls[:6:6], ls[7:]...) }, 6},
		{"swapped lines", func(ls []string) []string { ls[8], ls[9] = ls[9], ls[8]; return ls }, 8},
		{"cut tail", func(ls []string) []string { return ls[:10] }, 10},
		{"cut mid-line", func(ls []string) []string { ls[12] = ls[12][:40]; return ls[:13] }, 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := VerifyExport(bytes.NewReader(join(tt.change(lines(export(t, es, 1, 12))))), VerifyOptions{})
			if got := breakSeq(t, err); got != tt.want {
				t.Errorf("bad entry = %d, want %d (%v)", got, tt.want, err)
			}
		})
	}
}

func TestReadCheckpoints(t *testing.T) {
	s := testSigner(t)
	c1, _ := s.Sign(1, strings.Repeat("a1", 32), time.Now())
	c2, _ := s.Sign(2, strings.Repeat("b2", 32), time.Now())
	api, _ := json.Marshal(c1)
	line, _ := AppendCheckpointLine(nil, c2)
	got, err := ReadCheckpoints(strings.NewReader(string(api) + "\n" + string(line)))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != c1 || got[1] != c2 {
		t.Errorf("ReadCheckpoints = %+v, want [%+v %+v]", got, c1, c2)
	}
	for _, bad := range []string{"", `{"seq":1,"extra":2}`, `[1,2]`, `{"checkpoint":{"seq":"x"}}`} {
		if _, err := ReadCheckpoints(strings.NewReader(bad)); err == nil {
			t.Errorf("ReadCheckpoints(%q) succeeded", bad)
		}
	}
}

func TestExportReaderLimits(t *testing.T) {
	big := append(bytes.Repeat([]byte("x"), MaxLineBytes+10), '\n')
	_, err := NewExportReader(bytes.NewReader(big)).Next()
	if err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("over-long line: error = %v", err)
	}
	_, err = NewExportReader(strings.NewReader("")).Next()
	if !errors.Is(err, io.EOF) {
		t.Errorf("empty input: error = %v, want io.EOF", err)
	}
}

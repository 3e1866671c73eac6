package audit

import (
	"strings"
	"testing"
	"time"
)

// prunedChain is a chain of 10 entries with checkpoints at 5 and 10, whose
// entries 1 to 5 were removed and a pruned entry (details) appended.
func prunedChain(t *testing.T, details map[string]any) ([]*Entry, []Checkpoint) {
	t.Helper()
	s := testSigner(t)
	all := chain(t, 10)
	var cps []Checkpoint
	for _, seq := range []int64{5, 10} {
		c, err := s.Sign(seq, all[seq-1].Hash, time.Date(2025, 3, 1, 13, 0, 0, 0, time.UTC))
		if err != nil {
			t.Fatal(err)
		}
		cps = append(cps, c)
	}
	p := &Entry{Time: all[9].Time, Kind: KindPruned, Principal: "admin", Channel: ChannelCLI, Details: details}
	if err := p.Seal(10, all[9].Hash); err != nil {
		t.Fatal(err)
	}
	c, err := s.Sign(11, p.Hash, time.Date(2025, 3, 1, 13, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	return append(all[5:], p), append(cps, c)
}

func verifyPruned(entries []*Entry, cps []Checkpoint, allow bool) error {
	v := NewVerifier()
	if allow {
		v.AllowPruned()
	}
	for _, c := range cps {
		if err := v.AddCheckpoint(c); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if err := v.Add(e); err != nil {
			return err
		}
	}
	_, _, err := v.Finish()
	return err
}

// TestVerifierAcceptsAGapOnlyBehindAPrunedEntry: a stored chain may start
// after entry 1 only when a signed checkpoint has the hash of the last
// entry removed and a pruned entry names exactly that entry and hash.
func TestVerifierAcceptsAGapOnlyBehindAPrunedEntry(t *testing.T) {
	all := chain(t, 10)
	good := map[string]any{"from_seq": int64(1), "to_seq": int64(5), "count": int64(5), "last_hash": all[4].Hash}
	entries, cps := prunedChain(t, good)
	if err := verifyPruned(entries, cps, true); err != nil {
		t.Fatalf("a pruned chain behind its pruned entry and checkpoint: %v", err)
	}
	cases := []struct {
		name    string
		details map[string]any
		cps     func([]Checkpoint) []Checkpoint
		allow   bool
		want    string
	}{
		{"no pruned entry for the gap", map[string]any{"note": "nothing"}, nil, true, "no pruned entry records their removal"},
		{"a pruned entry naming another hash", map[string]any{"from_seq": int64(1), "to_seq": int64(5), "count": int64(5), "last_hash": all[3].Hash}, nil, true, "no pruned entry"},
		{"a pruned entry naming another range", map[string]any{"from_seq": int64(1), "to_seq": int64(4), "count": int64(4), "last_hash": all[4].Hash}, nil, true, "no pruned entry"},
		{"no checkpoint at the last entry removed", good, func(c []Checkpoint) []Checkpoint { return c[1:] }, true, "no signed checkpoint at entry 5"},
		{"a verifier that allows no gap", good, nil, false, "expected entry 1, found 6"},
		{"a pruned entry no checkpoint covers", good, func(c []Checkpoint) []Checkpoint { return c[:2] }, true, "covered by no signed checkpoint"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			entries, cps := prunedChain(t, tc.details)
			if tc.cps != nil {
				cps = tc.cps(cps)
			}
			err := verifyPruned(entries, cps, tc.allow)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("verify = %v, want %q", err, tc.want)
			}
			want := int64(1)
			if strings.Contains(tc.want, "covered by no") {
				want = 11
			}
			if seq := breakSeq(t, err); seq != want {
				t.Errorf("broken at entry %d, want %d", seq, want)
			}
		})
	}
	// Entries removed after the gap are still missing entries.
	entries, cps = prunedChain(t, good)
	if err := verifyPruned(append(entries[:1:1], entries[2:]...), cps, true); err == nil || !strings.Contains(err.Error(), "expected entry 7, found 8") {
		t.Errorf("an entry removed behind the gap: %v", err)
	}
}

// Package audit defines Countersign's append-only, hash-chained record of
// every state change, and the checks that prove a copy of it unaltered.
//
// Each entry's hash is SHA-256(prev_hash || JCS(entry without hash)), where
// prev_hash is the previous entry's hash as 32 raw bytes (32 zero bytes before
// the first entry). Changing, removing or reordering any entry changes every
// hash after it.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/canonical"
)

// Kinds of entries.
const (
	KindSubmitted         = "submitted"
	KindRejected          = "rejected"
	KindApproved          = "approved"
	KindDenied            = "denied"
	KindExpired           = "expired"
	KindCancelled         = "cancelled"
	KindRevoked           = "revoked"
	KindGranted           = "granted"
	KindRedeemed          = "redeemed"
	KindRedemptionRefused = "redemption_refused"
	KindOutcome           = "outcome"
	KindRetryBlocked      = "retry_blocked"
	KindRetryCleared      = "retry_cleared"
	KindUserAdded         = "user_added"
	KindUserDisabled      = "user_disabled"
	KindTokenCreated      = "token_created"
	KindTokenRevoked      = "token_revoked"
	KindKeyRotated        = "key_rotated"
	KindPruned            = "pruned"
)

// Channels through which a change arrived.
const (
	ChannelAPI = "api"
	ChannelWeb = "web"
	ChannelCLI = "cli"
)

// GenesisHash is the prev_hash of the first entry.
const GenesisHash = "0000000000000000000000000000000000000000000000000000000000000000"

// TimeFormat is how entry times are written and hashed: UTC, fixed
// nanosecond precision, so the text sorts as time does.
const TimeFormat = "2006-01-02T15:04:05.000000000Z"

// Entry is one audit record. Details holds kind-specific facts (a reason,
// the checks of a redemption, a digest); it must be canonically encodable
// (no floats).
type Entry struct {
	Seq       int64  `json:"seq"`
	Time      string `json:"time"`
	Kind      string `json:"kind"`
	CallID    string `json:"call_id"`
	Principal string `json:"principal"`
	Channel   string `json:"channel"`
	Details   any    `json:"details"`
	PrevHash  string `json:"prev_hash"`
	Hash      string `json:"hash"`
}

// FormatTime formats t as entries store it.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// Body returns the canonical bytes of the entry without its hash: the bytes
// that are hashed.
func (e *Entry) Body() ([]byte, error) {
	details := e.Details
	if details == nil {
		details = canonical.Object{}
	}
	o := map[string]any{
		"seq":       int64(e.Seq),
		"time":      e.Time,
		"kind":      e.Kind,
		"call_id":   e.CallID,
		"principal": e.Principal,
		"channel":   e.Channel,
		"details":   details,
		"prev_hash": e.PrevHash,
	}
	b, err := canonical.Encode(o)
	if err != nil {
		return nil, fmt.Errorf("audit: encode entry %d: %w", e.Seq, err)
	}
	return b, nil
}

// ComputeHash returns the hash the entry should carry given its PrevHash.
func (e *Entry) ComputeHash() (string, error) {
	prev, err := hex.DecodeString(e.PrevHash)
	if err != nil || len(prev) != sha256.Size {
		return "", fmt.Errorf("audit: entry %d: prev_hash is not 64 hex digits", e.Seq)
	}
	body, err := e.Body()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write(prev)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Seal numbers the entry after (prevSeq, prevHash) and sets its PrevHash and
// Hash. An empty prevHash means the entry is the first.
func (e *Entry) Seal(prevSeq int64, prevHash string) error {
	if prevHash == "" {
		prevHash = GenesisHash
	}
	e.Seq = prevSeq + 1
	e.PrevHash = prevHash
	h, err := e.ComputeHash()
	if err != nil {
		return err
	}
	e.Hash = h
	return nil
}

// ErrBroken reports where a chain stops verifying.
var ErrBroken = errors.New("audit: chain broken")

// BreakError names the first bad entry of a chain and what is wrong with it.
type BreakError struct {
	Seq    int64
	Reason string
}

func (b *BreakError) Error() string {
	return fmt.Sprintf("audit: entry %d: %s", b.Seq, b.Reason)
}

func (b *BreakError) Unwrap() error { return ErrBroken }

// Verifier checks entries one at a time, in order, so a chain of any length
// verifies in constant memory.
type Verifier struct {
	count    int64
	lastSeq  int64
	headHash string
	// heads remembers the hash at each sequence number that a checkpoint
	// may ask about.
	wantHeads map[int64]string
	gotHeads  map[int64]string
}

// NewVerifier starts a verifier for a chain that begins at sequence 1.
func NewVerifier() *Verifier {
	return &Verifier{headHash: GenesisHash}
}

// ExpectHead asks the verifier to record the hash at seq, to be compared
// with a checkpoint after Add has seen it.
func (v *Verifier) ExpectHead(seq int64, hash string) {
	if v.wantHeads == nil {
		v.wantHeads = map[int64]string{}
		v.gotHeads = map[int64]string{}
	}
	v.wantHeads[seq] = hash
}

// Add checks the next entry.
func (v *Verifier) Add(e *Entry) error {
	if e.Seq != v.lastSeq+1 {
		return &BreakError{Seq: v.lastSeq + 1, Reason: fmt.Sprintf("expected entry %d, found %d (an entry is missing or out of order)", v.lastSeq+1, e.Seq)}
	}
	if e.PrevHash != v.headHash {
		return &BreakError{Seq: e.Seq, Reason: "prev_hash does not match the previous entry's hash"}
	}
	h, err := e.ComputeHash()
	if err != nil {
		return &BreakError{Seq: e.Seq, Reason: err.Error()}
	}
	if h != e.Hash {
		return &BreakError{Seq: e.Seq, Reason: "hash does not match the entry's contents (the entry was altered)"}
	}
	v.count++
	v.lastSeq = e.Seq
	v.headHash = e.Hash
	if want, ok := v.wantHeads[e.Seq]; ok {
		if want != e.Hash {
			return &BreakError{Seq: e.Seq, Reason: "hash differs from the signed checkpoint at this entry (the log was rewritten)"}
		}
		v.gotHeads[e.Seq] = e.Hash
	}
	return nil
}

// Finish checks that every expected checkpoint head was reached, and returns
// the number of entries and the head hash.
func (v *Verifier) Finish() (count int64, head string, err error) {
	for seq := range v.wantHeads {
		if _, ok := v.gotHeads[seq]; !ok {
			return v.count, v.headHash, &BreakError{Seq: v.lastSeq + 1,
				Reason: fmt.Sprintf("the chain ends at entry %d but a signed checkpoint covers entry %d (entries were removed from the end)", v.lastSeq, seq)}
		}
	}
	return v.count, v.headHash, nil
}

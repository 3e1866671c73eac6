// Package audit defines Countersign's append-only, hash-chained record of
// every state change, and the checks that prove a copy of it unaltered.
//
// Each entry's hash is SHA-256(prev_hash || JCS(entry without hash)), where
// prev_hash is the previous entry's hash as 32 raw bytes (32 zero bytes before
// the first entry). Changing, removing or reordering any entry changes every
// hash after it.
package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/countersign/countersign/internal/canonical"
)

// Kinds of entries.
const (
	KindSubmitted = "submitted"
	KindRejected  = "rejected"
	KindApproved  = "approved"
	KindDenied    = "denied"
	KindExpired   = "expired"
	KindCancelled = "cancelled"
	// KindCountered ends a call an operator answered with an edited call;
	// KindCounterAccepted records its agent accepting that counter.
	KindCountered         = "countered"
	KindCounterAccepted   = "counter_accepted"
	KindRevoked           = "revoked"
	KindGranted           = "granted"
	KindRedeemed          = "redeemed"
	KindRedemptionRefused = "redemption_refused"
	KindOutcome           = "outcome"
	KindLeaseExtended     = "lease_extended"
	KindLeaseExpired      = "lease_expired"
	KindResolved          = "resolved"
	KindRetryBlocked      = "retry_blocked"
	KindRetryCleared      = "retry_cleared"
	KindUserAdded         = "user_added"
	KindUserDisabled      = "user_disabled"
	KindUserUpdated       = "user_updated"
	KindSessionsEnded     = "sessions_ended"
	// KindPasswordSet records a local account's password set by the
	// account itself, or by an admin (then it must be changed at the next
	// login and the account's sessions end).
	KindPasswordSet    = "password_set"
	KindPasskeyAdded   = "passkey_registered"
	KindPasskeyRemoved = "passkey_removed"
	KindTokenCreated   = "token_created"
	KindTokenRevoked   = "token_revoked"
	KindKeyRotated     = "key_rotated"
	KindKeyPrepared    = "key_prepared"
	KindPruned         = "pruned"
	// KindPushSubscribed and KindPushUnsubscribed record a browser's Web
	// Push subscription added (or its keys renewed) and removed.
	KindPushSubscribed   = "push_subscribed"
	KindPushUnsubscribed = "push_unsubscribed"
	// KindDeliveryRetried records an admin making a notification delivery
	// due again.
	KindDeliveryRetried = "delivery_retried"
	// KindRollbackAccepted records an older database accepted on purpose.
	KindRollbackAccepted = "rollback_accepted"
	// A person made or revoked one of their operator tokens.
	KindOperatorTokenCreated = "operator_token_created"
	KindOperatorTokenRevoked = "operator_token_revoked"
	// Plans: an agent's list of calls approved once. Each item has its
	// own entries besides (submitted, approved, granted, ...); these name
	// the plan and its digest.
	KindPlanSubmitted = "plan_submitted"
	KindPlanApproved  = "plan_approved"
	KindPlanDenied    = "plan_denied"
	KindPlanCancelled = "plan_cancelled"
	KindPlanExpired   = "plan_expired"
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

// RawDetails is an entry's details as stored: the canonical JSON text that
// was hashed. An Entry whose Details is RawDetails hashes those bytes as
// they are, without parsing them, so that any change to the stored text
// (even white space that would parse to the same value) changes the hash.
type RawDetails []byte

// MarshalJSON writes the details as the JSON text they are.
func (r RawDetails) MarshalJSON() ([]byte, error) { return r, nil }

// Body returns the canonical bytes of the entry without its hash: the bytes
// that are hashed.
func (e *Entry) Body() ([]byte, error) {
	raw, _ := e.Details.(RawDetails)
	body, _, _, err := e.appendDetailed(nil, raw, e.Details, false)
	return body, err
}

// appendObject writes the entry as one canonical JSON object, members in
// RFC 8785 order: call_id, channel, details, [hash,] kind, prev_hash,
// principal, seq, time. The hashed body and the export line share it, so
// the two can never disagree on the encoding. details is canonical JSON
// text.
func (e *Entry) appendObject(dst []byte, details []byte, withHash bool) ([]byte, error) {
	dst, _, _, err := e.appendDetailed(dst, details, nil, withHash)
	return dst, err
}

// appendDetailed is appendObject with the details as text (raw, when not
// nil) or as a value encoded in place (value; nil is the empty object),
// and returns where in dst the details' text lies.
func (e *Entry) appendDetailed(dst []byte, raw []byte, value any, withHash bool) (out []byte, from, to int, err error) {
	str := func(name, v string) {
		if err == nil {
			dst = append(dst, ',', '"')
			dst = append(dst, name...)
			dst = append(dst, '"', ':')
			dst, err = canonical.AppendString(dst, v)
		}
	}
	dst = append(dst, `{"call_id":`...)
	dst, err = canonical.AppendString(dst, e.CallID)
	str("channel", e.Channel)
	dst = append(dst, `,"details":`...)
	from = len(dst)
	switch {
	case raw != nil:
		dst = append(dst, raw...)
	case value == nil:
		dst = append(dst, '{', '}')
	case err == nil:
		dst, err = canonical.Append(dst, value)
	}
	to = len(dst)
	if withHash {
		str("hash", e.Hash)
	}
	str("kind", e.Kind)
	str("prev_hash", e.PrevHash)
	str("principal", e.Principal)
	if err == nil {
		if e.Seq > canonical.MaxInt || e.Seq < -canonical.MaxInt {
			err = fault("encode entry %d: the sequence number is outside ±%d", e.Seq, int64(canonical.MaxInt))
		}
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendInt(dst, e.Seq, 10)
	}
	str("time", e.Time)
	if err != nil {
		return nil, 0, 0, fault("encode entry %d: %w", e.Seq, err)
	}
	return append(dst, '}'), from, to, nil
}

// Limits on stored details, generous beside the largest proposal.
const (
	MaxDetailsBytes = 8 << 20
	maxDetailsDepth = 2*canonical.MaxArgsDepth + 8
)

// ParseDetails reads an entry's details as stored: canonical JSON text.
// Text that parses but is not in canonical form is refused, so that the
// stored bytes are exactly the bytes that were hashed. Numbers with a
// fraction are read wherever they stand (the arguments of a call of a tool
// mirrored from an MCP upstream carry them), in their canonical form only.
func ParseDetails(text []byte) (any, error) {
	v, err := canonical.ParseWith(text, canonical.Options{MaxBytes: MaxDetailsBytes, MaxDepth: maxDetailsDepth,
		Numbers: canonical.NumbersAnywhere()})
	if err != nil {
		return nil, fault("details do not parse: %w", err)
	}
	enc, err := canonical.Encode(v)
	if err != nil {
		return nil, fault("details: %w", err)
	}
	if !bytes.Equal(enc, text) {
		return nil, fault("details are not in canonical form")
	}
	return v, nil
}

// ComputeHash returns the hash the entry should carry given its PrevHash.
func (e *Entry) ComputeHash() (string, error) {
	raw, _ := e.Details.(RawDetails)
	h, _, err := e.hash(raw, e.Details, false)
	return h, err
}

// hash returns the entry's hash given its PrevHash, and with text the
// text of its details as hashed: raw when not nil, else value encoded
// canonically (nil is the empty object). The previous hash's bytes and the body are
// written into one buffer sized for them, hashed at once.
func (e *Entry) hash(raw []byte, value any, text bool) (hash, details string, err error) {
	size := sha256.Size + len(`{"call_id":"","channel":"","details":,"kind":"","prev_hash":"","principal":"","seq":,"time":""}`) + 20 +
		len(e.CallID) + len(e.Channel) + len(raw) + len(e.Kind) + len(e.PrevHash) + len(e.Principal) + len(e.Time)
	if raw == nil {
		size += 256 // the details, encoded in place
	}
	buf, ok := appendUnhex(make([]byte, 0, size), e.PrevHash)
	if !ok || len(buf) != sha256.Size {
		return "", "", fault("entry %d: prev_hash is not 64 hex digits", e.Seq)
	}
	buf, from, to, err := e.appendDetailed(buf, raw, value, false)
	if err != nil {
		return "", "", err
	}
	sum := sha256.Sum256(buf)
	var digits [2 * sha256.Size]byte
	hex.Encode(digits[:], sum[:])
	if text {
		details = string(buf[from:to])
	}
	return string(digits[:]), details, nil
}

// appendUnhex appends the bytes that the hex digits s spell (lowercase or
// uppercase, as hex.DecodeString reads them); false when s is not hex.
func appendUnhex(dst []byte, s string) ([]byte, bool) {
	if len(s)%2 != 0 {
		return dst, false
	}
	for i := 0; i < len(s); i += 2 {
		hi, ok1 := unhex(s[i])
		lo, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return dst, false
		}
		dst = append(dst, hi<<4|lo)
	}
	return dst, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Seal numbers the entry after (prevSeq, prevHash) and sets its PrevHash and
// Hash. An empty prevHash means the entry is the first.
func (e *Entry) Seal(prevSeq int64, prevHash string) error {
	_, err := e.seal(prevSeq, prevHash, false)
	return err
}

// SealText is Seal, and returns the entry's details as the canonical JSON
// text that was hashed: what a store writes (RawDetails as they are).
func (e *Entry) SealText(prevSeq int64, prevHash string) (details string, err error) {
	return e.seal(prevSeq, prevHash, true)
}

func (e *Entry) seal(prevSeq int64, prevHash string, text bool) (details string, err error) {
	if prevHash == "" {
		prevHash = GenesisHash
	}
	e.Seq = prevSeq + 1
	e.PrevHash = prevHash
	raw, _ := e.Details.(RawDetails)
	h, details, err := e.hash(raw, e.Details, text)
	if err != nil {
		return "", err
	}
	e.Hash = h
	return details, nil
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

// FaultError is a record of the trail that does not check out on its own:
// an entry whose prev_hash or details do not read, a checkpoint or an
// export header whose fields or signature are wrong. Reason says what, for
// the person checking the trail; Error adds the package's prefix.
type FaultError struct {
	Reason string
	Err    error // what the reason wraps, if anything
}

func (f *FaultError) Error() string { return "audit: " + f.Reason }

func (f *FaultError) Unwrap() error { return f.Err }

// fault is the FaultError whose reason is format with args (%w wraps).
func fault(format string, args ...any) *FaultError {
	err := fmt.Errorf(format, args...)
	return &FaultError{Reason: err.Error(), Err: errors.Unwrap(err)}
}

// ReasonOf says what err found wrong, for the person checking the trail:
// the reason of a BreakError or a FaultError, else err's own text.
func ReasonOf(err error) string {
	var (
		b *BreakError
		f *FaultError
	)
	switch {
	case errors.As(err, &b):
		return b.Reason
	case errors.As(err, &f):
		return f.Reason
	}
	return err.Error()
}

// Verifier checks entries one at a time, in order, so a chain of any length
// verifies in constant memory (plus one hash per checkpoint it is given).
type Verifier struct {
	count    int64
	lastSeq  int64
	headHash string
	// ranged verifiers accept the first entry's seq and prev_hash as given:
	// a range export that starts after entry 1 has nothing to link it to.
	ranged   bool
	started  bool
	firstSeq int64
	firstPrv string
	// heads remembers the hash at each sequence number that a checkpoint
	// may ask about.
	wantHeads map[int64]string
	gotHeads  map[int64]string

	trusted map[string]bool // public keys (base64url); empty means any key that signs correctly
	keyIDs  map[string]bool

	check func(*Entry) error // more checks of each entry whose hash verified

	// A stored chain whose oldest entries were pruned starts after entry
	// 1: gapTo and gapHash are the last entry removed and its hash, which
	// a signed checkpoint must vouch for; pruned is set once a pruned
	// entry in the chain names exactly that range.
	allowPruned bool
	gapTo       int64
	gapHash     string
	pruned      bool
	prunedSeq   int64 // the pruned entry that names the gap
}

// Check has fn run on every entry after its hash verified (the passkey
// evidence of approvals is re-verified this way); an error from fn breaks
// the chain at that entry with fn's message.
func (v *Verifier) Check(fn func(*Entry) error) { v.check = fn }

// NewVerifier starts a verifier for a chain that begins at sequence 1.
func NewVerifier() *Verifier {
	return &Verifier{headHash: GenesisHash, firstSeq: 1, firstPrv: GenesisHash}
}

// AllowPruned lets a chain that should begin at entry 1 begin later: the
// entries before its first are accepted as removed only when a signed
// checkpoint (given before the entries) has the hash of the last of them,
// equal to the first entry's prev_hash, and a pruned entry in the chain
// records their removal, naming that last entry and its hash (see
// PrunedDetails), itself covered by a signed checkpoint. Otherwise the gap
// breaks the chain at entry 1 (or at the pruned entry no checkpoint
// covers).
func (v *Verifier) AllowPruned() { v.allowPruned = true }

// PrunedDetails is what a pruned entry records of the entries it removed:
// FromSeq to ToSeq, Count of them, and the hash of the last one.
type PrunedDetails struct {
	FromSeq  int64  `json:"from_seq"`
	ToSeq    int64  `json:"to_seq"`
	Count    int64  `json:"count"`
	LastHash string `json:"last_hash"`
}

// NewRangeVerifier starts a verifier for a run of entries that may begin
// anywhere in the chain: the first entry's seq and prev_hash are taken as
// given (First reports them), and every entry after it must link to it.
// Checkpoints before the first entry cannot be checked and are skipped.
func NewRangeVerifier() *Verifier {
	return &Verifier{ranged: true}
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

// Trust restricts the keys that checkpoints may be signed with: publicKey
// is a raw Ed25519 public key, base64url without padding (a checkpoint's
// public_key, a JWK's x). A checkpoint is trusted by its whole public key,
// never by its 64-bit key id alone, which a database writer could match
// with a key of their own by a 2^64 search. Without a trusted key, a
// checkpoint signed correctly by the public key it carries is accepted, and
// KeyIDs reports which keys those were.
func (v *Verifier) Trust(publicKey string) {
	if v.trusted == nil {
		v.trusted = map[string]bool{}
	}
	v.trusted[publicKey] = true
}

// AddCheckpoint checks a signed checkpoint and asks that the chain's hash at
// its seq equal its head. Give checkpoints before the entries they cover.
// Two valid checkpoints that disagree about one entry prove a rewrite.
func (v *Verifier) AddCheckpoint(c Checkpoint) error {
	if err := c.Verify(); err != nil {
		return &BreakError{Seq: c.Seq, Reason: "checkpoint: " + ReasonOf(err)}
	}
	if len(v.trusted) > 0 && !v.trusted[c.PublicKey] {
		return &BreakError{Seq: c.Seq, Reason: fmt.Sprintf("checkpoint is signed by key %s, which is not a trusted audit key", c.KID)}
	}
	if v.keyIDs == nil {
		v.keyIDs = map[string]bool{}
	}
	v.keyIDs[c.KID] = true
	if want, ok := v.wantHeads[c.Seq]; ok {
		if want != c.Head {
			return &BreakError{Seq: c.Seq, Reason: "two signed checkpoints disagree about this entry (the log was rewritten)"}
		}
		return nil
	}
	if v.started && c.Seq <= v.lastSeq {
		switch {
		case c.Seq < v.firstSeq:
			return nil // before the range: cannot be checked
		case c.Seq == v.lastSeq:
			if c.Head != v.headHash {
				return &BreakError{Seq: c.Seq, Reason: "hash differs from the signed checkpoint at this entry (the log up to here was rewritten)"}
			}
			v.ExpectHead(c.Seq, c.Head)
			v.gotHeads[c.Seq] = c.Head
			return nil
		default:
			return fmt.Errorf("audit: checkpoint at entry %d came after entry %d; checkpoints must precede the entries they cover", c.Seq, v.lastSeq)
		}
	}
	v.ExpectHead(c.Seq, c.Head)
	return nil
}

// Add checks the next entry.
func (v *Verifier) Add(e *Entry) error {
	if !v.started && v.ranged {
		if e.Seq < 1 {
			return &BreakError{Seq: e.Seq, Reason: "sequence numbers start at 1"}
		}
		v.lastSeq, v.headHash = e.Seq-1, e.PrevHash
		v.firstSeq, v.firstPrv = e.Seq, e.PrevHash
		if e.Seq == 1 && e.PrevHash != GenesisHash {
			return &BreakError{Seq: 1, Reason: "the first entry's prev_hash is not the genesis hash"}
		}
	}
	if !v.started && !v.ranged && v.allowPruned && e.Seq > 1 && v.lastSeq == 0 {
		// The oldest entries were pruned: the checkpoint at the last one
		// removed must vouch for where the chain now starts.
		if want, ok := v.wantHeads[e.Seq-1]; !ok || want != e.PrevHash {
			return &BreakError{Seq: 1, Reason: fmt.Sprintf("expected entry 1, found %d (entries 1 to %d are missing, and no signed checkpoint at entry %d vouches for their removal)", e.Seq, e.Seq-1, e.Seq-1)}
		}
		v.gapTo, v.gapHash = e.Seq-1, e.PrevHash
		v.lastSeq, v.headHash = e.Seq-1, e.PrevHash
		v.firstSeq, v.firstPrv = e.Seq, e.PrevHash
		v.gotHeads[e.Seq-1] = e.PrevHash
	}
	v.started = true
	if e.Seq != v.lastSeq+1 {
		return &BreakError{Seq: v.lastSeq + 1, Reason: fmt.Sprintf("expected entry %d, found %d (an entry is missing or out of order)", v.lastSeq+1, e.Seq)}
	}
	if e.PrevHash != v.headHash {
		return &BreakError{Seq: e.Seq, Reason: "prev_hash does not match the previous entry's hash"}
	}
	h, err := e.ComputeHash()
	if err != nil {
		return &BreakError{Seq: e.Seq, Reason: ReasonOf(err)}
	}
	if h != e.Hash {
		return &BreakError{Seq: e.Seq, Reason: "hash does not match the entry's contents (the entry was altered)"}
	}
	if v.check != nil {
		if err := v.check(e); err != nil {
			return &BreakError{Seq: e.Seq, Reason: ReasonOf(err)}
		}
	}
	if v.gapTo > 0 && e.Kind == KindPruned {
		var d PrunedDetails
		if raw, err := detailsText(e.Details); err == nil && json.Unmarshal(raw, &d) == nil && d.ToSeq == v.gapTo && d.LastHash == v.gapHash {
			v.pruned, v.prunedSeq = true, e.Seq
		}
	}
	v.count++
	v.lastSeq = e.Seq
	v.headHash = e.Hash
	if want, ok := v.wantHeads[e.Seq]; ok {
		if want != e.Hash {
			return &BreakError{Seq: e.Seq, Reason: "hash differs from the signed checkpoint at this entry (the log up to here was rewritten)"}
		}
		v.gotHeads[e.Seq] = e.Hash
	}
	return nil
}

// Finish checks that every expected checkpoint head was reached, and returns
// the number of entries and the head hash. When entries are missing from
// the end, the error names the first missing one.
func (v *Verifier) Finish() (count int64, head string, err error) {
	if v.gapTo > 0 && !v.pruned {
		return v.count, v.headHash, &BreakError{Seq: 1, Reason: fmt.Sprintf("expected entry 1, found %d (entries 1 to %d are missing, and no pruned entry records their removal)", v.gapTo+1, v.gapTo)}
	}
	if v.gapTo > 0 {
		// Anyone can compute an entry's hash: only a signature after the
		// pruned entry shows that the audit key's holder wrote it.
		signed := false
		for seq := range v.gotHeads {
			signed = signed || seq >= v.prunedSeq
		}
		if !signed {
			return v.count, v.headHash, &BreakError{Seq: v.prunedSeq, Reason: "the pruned entry that records the removal of the oldest entries is covered by no signed checkpoint"}
		}
	}
	missing := int64(-1)
	for seq := range v.wantHeads {
		if _, ok := v.gotHeads[seq]; ok || ((v.ranged || v.gapTo > 0) && v.started && seq < v.firstSeq) {
			continue
		}
		if missing < 0 || seq > missing {
			missing = seq
		}
	}
	if missing >= 0 {
		return v.count, v.headHash, &BreakError{Seq: v.lastSeq + 1,
			Reason: fmt.Sprintf("the chain ends at entry %d but a signed checkpoint covers entry %d (entries were removed from the end)", v.lastSeq, missing)}
	}
	return v.count, v.headHash, nil
}

// detailsText is an entry's details as JSON text.
func detailsText(d any) ([]byte, error) {
	if raw, ok := d.(RawDetails); ok {
		return raw, nil
	}
	return json.Marshal(d)
}

// First returns the sequence number and prev_hash the verified run starts
// from: 1 and the genesis hash for a whole chain.
func (v *Verifier) First() (seq int64, prevHash string) { return v.firstSeq, v.firstPrv }

// Last returns the sequence number and hash of the last entry verified.
func (v *Verifier) Last() (seq int64, hash string) { return v.lastSeq, v.headHash }

// Checkpoints returns how many checkpoints the entries matched, and the
// newest such sequence number (0 when none).
func (v *Verifier) Checkpoints() (n int, newest int64) {
	for seq := range v.gotHeads {
		newest = max(newest, seq)
	}
	return len(v.gotHeads), newest
}

// KeyIDs lists the ids of the keys that signed the checkpoints given,
// sorted.
func (v *Verifier) KeyIDs() []string {
	out := make([]string, 0, len(v.keyIDs))
	for k := range v.keyIDs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

package audit

import (
	"context"
	"errors"
	"io"
	"time"
)

// Trail is the read side of a stored audit chain, as a store implements it.
// Each method reads one consistent state of the chain.
type Trail interface {
	// AuditHead returns the newest entry's seq and hash (0 and the genesis
	// hash when the trail is empty).
	AuditHead(ctx context.Context) (seq int64, hash string, err error)
	// LatestCheckpoint returns the newest signed checkpoint, or
	// ErrNoCheckpoint.
	LatestCheckpoint(ctx context.Context) (Checkpoint, error)
	// VerifyChain recomputes the whole chain and checks every stored
	// checkpoint. Damage is reported in the result; the error is for
	// failing to read at all.
	VerifyChain(ctx context.Context) (VerifyResult, error)
	// Timeline lists one call's entries in chain order; a call the store
	// does not hold is the queue's not-found error.
	Timeline(ctx context.Context, callID string) ([]Entry, error)
	// ExportAudit streams the trail to w (see ExportOptions).
	ExportAudit(ctx context.Context, w io.Writer, opt ExportOptions) (ExportResult, error)
}

// ErrNoCheckpoint means no audit checkpoint has been signed yet (or, when
// signing one, that the audit trail is still empty).
var ErrNoCheckpoint = errors.New("audit: no audit checkpoint yet")

// ErrFormat is an export format other than jsonl or csv.
var ErrFormat = errors.New("audit: export format must be jsonl or csv")

// VerifyResult is what verifying a stored chain found.
type VerifyResult struct {
	// Count entries verified; Head is the last one's hash.
	Count int64
	Head  string
	// FromSeq and LastSeq are the first and last entries verified:
	// FromSeq is above 1 when the oldest entries were pruned.
	FromSeq, LastSeq int64
	// CheckpointSeq is the newest checkpoint that matched the chain (0 when
	// none); Checkpoints counts them; KeyIDs are the keys that signed them.
	CheckpointSeq int64
	Checkpoints   int
	KeyIDs        []string
	// Uncovered lists outside checkpoints that could not be compared.
	Uncovered []int64
	// OK is true when the chain and every checkpoint verified. Otherwise
	// Err says what is wrong: a *BreakError names the first bad entry.
	OK  bool
	Err error
}

// ExportOptions select and shape an audit export.
type ExportOptions struct {
	// Since and Until bound the entries' times: the export is the
	// contiguous run from the first entry at or after Since to the last
	// entry before Until (zero means unbounded).
	Since, Until time.Time
	// Format is "jsonl" (verifiable offline, ExportFormat) or "csv".
	Format string
	// Signer signs a JSONL export's header (the audit key). Without one
	// the header is written in the unsigned ExportFormatV1.
	Signer *Signer
	// FromSeq, when above 0, starts the run no later than this entry,
	// whatever Since says.
	FromSeq int64
	// ToSeq, when above 0, asks for the entries FromSeq (or the oldest
	// kept) to ToSeq instead of a time range.
	ToSeq int64
	// Anchored widens the run to signed checkpoints at both ends: from the
	// newest checkpoint at or before its first entry (entry 1 when there
	// is none, or the oldest entry kept when older ones were pruned; the
	// checkpoint at the last pruned entry is then exported too) to the
	// oldest checkpoint at or after its last entry, so
	// that every entry exported is bound by a signature. When no
	// checkpoint covers the last entry the export writes nothing and
	// returns ErrUnanchored: sign one and export again.
	Anchored bool
}

// ErrUnanchored is an anchored export whose last entry no checkpoint
// covers yet.
var ErrUnanchored = errors.New("audit: no checkpoint covers the end of the range yet")

// ExportResult describes what an export wrote.
type ExportResult struct {
	FromSeq, ToSeq int64
	Count          int64
	Head           string
	Checkpoints    int
}

// Package retention declares what pruning the audit trail needs of a
// store, whatever its engine: the horizon's bounds (the oldest entry, the
// first entry of a call still open, kept longer or under a legal hold),
// the prune itself, the legal holds and compaction. internal/db (SQLite)
// and internal/pgstore (PostgreSQL) implement Store, and the conformance
// suite (internal/store/storetest) runs the same cases on both.
package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/audit"
)

// MaxHolds bounds the legal holds a database keeps.
const MaxHolds = 1000

// Floor is the shortest retention any setting may ask for.
const Floor = 30 * 24 * time.Hour

// Hold is a legal hold: the audit entries of the calls of a tool, of an
// actor, or of one call, which no prune removes.
type Hold struct {
	ID, Kind, Value, Reason, By string
	CreatedAt                   int64 // milliseconds since the epoch
}

// Errors of a prune and of the holds.
var (
	// ErrNothingToPrune is a prune whose last entry is not after the
	// oldest entry kept, or is the chain's head.
	ErrNothingToPrune = errors.New("no audit entry to prune before that point")
	// ErrPruneUnanchored is a prune whose last entry has no signed
	// checkpoint: a verifier could not tell the removal from entries cut
	// out.
	ErrPruneUnanchored = errors.New("no signed checkpoint at the last entry to prune")
	// ErrPruneMoved is a prune whose first entry is no longer the oldest
	// kept: another prune removed entries since its archive was written.
	ErrPruneMoved = errors.New("the oldest audit entry changed since the archive was written (another prune ran); run the prune again")
	// ErrPruneUnderWay is a prune started while another holds the prune
	// lock (on another replica or in another process).
	ErrPruneUnderWay = errors.New("another prune of this database is under way; wait for it to end and run again")

	ErrTooManyHolds = fmt.Errorf("there are already %d legal holds; remove one first", MaxHolds)
	ErrHoldExists   = errors.New("that hold is there already")
	ErrNoSuchHold   = errors.New("no such hold")
)

// CompactSize is the space a database's audit trail takes: on SQLite the
// whole file's pages, the free ones among them, and bytes; on PostgreSQL
// the audit table's pages and bytes (with its indexes) and, after
// Compact, about how many pages' worth of the table no live entry takes
// (reused by new entries).
type CompactSize struct {
	Pages, FreePages, Bytes int64
}

// Removal is one prune: the entries FromSeq to ToSeq, removed by By (an
// admin the caller has checked), with Details added to the pruned entry's
// (the archive's name and digest, the retention, the state snapshot), and
// the key that signs the checkpoint at the pruned entry.
type Removal struct {
	FromSeq, ToSeq int64
	By             string
	Details        map[string]any
	Signer         *audit.Signer
}

// Store is what a prune reads and writes.
type Store interface {
	// OldestEntry is the oldest audit entry kept (0 for an empty trail).
	OldestEntry(ctx context.Context) (int64, error)
	// FirstEntryFrom is the first audit entry whose time is at or after t
	// (0 when there is none).
	FirstEntryFrom(ctx context.Context, t time.Time) (int64, error)
	// OldestOpenEntry is the first audit entry of the oldest call still
	// open at now: pending, approved with a grant still live, redeemed
	// without an outcome, or with an outcome unknown and unresolved (0
	// when none is).
	OldestOpenEntry(ctx context.Context, now time.Time) (int64, error)
	// OldestKeptForTool is the first audit entry of the oldest call of
	// tool proposed at or after since (0 when none).
	OldestKeptForTool(ctx context.Context, tool string, since time.Time) (int64, error)
	// OldestHeldEntry is the first audit entry of any call a legal hold
	// covers (0 when none).
	OldestHeldEntry(ctx context.Context) (int64, error)
	// CheckpointAtOrBefore is the newest signed checkpoint at or before
	// seq; audit.ErrNoCheckpoint when there is none.
	CheckpointAtOrBefore(ctx context.Context, seq int64) (audit.Checkpoint, error)
	// PasskeyRegistration is the seq and hash of the newest
	// passkey_registered entry of a credential (base64url); 0 and "" when
	// the trail holds none.
	PasskeyRegistration(ctx context.Context, credentialID string) (int64, string, error)
	// LatestToolsDigest is the tools_digest of the newest tools_loaded
	// entry ("" when none).
	LatestToolsDigest(ctx context.Context) (string, error)
	// Prune removes the audit entries r.FromSeq to r.ToSeq, the oldest
	// kept, in one transaction that appends a pruned entry recording them
	// (audit.PrunedDetails, with r.Details) by r.By, deletes them, and
	// signs a checkpoint at the pruned entry with r.Signer, so that no
	// reader ever sees a pruned entry that no checkpoint vouches for. A
	// signed checkpoint must stand at r.ToSeq (ErrPruneUnanchored), r.ToSeq
	// must be before the head (ErrNothingToPrune), and r.FromSeq must still
	// be the oldest entry (ErrPruneMoved). It returns the pruned entry.
	Prune(ctx context.Context, r Removal) (*audit.Entry, error)
	// AddHold adds a legal hold with its hold_added entry, by the admin
	// by (whom the caller has checked): ErrTooManyHolds, ErrHoldExists.
	AddHold(ctx context.Context, kind, value, reason, by string) (Hold, error)
	// RemoveHold removes a legal hold with its hold_removed entry:
	// ErrNoSuchHold.
	RemoveHold(ctx context.Context, id, by string) error
	// Holds lists the legal holds, oldest first.
	Holds(ctx context.Context) ([]Hold, error)
	// Compact gives back the space pruned entries took, as far as the
	// engine does, and reports the sizes before and after.
	Compact(ctx context.Context) (before, after CompactSize, err error)
}

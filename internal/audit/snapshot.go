package audit

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"io"
	"math"
	"strconv"
	"time"
)

// Snapshot is what a store reads of its audit trail for an export or a
// verification, every call from the same read snapshot.
type Snapshot interface {
	// Range is the contiguous run of entries an export between since and
	// until holds: from the first entry (in time order) at or after since
	// to the last entry before until, a zero time leaving that end open.
	// from is 0 when the trail is empty or nothing matches.
	Range(ctx context.Context, since, until time.Time) (from, to int64, err error)
	// Hash is the stored hash of entry seq.
	Hash(ctx context.Context, seq int64) (string, error)
	// Checkpoints are the signed checkpoints whose seq lies in from..to,
	// oldest first.
	Checkpoints(ctx context.Context, from, to int64) ([]Checkpoint, error)
	// Entries calls fn with each entry from..to in order, its details as
	// stored (canonical JSON text), and stops at the first error fn
	// returns.
	Entries(ctx context.Context, from, to int64, fn func(e *Entry, details []byte) error) error
}

// csvHeader is the first row of a CSV audit export.
var csvHeader = []string{"seq", "time", "kind", "call_id", "principal", "channel", "details", "prev_hash", "hash"}

// WriteExport streams the audit export opt asks for to w, row by row in
// constant memory, reading what src holds. JSONL is ExportFormat: a header
// naming the database (the store's identity) and the time now, signed when
// opt has a Signer, the checkpoints within the range, then every entry
// exactly as hashed. CSV has one row per entry with details as canonical
// JSON text, every cell guarded by CSVCell.
func WriteExport(ctx context.Context, w io.Writer, src Snapshot, opt ExportOptions, database string, now time.Time) (ExportResult, error) {
	var res ExportResult
	if opt.Format != "jsonl" && opt.Format != "csv" {
		return res, ErrFormat
	}
	from, to, err := src.Range(ctx, opt.Since, opt.Until)
	if err != nil {
		return res, err
	}
	if opt.ToSeq > 0 {
		if from, to, err = src.Range(ctx, time.Time{}, time.Time{}); err != nil {
			return res, err
		}
		from, to = max(from, opt.FromSeq), min(to, opt.ToSeq)
	}
	if opt.Anchored && from == 0 && !opt.Since.IsZero() && !opt.Until.IsZero() {
		// Clocks out of step can put the first entry at or after since
		// behind the last one before until: the run between those two
		// holds both ends.
		if from, to, err = crossedRange(ctx, src, opt.Since, opt.Until); err != nil {
			return res, err
		}
	}
	if opt.ToSeq == 0 && opt.FromSeq > 0 && (from == 0 || opt.FromSeq < from) {
		from = opt.FromSeq
		if to < from {
			to = from
		}
	}
	if from == 0 || to < from {
		from, to = 0, 0
	}
	if opt.Anchored && from > 0 {
		if from, to, err = anchor(ctx, src, from, to); err != nil {
			return res, err
		}
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	var cw *csv.Writer
	var buf []byte
	if opt.Format == "jsonl" {
		h := &ExportHeader{Format: ExportFormatV1, Database: database, ExportedAt: FormatTime(now)}
		if !opt.Since.IsZero() {
			h.Since = FormatTime(opt.Since)
		}
		if !opt.Until.IsZero() {
			h.Until = FormatTime(opt.Until)
		}
		cps, err := src.Checkpoints(ctx, max(from-1, 1), to)
		if err != nil {
			return res, err
		}
		// The checkpoint at the entry before the range, if any: after a
		// prune the oldest entry kept follows the checkpoint at the last
		// entry removed, which vouches for its prev_hash. An anchored
		// export carries it.
		var before *Checkpoint
		if len(cps) > 0 && cps[0].Seq == from-1 {
			before = &cps[0]
			if !opt.Anchored {
				cps = cps[1:]
			}
		}
		if from > 0 {
			h.FromSeq, h.ToSeq, h.Count = from, to, to-from+1
			h.PrevHash = GenesisHash
			if from > 1 {
				if h.PrevHash, err = src.Hash(ctx, from-1); err != nil {
					if before == nil {
						return res, err
					}
					h.PrevHash = before.Head
				}
			}
			if h.Head, err = src.Hash(ctx, to); err != nil {
				return res, err
			}
		}
		if opt.Signer != nil {
			if err := opt.Signer.SignHeader(h); err != nil {
				return res, err
			}
		}
		if buf, err = AppendHeaderLine(buf[:0], h); err != nil {
			return res, err
		}
		if _, err := bw.Write(buf); err != nil {
			return res, err
		}
		for _, c := range cps {
			if buf, err = AppendCheckpointLine(buf[:0], c); err != nil {
				return res, err
			}
			if _, err := bw.Write(buf); err != nil {
				return res, err
			}
		}
		res.Checkpoints = len(cps)
	} else {
		cw = csv.NewWriter(bw)
		if err := cw.Write(csvHeader); err != nil {
			return res, err
		}
	}
	res.FromSeq, res.ToSeq = from, to
	if from > 0 {
		record := make([]string, len(csvHeader))
		err := src.Entries(ctx, from, to, func(e *Entry, details []byte) error {
			if cw != nil {
				record[0], record[1], record[2] = strconv.FormatInt(e.Seq, 10), e.Time, CSVCell(e.Kind)
				record[3], record[4], record[5] = CSVCell(e.CallID), CSVCell(e.Principal), CSVCell(e.Channel)
				record[6], record[7], record[8] = CSVCell(string(details)), e.PrevHash, e.Hash
				if err := cw.Write(record); err != nil {
					return err
				}
			} else {
				var err error
				if buf, err = AppendEntryLine(buf[:0], e, details); err != nil {
					return err
				}
				if _, err := bw.Write(buf); err != nil {
					return err
				}
			}
			res.Count++
			res.Head = e.Hash
			return ctx.Err()
		})
		if err != nil {
			return res, err
		}
	}
	if cw != nil {
		cw.Flush()
		if err := cw.Error(); err != nil {
			return res, err
		}
	}
	return res, bw.Flush()
}

// crossedRange is the run between the first entry at or after since and
// the last before until, whichever comes first in the chain (0, 0 when
// either is missing).
func crossedRange(ctx context.Context, src Snapshot, since, until time.Time) (int64, int64, error) {
	first, _, err := src.Range(ctx, since, time.Time{})
	if err != nil || first == 0 {
		return 0, 0, err
	}
	_, last, err := src.Range(ctx, time.Time{}, until)
	if err != nil || last == 0 {
		return 0, 0, err
	}
	return min(first, last), max(first, last), nil
}

// anchor widens from..to to the checkpoints around it (see
// ExportOptions.Anchored).
func anchor(ctx context.Context, src Snapshot, from, to int64) (int64, int64, error) {
	cps, err := src.Checkpoints(ctx, 1, lastSeq)
	if err != nil {
		return 0, 0, err
	}
	oldest, _, err := src.Range(ctx, time.Time{}, time.Time{})
	if err != nil {
		return 0, 0, err
	}
	start, end := max(int64(1), oldest), int64(0)
	for _, c := range cps {
		if c.Seq <= from && c.Seq > start {
			start = c.Seq
		}
		if c.Seq >= to && (end == 0 || c.Seq < end) {
			end = c.Seq
		}
	}
	if end == 0 {
		return 0, 0, ErrUnanchored
	}
	return start, end, nil
}

// lastSeq bounds the checkpoints a verification reads.
const lastSeq = 1 << 62

// errStopped ends VerifySnapshot's read at the first bad entry.
var errStopped = errors.New("audit: verification stopped")

// VerifySnapshot recomputes the whole chain a store holds, entry 1 to the
// head, against the checkpoints stored with it and those opts keeps
// outside the database (which expose a database replaced by an older
// copy), signed only by the key ids opts allows when it names any. Damage
// is reported in the result, which stops at the first bad entry; the error
// is for failing to read at all.
func VerifySnapshot(ctx context.Context, s Snapshot, opts VerifyOptions) (VerifyResult, error) {
	var res VerifyResult
	cps, err := s.Checkpoints(ctx, 1, lastSeq)
	if err != nil {
		return VerifyResult{}, err
	}
	v := NewVerifier()
	v.AllowPruned()
	all := opts
	all.Checkpoints = append(append([]Checkpoint(nil), opts.Checkpoints...), cps...)
	if err := all.Prepare(v); err != nil {
		res.Err = err
		return res, nil
	}
	// Every stored row, whatever its seq: a row edited in outside 1..head
	// breaks the chain like any other.
	err = s.Entries(ctx, math.MinInt64, math.MaxInt64, func(e *Entry, details []byte) error {
		// The stored text is hashed as it is: any change to it, even one
		// that parses to the same value, breaks the hash.
		e.Details = RawDetails(details)
		if err := v.Add(e); err != nil {
			res.Err = err
			return errStopped
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopped) {
		return VerifyResult{}, err
	}
	// The chain starts at entry 1, so the last good seq is the count.
	count, head := v.Last()
	if res.Err == nil {
		count, head, res.Err = v.Finish()
	}
	rep := opts.Report(v, count, head)
	res.Count, res.Head, res.Uncovered = rep.Count, rep.Head, rep.Uncovered
	res.FromSeq, res.LastSeq = rep.FromSeq, rep.LastSeq
	res.Checkpoints, res.CheckpointSeq, res.KeyIDs = rep.Checkpoints, rep.CheckpointSeq, rep.KeyIDs
	res.OK = res.Err == nil
	return res, nil
}

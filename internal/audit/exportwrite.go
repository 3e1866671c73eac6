package audit

import (
	"bufio"
	"context"
	"encoding/csv"
	"io"
	"strconv"
	"time"
)

// ExportSource is what a store reads for an audit export, every call from
// the same read snapshot of its trail.
type ExportSource interface {
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
func WriteExport(ctx context.Context, w io.Writer, src ExportSource, opt ExportOptions, database string, now time.Time) (ExportResult, error) {
	var res ExportResult
	if opt.Format != "jsonl" && opt.Format != "csv" {
		return res, ErrFormat
	}
	from, to, err := src.Range(ctx, opt.Since, opt.Until)
	if err != nil {
		return res, err
	}
	if from == 0 || to < from {
		from, to = 0, 0
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
		if from > 0 {
			h.FromSeq, h.ToSeq, h.Count = from, to, to-from+1
			h.PrevHash = GenesisHash
			if from > 1 {
				if h.PrevHash, err = src.Hash(ctx, from-1); err != nil {
					return res, err
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
		cps, err := src.Checkpoints(ctx, from, to)
		if err != nil {
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

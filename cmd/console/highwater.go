package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/highwater"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/retention"
)

// markPath is the data directory's high-water mark of the audit chain.
func markPath(data string) string { return filepath.Join(data, "audit-mark") }

// chainHead is the database's audit chain head as a mark.
func chainHead(ctx context.Context, d *engine) (highwater.Mark, error) {
	seq, head, err := d.AuditHead(ctx)
	if err != nil {
		return highwater.Mark{}, err
	}
	if seq == 0 {
		head = ""
	}
	return highwater.Mark{Seq: seq, Head: head}, nil
}

// markHash reads the hash of the audit entry at seq for highwater.Check.
// An entry a prune removed (before the oldest entry kept, which follows
// a signed checkpoint at the last one removed) cannot be read back: for
// the mark's own entry, the chain's head being at or past it is then all
// that is checked. On PostgreSQL a prune run from one replica's host
// cannot see the other replicas' marks, so a replica that wrote nothing
// since before the horizon finds its mark's entry gone.
func markHash(ctx context.Context, d *engine, mark highwater.Mark) func(seq int64) (string, error) {
	return func(seq int64) (string, error) {
		h, err := d.AuditHashAt(ctx, seq)
		if err == nil || seq != mark.Seq {
			return h, err
		}
		rs, ok := d.storage.(retention.Store)
		if !ok {
			return h, err
		}
		oldest, oerr := rs.OldestEntry(ctx)
		if oerr != nil || oldest <= seq {
			return h, err
		}
		cp, cerr := rs.CheckpointAtOrBefore(ctx, oldest-1)
		if cerr != nil || cp.Seq != oldest-1 {
			return h, err
		}
		return mark.Head, nil
	}
}

// openMark opens the data directory's high-water mark, refuses a database
// whose audit chain does not contain it, and has every commit from here on
// advance it before the commit is acknowledged.
func openMark(ctx context.Context, data string, d *engine) (*highwater.File, error) {
	hw, err := highwater.Open(markPath(data), d.Identity())
	if err != nil {
		return nil, err
	}
	head, err := chainHead(ctx, d)
	if err == nil {
		err = highwater.Check(hw.Mark(), head, markHash(ctx, d, hw.Mark()))
	}
	var be *highwater.BehindError
	if errors.As(err, &be) {
		hw.Close()
		return nil, fmt.Errorf("%v. The database was restored from an older copy (or replaced), and grants redeemed since then "+
			"could redeem again. Restore the newer database, or accept this one on purpose: "+
			"console audit accept-rollback --as ADMIN --data %s (every grant issued until then is refused)", err, data)
	}
	if err == nil {
		err = hw.Advance(head)
	}
	if err != nil {
		hw.Close()
		return nil, err
	}
	d.OnCommit(func(seq int64, head string) error { return hw.Advance(highwater.Mark{Seq: seq, Head: head}) })
	return hw, nil
}

// auditAcceptRollback accepts a database that is behind the data
// directory's high-water mark, in the name of an enabled admin, audited:
// every grant issued until now is refused from then on, and the mark is
// set to the database's chain.
func auditAcceptRollback(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("audit accept-rollback", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, auditUsage)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	as := fs.String("as", "", "the admin account accepting the rollback (required)")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() > 0 || *as == "" {
		fmt.Fprintln(e.stderr, "usage: console audit accept-rollback --as ADMIN [--data DIR] [--db URL]")
		return 2
	}
	dir := dataDir(e, *data)
	d, err := openExisting(ctx, dir, databaseURL(e, *dbURL))
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit accept-rollback: %v\n", err)
		return 1
	}
	defer d.Close()
	hw, err := highwater.Open(markPath(dir), d.Identity())
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit accept-rollback: %v\n", err)
		return 1
	}
	defer hw.Close()
	head, err := chainHead(ctx, d)
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit accept-rollback: %v\n", err)
		return 1
	}
	mark := hw.Mark()
	var be *highwater.BehindError
	err = highwater.Check(mark, head, markHash(ctx, d, mark))
	if err == nil {
		fmt.Fprintf(e.stderr, "console audit accept-rollback: the database's chain (%s) contains this data directory's mark (%s): there is no rollback to accept\n", head, mark)
		return 1
	}
	if !errors.As(err, &be) {
		fmt.Fprintf(e.stderr, "console audit accept-rollback: %v\n", err)
		return 1
	}
	q := queue.NewService(queue.Config{Store: d.queue})
	ended, err := q.AcceptRollback(ctx, *as, audit.ChannelCLI, queue.Rollback{MarkSeq: mark.Seq, MarkHead: mark.Head, DBSeq: head.Seq, DBHead: head.Head})
	if errors.Is(err, queue.ErrNotAdmin) {
		fmt.Fprintf(e.stderr, "console audit accept-rollback: %s is not an enabled admin account; only an admin may accept a rollback\n", *as)
		return 1
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit accept-rollback: %v\n", err)
		return 1
	}
	now, err := chainHead(ctx, d)
	if err == nil {
		err = hw.Reset(now)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit accept-rollback: accepted, but the mark could not be reset: %v\n", err)
		return 1
	}
	fmt.Fprintf(e.stdout, "accepted: the database ends at %s, behind %s; every grant issued until now is refused at redemption, "+
		"%s, and the mark is now %s\n", head, mark, endedByRollback(ended), now)
	return 0
}

// endedByRollback says what an accepted rollback ended.
func endedByRollback(ended queue.RollbackEnded) string {
	out := endedAllowances(ended.Allowances)
	switch n := len(ended.Plans); n {
	case 0:
	case 1:
		out += "; the one approved plan is cancelled (its unminted items stop, its unredeemed grants are revoked)"
	default:
		out += fmt.Sprintf("; %d approved plans are cancelled (their unminted items stop, their unredeemed grants are revoked)", n)
	}
	switch n := len(ended.Delegations); n {
	case 0:
	case 1:
		out += "; the one live delegation is ended"
	default:
		out += fmt.Sprintf("; %d live delegations are ended", n)
	}
	return out
}

// endedAllowances says which allowances an accepted rollback ended.
func endedAllowances(ids []string) string {
	switch len(ids) {
	case 0:
		return "no allowance was alive in the restored database"
	case 1:
		return "the one allowance alive in the restored database (" + ids[0] + ") is revoked"
	}
	return fmt.Sprintf("the %d allowances alive in the restored database are revoked", len(ids))
}

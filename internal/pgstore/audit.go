package pgstore

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/store/sqlq"
)

// readSnapshot runs fn inside a REPEATABLE READ, READ ONLY transaction: fn
// sees one consistent state of the database while writers go on, and takes
// no lock that a writer waits for.
func (d *DB) readSnapshot(ctx context.Context, fn func(q querier) error) error {
	tx, err := d.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return classify(fmt.Errorf("pgstore: begin read: %w", err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	return fn(tx)
}

// AuditHead returns the sequence number and hash of the newest audit entry
// (0 and the genesis hash when there is none).
func (d *DB) AuditHead(ctx context.Context) (int64, string, error) {
	return sqlq.AuditHead(ctx, shared{d.pool})
}

// Checkpoint signs the current head of the audit trail and stores the
// checkpoint, unless the newest checkpoint already covers the head, in
// which case that one is returned. The head is read and the checkpoint
// written in one write transaction, which holds the chain head lock. An
// empty trail is audit.ErrNoCheckpoint.
func (d *DB) Checkpoint(ctx context.Context, signer *audit.Signer) (audit.Checkpoint, error) {
	var out audit.Checkpoint
	err := d.update(ctx, func(t *txn) error {
		var err error
		out, err = sqlq.SignCheckpoint(ctx, shared{t.tx}, signer, d.now())
		return err
	})
	return out, err
}

// LatestCheckpoint returns the newest signed checkpoint.
func (d *DB) LatestCheckpoint(ctx context.Context) (audit.Checkpoint, error) {
	return sqlq.LatestCheckpoint(ctx, shared{d.pool})
}

// VerifyChain recomputes the whole audit chain in one read snapshot, and
// checks every stored checkpoint's signature and head.
func (d *DB) VerifyChain(ctx context.Context) (audit.VerifyResult, error) {
	return d.Verify(ctx, audit.VerifyOptions{})
}

// Verify is VerifyChain with checkpoints kept outside the database and,
// optionally, the only key ids that checkpoints may be signed with.
func (d *DB) Verify(ctx context.Context, opts audit.VerifyOptions) (audit.VerifyResult, error) {
	var res audit.VerifyResult
	err := d.readSnapshot(ctx, func(q querier) error {
		var err error
		res, err = audit.VerifySnapshot(ctx, sqlq.Trail{Q: shared{q}}, opts)
		return err
	})
	if err != nil {
		return audit.VerifyResult{}, err
	}
	return res, nil
}

// ExportAudit streams the audit trail to w from one read snapshot, row by
// row, in constant memory, in the formats audit.WriteExport writes.
func (d *DB) ExportAudit(ctx context.Context, w io.Writer, opt audit.ExportOptions) (audit.ExportResult, error) {
	if opt.Format != "jsonl" && opt.Format != "csv" {
		return audit.ExportResult{}, audit.ErrFormat
	}
	var res audit.ExportResult
	err := d.readSnapshot(ctx, func(q querier) error {
		var err error
		res, err = audit.WriteExport(ctx, w, sqlq.Trail{Q: shared{q}}, opt, d.identity, d.now())
		return err
	})
	return res, err
}

// Timeline returns every audit entry about one call, oldest first, with
// details parsed. A call that does not exist is queue.ErrNotFound.
func (d *DB) Timeline(ctx context.Context, callID string) ([]audit.Entry, error) {
	return sqlq.Timeline(ctx, shared{d.pool}, callID)
}

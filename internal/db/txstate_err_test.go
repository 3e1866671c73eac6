package db

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store"
)

// TestTxStateReadErrorIsNotReplaced: when the write transaction's first
// statement (readTxState) fails for a reason other than another database
// in the file, the write fails with that reason, not store.ErrReplaced;
// a missing identity still reads as a replaced database.
func TestTxStateReadErrorIsNotReplaced(t *testing.T) {
	tests := []struct {
		name         string
		break_, heal string // statements run on a pooled connection
		replaced     bool
		mention      string
	}{
		// The statement names this index (INDEXED BY): without it, it
		// fails to prepare, in a file that is still the database opened.
		{"statement error", `DROP INDEX freezes_active`,
			`CREATE INDEX freezes_active ON freezes (tool, actor) WHERE lifted_at IS NULL`, false, "freezes_active"},
		{"no identity row", `DELETE FROM meta WHERE key = 'identity'`, "", true, "removed or replaced"},
		{"no meta table", `ALTER TABLE meta RENAME TO meta_gone`, `ALTER TABLE meta_gone RENAME TO meta`, true, "removed or replaced"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			if err := d.Store().Update(ctx, func(tx queue.Tx) error { return submitLike(tx, "call_s") }); err != nil {
				t.Fatal(err)
			}
			// The state is read by a statement of its own before a freeze,
			// and with the first read of a call or a submission's checks.
			writes := map[string]func(queue.Tx) error{
				"freeze": func(tx queue.Tx) error {
					return tx.InsertFreeze(&queue.Freeze{Tool: "payments.refund", Reason: "incident", By: "root", At: time.Now()})
				},
				"call": func(tx queue.Tx) error {
					c, err := tx.Call("call_s")
					if err != nil {
						return err
					}
					return tx.Append(&audit.Entry{Time: audit.FormatTime(time.Now()), Kind: audit.KindOutcome, CallID: c.ID,
						Principal: "agent:a", Channel: audit.ChannelAPI})
				},
				"missing call": func(tx queue.Tx) error {
					_, err := tx.Call("call_missing")
					if errors.Is(err, queue.ErrNotFound) {
						return nil
					}
					return err
				},
				"submission checks": func(tx queue.Tx) error {
					return tx.(*storeTx).SubmitChecks("agent:a", "payments.refund", "sha256:x", "tok", 10)
				},
			}
			for name, w := range writes {
				write := func() error { return d.Store().Update(ctx, w) }
				if err := write(); err != nil {
					t.Fatalf("%s: write before: %v", name, err)
				}
				if _, err := d.SQL().ExecContext(ctx, tt.break_); err != nil {
					t.Fatal(err)
				}
				err = write()
				if err == nil {
					t.Fatalf("%s: write succeeded; want it to fail closed", name)
				}
				if got := errors.Is(err, store.ErrReplaced); got != tt.replaced {
					t.Errorf("%s: write error %q: errors.Is(ErrReplaced) = %t, want %t", name, err, got, tt.replaced)
				}
				if !strings.Contains(err.Error(), tt.mention) {
					t.Errorf("%s: write error %q does not mention %q", name, err, tt.mention)
				}
				heal := tt.heal
				if heal == "" {
					heal = `INSERT INTO meta (key, value) VALUES ('identity', '` + d.identity + `')`
				}
				if _, err := d.SQL().ExecContext(ctx, heal); err != nil {
					t.Fatal(err)
				}
				if err := write(); err != nil {
					t.Errorf("%s: write after the statement works again: %v", name, err)
				}
			}
		})
	}
}

// TestTxStateErrKinds: an error of the transaction's first statement that
// says nothing about which file is open keeps its kind: a storage failure
// is store.ErrUnavailable (a client may retry), a cancelled context its
// own error; neither is store.ErrReplaced.
func TestTxStateErrKinds(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	d.lockWriter()
	defer d.unlockWriter()
	tx, err := d.beginWrite(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tt := range []struct {
		name string
		ctx  context.Context
		err  error
		want error
	}{
		{"I/O error", context.Background(), sqlite3.Error{Code: sqlite3.ErrIoErr}, store.ErrUnavailable},
		{"busy", context.Background(), sqlite3.Error{Code: sqlite3.ErrBusy}, store.ErrUnavailable},
		{"corrupt", context.Background(), sqlite3.Error{Code: sqlite3.ErrCorrupt}, store.ErrUnavailable},
		{"cancelled", cancelled, errors.New("interrupted"), context.Canceled},
		{"the driver's context error", context.Background(), context.Canceled, context.Canceled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := d.txStateErr(tt.ctx, tx, tt.err)
			if !errors.Is(got, tt.want) || errors.Is(got, store.ErrReplaced) {
				t.Errorf("txStateErr = %v; want %v, not ErrReplaced", got, tt.want)
			}
		})
	}
}

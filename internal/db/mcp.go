package db

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/mcp/catalog"
)

// Catalog adapts DB to catalog.Store: the pinned definitions of MCP
// servers' tools.
type Catalog struct{ d *DB }

// Catalog returns the MCP catalog's view of the database.
func (d *DB) Catalog() Catalog { return Catalog{d} }

var _ catalog.Store = Catalog{}

// Update runs fn in one BEGIN IMMEDIATE transaction, after the identity
// check every write makes, and commits when fn returns nil.
func (c Catalog) Update(ctx context.Context, fn func(catalog.Tx) error) error {
	return c.d.update(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return fn(&storeTx{ctx: ctx, tx: tx, db: c.d})
	})
}

const definitionColumns = `server, tool, digest, definition, status, reasons, first_seen, decided_by, decided_at`

func scanDefinition(r rowScanner) (catalog.Pin, error) {
	var p catalog.Pin
	var def, status, reasons string
	var first int64
	var by sql.NullString
	var at sql.NullInt64
	if err := r.Scan(&p.Server, &p.Tool, &p.Digest, &def, &status, &reasons, &first, &by, &at); err != nil {
		return catalog.Pin{}, err
	}
	p.Definition, p.Status = []byte(def), catalog.Status(status)
	if err := json.Unmarshal([]byte(reasons), &p.Reasons); err != nil {
		return catalog.Pin{}, fmt.Errorf("db: definition %s/%s reasons: %w", p.Server, p.Tool, err)
	}
	p.FirstSeen, p.DecidedBy, p.DecidedAt = time.UnixMilli(first).UTC(), by.String, fromMS(at)
	return p, nil
}

// Definitions returns every pinned definition of the server, oldest first.
func (c Catalog) Definitions(ctx context.Context, server string) ([]catalog.Pin, error) {
	rows, err := c.d.sql.QueryContext(ctx, `SELECT `+definitionColumns+` FROM mcp_definitions WHERE server = ?
		ORDER BY first_seen, tool, digest`, server)
	if err != nil {
		return nil, classify(fmt.Errorf("db: definitions of %s: %w", server, err))
	}
	defer rows.Close()
	var out []catalog.Pin
	for rows.Next() {
		p, err := scanDefinition(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, p)
	}
	return out, classify(rows.Err())
}

func (t *storeTx) Definition(server, tool, digest string) (catalog.Pin, error) {
	p, err := scanDefinition(t.tx.QueryRowContext(t.ctx, `SELECT `+definitionColumns+` FROM mcp_definitions
		WHERE server = ? AND tool = ? AND digest = ?`, server, tool, digest))
	if errors.Is(err, sql.ErrNoRows) {
		return catalog.Pin{}, fmt.Errorf("%w: %s/%s %s", catalog.ErrNotFound, server, tool, digest)
	}
	if err != nil {
		return catalog.Pin{}, classify(fmt.Errorf("db: definition: %w", err))
	}
	return p, nil
}

func (t *storeTx) InsertDefinition(p catalog.Pin) error {
	reasons := p.Reasons
	if reasons == nil {
		reasons = []string{}
	}
	rb, err := json.Marshal(reasons)
	if err != nil {
		return err
	}
	var by sql.NullString
	if p.DecidedBy != "" {
		by = sql.NullString{String: p.DecidedBy, Valid: true}
	}
	_, err = t.tx.ExecContext(t.ctx, `INSERT INTO mcp_definitions (`+definitionColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		p.Server, p.Tool, p.Digest, string(p.Definition), string(p.Status), string(rb), ms(p.FirstSeen), by, nullMS(p.DecidedAt))
	if err != nil {
		return fmt.Errorf("db: insert definition: %w", err)
	}
	return nil
}

func (t *storeTx) SetDefinitionStatus(server, tool, digest string, status catalog.Status, by string, at time.Time) error {
	res, err := t.tx.ExecContext(t.ctx, `UPDATE mcp_definitions SET status = ?, decided_by = ?, decided_at = ?
		WHERE server = ? AND tool = ? AND digest = ?`, string(status), by, ms(at), server, tool, digest)
	if err != nil {
		return fmt.Errorf("db: review definition: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("%w: %s/%s %s", catalog.ErrNotFound, server, tool, digest)
	}
	return nil
}

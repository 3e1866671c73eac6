package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/mcp/catalog"
)

// Catalog adapts DB to catalog.Store: the pinned definitions of MCP
// servers' tools.
type Catalog struct{ d *DB }

// Catalog returns the MCP catalog's view of the database.
func (d *DB) Catalog() Catalog { return Catalog{d} }

var _ catalog.Store = Catalog{}

// Update runs fn in one write transaction and commits when fn returns nil.
func (c Catalog) Update(ctx context.Context, fn func(catalog.Tx) error) error {
	return c.d.update(ctx, func(t *txn) error { return fn(t) })
}

const definitionColumns = `server, tool, digest, definition, status, reasons, first_seen, decided_by, decided_at`

func scanDefinition(r rowScanner) (catalog.Pin, error) {
	var p catalog.Pin
	var def, status, reasons string
	var first int64
	var by *string
	var at *int64
	if err := r.Scan(&p.Server, &p.Tool, &p.Digest, &def, &status, &reasons, &first, &by, &at); err != nil {
		return catalog.Pin{}, err
	}
	p.Definition, p.Status = []byte(def), catalog.Status(status)
	if err := json.Unmarshal([]byte(reasons), &p.Reasons); err != nil {
		return catalog.Pin{}, fmt.Errorf("pgstore: definition %s/%s reasons: %w", p.Server, p.Tool, err)
	}
	p.FirstSeen, p.DecidedBy, p.DecidedAt = time.UnixMilli(first).UTC(), deref(by), fromMS(at)
	return p, nil
}

// Definitions returns every pinned definition of the server, oldest first.
func (c Catalog) Definitions(ctx context.Context, server string) ([]catalog.Pin, error) {
	rows, err := c.d.pool.Query(ctx, `SELECT `+definitionColumns+` FROM mcp_definitions WHERE server = $1
		ORDER BY first_seen, tool, digest`, server)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: definitions of %s: %w", server, err))
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

func (t *txn) Definition(server, tool, digest string) (catalog.Pin, error) {
	p, err := scanDefinition(t.tx.QueryRow(t.ctx, `SELECT `+definitionColumns+` FROM mcp_definitions
		WHERE server = $1 AND tool = $2 AND digest = $3`, server, tool, digest))
	if errors.Is(err, pgx.ErrNoRows) {
		return catalog.Pin{}, fmt.Errorf("%w: %s/%s %s", catalog.ErrNotFound, server, tool, digest)
	}
	if err != nil {
		return catalog.Pin{}, classify(fmt.Errorf("pgstore: definition: %w", err))
	}
	return p, nil
}

func (t *txn) InsertDefinition(p catalog.Pin) error {
	reasons := p.Reasons
	if reasons == nil {
		reasons = []string{}
	}
	rb, err := json.Marshal(reasons)
	if err != nil {
		return err
	}
	_, err = t.tx.Exec(t.ctx, `INSERT INTO mcp_definitions (`+definitionColumns+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)`,
		p.Server, p.Tool, p.Digest, string(p.Definition), string(p.Status), string(rb), ms(p.FirstSeen),
		nullStr(p.DecidedBy), nullMS(p.DecidedAt))
	if err != nil {
		return fmt.Errorf("pgstore: insert definition: %w", err)
	}
	return nil
}

func (t *txn) SetDefinitionStatus(server, tool, digest string, status catalog.Status, by string, at time.Time) error {
	tag, err := t.tx.Exec(t.ctx, `UPDATE mcp_definitions SET status = $1, decided_by = $2, decided_at = $3
		WHERE server = $4 AND tool = $5 AND digest = $6`, string(status), by, ms(at), server, tool, digest)
	if err != nil {
		return fmt.Errorf("pgstore: review definition: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%w: %s/%s %s", catalog.ErrNotFound, server, tool, digest)
	}
	return nil
}

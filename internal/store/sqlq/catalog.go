package sqlq

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/mcp/catalog"
)

const definitionColumns = `server, tool, digest, definition, status, reasons, first_seen, decided_by, decided_at`

func scanDefinition(r Row) (catalog.Pin, error) {
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
		return catalog.Pin{}, fmt.Errorf("store: definition %s/%s reasons: %w", p.Server, p.Tool, err)
	}
	p.FirstSeen, p.DecidedBy, p.DecidedAt = time.UnixMilli(first).UTC(), by.String, fromMS(at)
	return p, nil
}

// Definitions returns every pinned definition of the server, oldest first.
func Definitions(ctx context.Context, q Querier, server string) ([]catalog.Pin, error) {
	rows, err := q.Query(ctx, `SELECT `+definitionColumns+` FROM mcp_definitions WHERE server = ?
		ORDER BY first_seen, tool, digest`, server)
	if err != nil {
		return nil, fmt.Errorf("store: definitions of %s: %w", server, err)
	}
	defer rows.Close()
	var out []catalog.Pin
	for rows.Next() {
		p, err := scanDefinition(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: definitions of %s: %w", server, err)
	}
	return out, nil
}

// Definition returns one pinned definition, or catalog.ErrNotFound.
func Definition(ctx context.Context, q Querier, server, tool, digest string) (catalog.Pin, error) {
	p, err := scanDefinition(q.QueryRow(ctx, `SELECT `+definitionColumns+` FROM mcp_definitions
		WHERE server = ? AND tool = ? AND digest = ?`, server, tool, digest))
	if errors.Is(err, ErrNoRows) {
		return catalog.Pin{}, fmt.Errorf("%w: %s/%s %s", catalog.ErrNotFound, server, tool, digest)
	}
	if err != nil {
		return catalog.Pin{}, fmt.Errorf("store: definition: %w", err)
	}
	return p, nil
}

// InsertDefinition pins a definition.
func InsertDefinition(ctx context.Context, q Querier, p catalog.Pin) error {
	reasons := p.Reasons
	if reasons == nil {
		reasons = []string{}
	}
	rb, err := json.Marshal(reasons)
	if err != nil {
		return err
	}
	by := sql.NullString{String: p.DecidedBy, Valid: p.DecidedBy != ""}
	if _, err := q.Exec(ctx, `INSERT INTO mcp_definitions (`+definitionColumns+`) VALUES (?,?,?,?,?,?,?,?,?)`,
		p.Server, p.Tool, p.Digest, string(p.Definition), string(p.Status), string(rb), ms(p.FirstSeen),
		by, nullMS(p.DecidedAt)); err != nil {
		return fmt.Errorf("store: insert definition: %w", err)
	}
	return nil
}

// SetDefinitionStatus records a review of a pinned definition, or returns
// catalog.ErrNotFound.
func SetDefinitionStatus(ctx context.Context, q Querier, server, tool, digest string, status catalog.Status, by string, at time.Time) error {
	n, err := q.Exec(ctx, `UPDATE mcp_definitions SET status = ?, decided_by = ?, decided_at = ?
		WHERE server = ? AND tool = ? AND digest = ?`, string(status), by, ms(at), server, tool, digest)
	if err != nil {
		return fmt.Errorf("store: review definition: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("%w: %s/%s %s", catalog.ErrNotFound, server, tool, digest)
	}
	return nil
}

package db

import (
	"context"
	"time"

	"github.com/countersign/countersign/internal/mcp/catalog"
	"github.com/countersign/countersign/internal/store/sqlq"
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
	return c.d.update(ctx, func(ctx context.Context, tx *writeTx) error {
		return runTx(&storeTx{ctx: ctx, tx: tx, db: c.d}, fn)
	})
}

// Definitions returns every pinned definition of the server, oldest first.
func (c Catalog) Definitions(ctx context.Context, server string) ([]catalog.Pin, error) {
	return sqlq.Definitions(ctx, shared{c.d.sql}, server)
}

func (t *storeTx) Definition(server, tool, digest string) (catalog.Pin, error) {
	return sqlq.Definition(t.ctx, shared{t.tx}, server, tool, digest)
}

func (t *storeTx) InsertDefinition(p catalog.Pin) error {
	return sqlq.InsertDefinition(t.ctx, shared{t.tx}, p)
}

func (t *storeTx) SetDefinitionStatus(server, tool, digest string, status catalog.Status, by string, at time.Time) error {
	return sqlq.SetDefinitionStatus(t.ctx, shared{t.tx}, server, tool, digest, status, by, at)
}

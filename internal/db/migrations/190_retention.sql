-- Pruning the oldest audit entries (console audit prune) is the one delete
-- the audit table allows, and only while the pruning transaction holds the
-- permit row, which it removes again before it commits. The transaction
-- appends the pruned entry that records what it removes.
CREATE TABLE audit_prune_permit (id INTEGER PRIMARY KEY CHECK (id = 1)) STRICT;
DROP TRIGGER audit_no_delete;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
WHEN NOT EXISTS (SELECT 1 FROM audit_prune_permit)
BEGIN
    SELECT RAISE(ABORT, 'countersign: audit entries cannot be deleted');
END;
CREATE TRIGGER audit_prune_permit_no_update BEFORE UPDATE ON audit_prune_permit
BEGIN
    SELECT RAISE(ABORT, 'countersign: the prune permit cannot be changed');
END;

-- Legal holds (console hold): the calls of a tool, of an actor, or one
-- call, whose audit entries no prune removes. At most 1,000.
CREATE TABLE retention_holds (
    id         TEXT PRIMARY KEY,
    kind       TEXT NOT NULL CHECK (kind IN ('tool', 'actor', 'call')),
    value      TEXT NOT NULL,
    reason     TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (kind, value)
) STRICT;

-- Pruning the oldest audit entries (console audit prune) is the one delete
-- the audit table allows, and only while the pruning transaction holds the
-- permit row, which it removes again before it commits. The transaction
-- appends the pruned entry that records what it removes. Updates and
-- TRUNCATE stay refused.
CREATE TABLE audit_prune_permit (id INTEGER PRIMARY KEY CHECK (id = 1));
DROP TRIGGER audit_no_update ON audit;
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
    FOR EACH ROW EXECUTE FUNCTION countersign_append_only();
CREATE FUNCTION countersign_audit_prune_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM audit_prune_permit) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'countersign: % entries cannot be changed or deleted', TG_TABLE_NAME;
END $$;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION countersign_audit_prune_only();

-- Legal holds (console hold): the calls of a tool, of an actor, or one
-- call, whose audit entries no prune removes. At most 1,000.
CREATE TABLE retention_holds (
    id         TEXT PRIMARY KEY,
    kind       TEXT NOT NULL CHECK (kind IN ('tool', 'actor', 'call')),
    value      TEXT NOT NULL,
    reason     TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (kind, value)
);

-- Rollbacks accepted on purpose. A data directory keeps a high-water mark
-- of the audit chain outside the database; a database found behind it is
-- refused at start until an admin accepts the rollback (console audit
-- accept-rollback). Accepting records a row here, in the same transaction
-- as its audit entry, and from then on every grant issued at or before
-- accepted_at is refused at redemption: a restored database no longer
-- knows which of those grants were redeemed.
CREATE TABLE rollbacks (
    id          INTEGER PRIMARY KEY,
    accepted_at INTEGER NOT NULL,      -- unix milliseconds
    accepted_by TEXT NOT NULL,
    mark_seq    INTEGER NOT NULL,      -- the data directory's mark
    mark_head   TEXT NOT NULL,
    db_seq      INTEGER NOT NULL,      -- the database's chain head when accepted
    db_head     TEXT NOT NULL
) STRICT;

CREATE TRIGGER rollbacks_no_update BEFORE UPDATE ON rollbacks
BEGIN SELECT RAISE(ABORT, 'rollbacks are append-only'); END;
CREATE TRIGGER rollbacks_no_delete BEFORE DELETE ON rollbacks
BEGIN SELECT RAISE(ABORT, 'rollbacks are append-only'); END;

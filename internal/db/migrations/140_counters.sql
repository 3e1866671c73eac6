-- Counter-proposals (docs/counters.md): an operator answers a pending call
-- with an edited one. The original ends as 'countered' and names its
-- counter; the counter names the original and the operator who edited it,
-- and waits for the submitting agent to accept it before its grant is
-- minted.
--
DROP TRIGGER calls_terminal;
CREATE TRIGGER calls_terminal BEFORE UPDATE OF status ON calls
WHEN OLD.status IN ('denied','expired','cancelled','redeemed','countered') AND NEW.status <> OLD.status
   OR (OLD.status = 'approved' AND NEW.status NOT IN ('approved','redeemed'))
BEGIN
    SELECT RAISE(ABORT, 'countersign: terminal call status cannot change');
END;

ALTER TABLE calls ADD COLUMN countered_by TEXT;      -- on the original: its counter's id
ALTER TABLE calls ADD COLUMN countered_from TEXT;    -- on the counter: the original's id
ALTER TABLE calls ADD COLUMN edited_by TEXT;         -- on the counter: the operator who edited it
ALTER TABLE calls ADD COLUMN accepted_at INTEGER;    -- on the counter: when its agent accepted it

CREATE UNIQUE INDEX calls_countered_from ON calls (countered_from) WHERE countered_from IS NOT NULL;

-- A counter's links never change once written.
CREATE TRIGGER calls_counter_links BEFORE UPDATE OF countered_by, countered_from, edited_by ON calls
WHEN (OLD.countered_by IS NOT NULL AND NEW.countered_by IS NOT OLD.countered_by)
   OR NEW.countered_from IS NOT OLD.countered_from OR NEW.edited_by IS NOT OLD.edited_by
BEGIN
    SELECT RAISE(ABORT, 'countersign: a counter-proposal''s links cannot change');
END;

-- SQLite cannot alter a CHECK constraint in place. Widening the status list
-- changes no stored row, so the table's recorded definition is rewritten
-- (the documented procedure for loosening a constraint), last, after every
-- ALTER TABLE; the migration runner then bumps the schema version so that
-- every connection rereads it.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
   SET sql = replace(sql, '''cancelled'',''redeemed''))', '''cancelled'',''redeemed'',''countered''))')
 WHERE type = 'table' AND name = 'calls';
PRAGMA writable_schema = OFF;

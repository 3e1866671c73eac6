-- Rules and the kill switch.

-- The definition digest of the tool a call was submitted under. Approval
-- and redemption refuse the call (tool_changed) once the tool's current
-- definition digest differs; calls stored before this column existed have
-- '' and are refused the same way.
ALTER TABLE calls ADD COLUMN tool_digest TEXT NOT NULL DEFAULT '';

-- A freeze stops every approval (by a person or a rule) and every
-- redemption of the calls it matches: tool '' matches every tool, actor ''
-- every actor. It is checked inside the approve and redeem transactions, so
-- it holds at once for every server on this database.
CREATE TABLE freezes (
    id         INTEGER PRIMARY KEY,
    tool       TEXT NOT NULL DEFAULT '',
    actor      TEXT NOT NULL DEFAULT '',
    reason     TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,       -- unix milliseconds
    lifted_by  TEXT,
    lifted_at  INTEGER
) STRICT;
CREATE INDEX freezes_active ON freezes (tool, actor) WHERE lifted_at IS NULL;

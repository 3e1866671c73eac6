-- Delegations (docs/team.md): a person lends their approver standing to
-- another for a window. One that ran out, or whose account was disabled,
-- is read as ended; ended_at is set only when a person ended it, and an
-- ended delegation never changes again.
CREATE TABLE delegations (
    id         TEXT PRIMARY KEY,                -- dlg_ and a sortable random id
    delegator  TEXT NOT NULL,
    delegate   TEXT NOT NULL CHECK (delegate <> delegator),
    given_by   TEXT NOT NULL,
    given_at   INTEGER NOT NULL,                -- unix milliseconds
    until      INTEGER NOT NULL CHECK (until > given_at),
    ended_at   INTEGER,
    end_reason TEXT,
    ended_by   TEXT,
    CHECK ((ended_at IS NULL) = (end_reason IS NULL) AND (ended_at IS NULL) = (ended_by IS NULL))
) STRICT;

-- A decision looks up the live delegation of (delegator, delegate);
-- giving one counts the live ones of each person.
CREATE INDEX delegations_pair ON delegations (delegator, delegate, until) WHERE ended_at IS NULL;
CREATE INDEX delegations_delegate ON delegations (delegate, until) WHERE ended_at IS NULL;

CREATE TRIGGER delegations_ended_final BEFORE UPDATE ON delegations WHEN OLD.ended_at IS NOT NULL
BEGIN SELECT RAISE(ABORT, 'an ended delegation is final'); END;
CREATE TRIGGER delegations_no_delete BEFORE DELETE ON delegations
BEGIN SELECT RAISE(ABORT, 'delegations are kept'); END;

-- The person on whose behalf an approval was given, through a delegation;
-- '' for an approval with the approver's own standing.
ALTER TABLE approvals ADD COLUMN behalf TEXT NOT NULL DEFAULT '';

-- Escalation tiers (docs/team.md): a pending call whose tool names tiers
-- has a row here while a tier is still to come, due when the next one is
-- reached. The tiers, how many were reached, and the approvers they added
-- are kept with the call (its approvers column).
CREATE TABLE escalations (
    call_id TEXT PRIMARY KEY REFERENCES calls (id),
    due_at  INTEGER NOT NULL                  -- unix milliseconds
) STRICT;
CREATE INDEX escalations_due ON escalations (due_at);

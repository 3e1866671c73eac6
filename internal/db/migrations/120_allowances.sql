-- Allowances: an operator's bounded, standing approval of calls like one
-- pending call (docs/allowances.md). The scope is kept as the canonical
-- bytes its digest was taken over; uses are counted by the statement that
-- makes them (used < uses), and an allowance that has ended never changes
-- again.
CREATE TABLE allowances (
    id                TEXT PRIMARY KEY,        -- alw_ and a sortable random id
    actor             TEXT NOT NULL,
    audience          TEXT NOT NULL,
    tool              TEXT NOT NULL,
    tool_digest       TEXT NOT NULL,           -- the definition the base call was made under
    base_call         TEXT NOT NULL REFERENCES calls (id),
    base_digest       TEXT NOT NULL,
    scope             BLOB NOT NULL,           -- canonical JSON of the materialised scope
    scope_digest      TEXT NOT NULL,
    uses              INTEGER NOT NULL CHECK (uses >= 1),
    used              INTEGER NOT NULL DEFAULT 0 CHECK (used >= 0 AND used <= uses),
    once_per_call     INTEGER NOT NULL CHECK (once_per_call IN (0, 1)),
    until             INTEGER NOT NULL,        -- unix milliseconds
    giver             TEXT NOT NULL,
    confirmers        TEXT NOT NULL,           -- JSON array of account names, the giver first
    confirmers_needed INTEGER NOT NULL CHECK (confirmers_needed >= 1),
    given_at          INTEGER NOT NULL,
    ended_at          INTEGER,
    end_reason        TEXT CHECK (end_reason IN ('revoked','tool_changed','confirmer_disabled','expired','used_up')),
    ended_by          TEXT,
    CHECK ((ended_at IS NULL) = (end_reason IS NULL) AND (ended_at IS NULL) = (ended_by IS NULL))
) STRICT;

-- Submission looks up the allowances of (actor, audience, tool) that have
-- not ended; giving one counts the live ones of the tool and of the giver.
CREATE INDEX allowances_open ON allowances (actor, audience, tool, given_at) WHERE ended_at IS NULL;
CREATE INDEX allowances_open_tool ON allowances (tool) WHERE ended_at IS NULL;
CREATE INDEX allowances_open_giver ON allowances (giver) WHERE ended_at IS NULL;

CREATE TRIGGER allowances_ended_final BEFORE UPDATE ON allowances WHEN OLD.ended_at IS NOT NULL
BEGIN SELECT RAISE(ABORT, 'an ended allowance is final'); END;
CREATE TRIGGER allowances_no_delete BEFORE DELETE ON allowances
BEGIN SELECT RAISE(ABORT, 'allowances are kept'); END;

-- One row per call an allowance approved. once_digest is the call's digest
-- when the allowance approves each distinct call once, else NULL, so that
-- the unique index lets such an allowance approve a digest at most once.
-- Revocation finds here the grants the allowance minted.
CREATE TABLE allowance_uses (
    allowance_id TEXT NOT NULL REFERENCES allowances (id),
    call_id      TEXT NOT NULL REFERENCES calls (id),
    digest       TEXT NOT NULL,
    once_digest  TEXT CHECK (once_digest IS NULL OR once_digest = digest),
    used_at      INTEGER NOT NULL,
    PRIMARY KEY (allowance_id, call_id)
) STRICT;

CREATE UNIQUE INDEX allowance_uses_once ON allowance_uses (allowance_id, once_digest);

CREATE TRIGGER allowance_uses_no_update BEFORE UPDATE ON allowance_uses
BEGIN SELECT RAISE(ABORT, 'allowance uses are final'); END;
CREATE TRIGGER allowance_uses_no_delete BEFORE DELETE ON allowance_uses
BEGIN SELECT RAISE(ABORT, 'allowance uses are final'); END;

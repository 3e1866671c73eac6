-- Allowances (PostgreSQL; mirrors the SQLite migration of the same number):
-- an operator's bounded, standing approval of calls like one pending call
-- (docs/allowances.md). The scope is kept as the canonical bytes its digest
-- was taken over; uses are counted by the statement that makes them
-- (used < uses), and an allowance that has ended never changes again.
CREATE TABLE allowances (
    id                TEXT COLLATE "C" PRIMARY KEY,     -- alw_ and a sortable random id
    actor             TEXT COLLATE "C" NOT NULL,
    audience          TEXT COLLATE "C" NOT NULL,
    tool              TEXT COLLATE "C" NOT NULL,
    tool_digest       TEXT COLLATE "C" NOT NULL,        -- the definition the base call was made under
    base_call         TEXT COLLATE "C" NOT NULL REFERENCES calls (id),
    base_digest       TEXT COLLATE "C" NOT NULL,
    scope             BYTEA NOT NULL,                   -- canonical JSON of the materialised scope
    scope_digest      TEXT COLLATE "C" NOT NULL,
    uses              INTEGER NOT NULL CHECK (uses >= 1),
    used              INTEGER NOT NULL DEFAULT 0 CHECK (used >= 0 AND used <= uses),
    once_per_call     BOOLEAN NOT NULL,
    until             BIGINT NOT NULL,                  -- unix milliseconds
    giver             TEXT COLLATE "C" NOT NULL,
    confirmers        TEXT COLLATE "C" NOT NULL,        -- JSON array of account names, the giver first
    confirmers_needed INTEGER NOT NULL CHECK (confirmers_needed >= 1),
    given_at          BIGINT NOT NULL,
    ended_at          BIGINT,
    end_reason        TEXT COLLATE "C" CHECK (end_reason IN ('revoked','tool_changed','confirmer_disabled','expired','used_up')),
    ended_by          TEXT COLLATE "C",
    CHECK ((ended_at IS NULL) = (end_reason IS NULL) AND (ended_at IS NULL) = (ended_by IS NULL))
);

-- Submission looks up the allowances of (actor, audience, tool) that have
-- not ended; giving one counts the live ones of the tool and of the giver.
CREATE INDEX allowances_open ON allowances (actor, audience, tool, given_at) WHERE ended_at IS NULL;
CREATE INDEX allowances_open_tool ON allowances (tool) WHERE ended_at IS NULL;
CREATE INDEX allowances_open_giver ON allowances (giver) WHERE ended_at IS NULL;

CREATE FUNCTION allowances_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'allowances are kept';
    END IF;
    IF OLD.ended_at IS NOT NULL THEN
        RAISE EXCEPTION 'an ended allowance is final';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER allowances_final BEFORE UPDATE OR DELETE ON allowances
    FOR EACH ROW EXECUTE FUNCTION allowances_final();

-- One row per call an allowance approved. once_digest is the call's digest
-- when the allowance approves each distinct call once, else NULL, so that
-- the unique index lets such an allowance approve a digest at most once.
-- Revocation finds here the grants the allowance minted.
CREATE TABLE allowance_uses (
    allowance_id TEXT COLLATE "C" NOT NULL REFERENCES allowances (id),
    call_id      TEXT COLLATE "C" NOT NULL REFERENCES calls (id),
    digest       TEXT COLLATE "C" NOT NULL,
    once_digest  TEXT COLLATE "C" CHECK (once_digest IS NULL OR once_digest = digest),
    used_at      BIGINT NOT NULL,
    PRIMARY KEY (allowance_id, call_id)
);

CREATE UNIQUE INDEX allowance_uses_once ON allowance_uses (allowance_id, once_digest);

CREATE FUNCTION allowance_uses_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'allowance uses are final'; END $$;
CREATE TRIGGER allowance_uses_no_change BEFORE UPDATE OR DELETE ON allowance_uses
    FOR EACH ROW EXECUTE FUNCTION allowance_uses_final();

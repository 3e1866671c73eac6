-- Delegations (PostgreSQL; mirrors the SQLite migration of the same
-- number, docs/team.md): a person lends their approver standing to
-- another for a window. One that ran out, or whose account was disabled,
-- is read as ended; ended_at is set only when a person ended it, and an
-- ended delegation never changes again.
CREATE TABLE delegations (
    id         TEXT COLLATE "C" PRIMARY KEY,    -- dlg_ and a sortable random id
    delegator  TEXT COLLATE "C" NOT NULL,
    delegate   TEXT COLLATE "C" NOT NULL CHECK (delegate <> delegator),
    given_by   TEXT COLLATE "C" NOT NULL,
    given_at   BIGINT NOT NULL,                 -- unix milliseconds
    until      BIGINT NOT NULL CHECK (until > given_at),
    ended_at   BIGINT,
    end_reason TEXT COLLATE "C",
    ended_by   TEXT COLLATE "C",
    CHECK ((ended_at IS NULL) = (end_reason IS NULL) AND (ended_at IS NULL) = (ended_by IS NULL))
);

-- A decision looks up the live delegation of (delegator, delegate);
-- giving one counts the live ones of each person.
CREATE INDEX delegations_pair ON delegations (delegator, delegate, until) WHERE ended_at IS NULL;
CREATE INDEX delegations_delegate ON delegations (delegate, until) WHERE ended_at IS NULL;

CREATE FUNCTION delegations_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'delegations are kept';
    END IF;
    IF OLD.ended_at IS NOT NULL THEN
        RAISE EXCEPTION 'an ended delegation is final';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER delegations_final BEFORE UPDATE OR DELETE ON delegations
    FOR EACH ROW EXECUTE FUNCTION delegations_final();

-- The person on whose behalf an approval was given, through a delegation;
-- '' for an approval with the approver's own standing.
ALTER TABLE approvals ADD COLUMN behalf TEXT COLLATE "C" NOT NULL DEFAULT '';

-- Escalation tiers (docs/team.md): a pending call whose tool names tiers
-- has a row here while a tier is still to come, due when the next one is
-- reached. The tiers, how many were reached, and the approvers they added
-- are kept with the call (its approvers column).
CREATE TABLE escalations (
    call_id TEXT COLLATE "C" PRIMARY KEY REFERENCES calls (id),
    due_at  BIGINT NOT NULL                   -- unix milliseconds
);
CREATE INDEX escalations_due ON escalations (due_at);

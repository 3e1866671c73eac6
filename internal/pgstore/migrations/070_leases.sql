-- After redemption: the executor's lease, unknown outcomes, and a person's
-- resolution of them (PostgreSQL; mirrors the SQLite migration of the same
-- number).

-- The tool's outcome_within when the call was submitted (0 for calls stored
-- before it existed: the default applies).
ALTER TABLE calls ADD COLUMN outcome_within_ms BIGINT NOT NULL DEFAULT 0;
-- The id of the API token that redeemed the grant; only it extends the lease.
ALTER TABLE calls ADD COLUMN redeemed_by TEXT COLLATE "C";
-- When the executor's lease ends (unix milliseconds). A redeemed call with
-- no outcome by then gets the outcome 'lease_expired'.
ALTER TABLE calls ADD COLUMN lease_until BIGINT;
-- What a person found out about a call whose outcome is unknown or
-- lease_expired. The note is an operator's words (BYTEA, see 001); the
-- evidence is an http(s) URL without control characters.
ALTER TABLE calls ADD COLUMN resolution TEXT COLLATE "C" CHECK (resolution IN ('executed','not_executed'));
ALTER TABLE calls ADD COLUMN resolved_by TEXT COLLATE "C";
ALTER TABLE calls ADD COLUMN resolved_channel TEXT COLLATE "C";
ALTER TABLE calls ADD COLUMN resolution_note BYTEA;
ALTER TABLE calls ADD COLUMN resolution_evidence TEXT COLLATE "C";
ALTER TABLE calls ADD COLUMN resolved_at BIGINT;

-- Calls redeemed before leases existed and never reported get the default
-- lease from their redemption: nobody knows whether they ran, so they wait
-- for a person like any other.
UPDATE calls SET lease_until = redeemed_at + 300000
    WHERE status = 'redeemed' AND outcome_status IS NULL AND redeemed_at IS NOT NULL;

CREATE INDEX calls_lease ON calls (lease_until) WHERE status = 'redeemed' AND outcome_status IS NULL;
CREATE INDEX calls_unresolved ON calls (outcome_at, seq)
    WHERE status = 'redeemed' AND outcome_status IN ('unknown','lease_expired') AND resolution IS NULL;
CREATE INDEX calls_unresolved_created ON calls (created_at, seq)
    WHERE status = 'redeemed' AND outcome_status IN ('unknown','lease_expired') AND resolution IS NULL;
CREATE INDEX calls_outcome_status_created ON calls (outcome_status, created_at, seq);
CREATE INDEX calls_open_created ON calls (created_at, seq) WHERE status = 'redeemed' AND outcome_status IS NULL;
CREATE INDEX calls_resolved_created ON calls (created_at, seq) WHERE resolution IS NOT NULL;

-- A reported outcome is final: only the console's lease_expired gives way,
-- to the executor's late report. A resolution is recorded once and never
-- changes.
CREATE FUNCTION calls_outcome_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.outcome_status IS NOT NULL AND OLD.outcome_status <> 'lease_expired'
       AND (NEW.outcome_status IS DISTINCT FROM OLD.outcome_status OR NEW.outcome_detail IS DISTINCT FROM OLD.outcome_detail
            OR NEW.outcome_at IS DISTINCT FROM OLD.outcome_at) THEN
        RAISE EXCEPTION 'countersign: a reported outcome cannot change';
    END IF;
    IF OLD.resolution IS NOT NULL
       AND (NEW.resolution IS DISTINCT FROM OLD.resolution OR NEW.resolved_by IS DISTINCT FROM OLD.resolved_by
            OR NEW.resolved_channel IS DISTINCT FROM OLD.resolved_channel
            OR NEW.resolution_note IS DISTINCT FROM OLD.resolution_note
            OR NEW.resolution_evidence IS DISTINCT FROM OLD.resolution_evidence
            OR NEW.resolved_at IS DISTINCT FROM OLD.resolved_at) THEN
        RAISE EXCEPTION 'countersign: a resolution cannot change';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER calls_outcome_final BEFORE UPDATE ON calls
    FOR EACH ROW EXECUTE FUNCTION calls_outcome_final();

-- After redemption: the executor's lease, unknown outcomes, and a person's
-- resolution of them.

-- The tool's outcome_within when the call was submitted (0 for calls stored
-- before it existed: the default applies).
ALTER TABLE calls ADD COLUMN outcome_within_ms INTEGER NOT NULL DEFAULT 0;
-- The id of the API token that redeemed the grant; only it extends the lease.
ALTER TABLE calls ADD COLUMN redeemed_by TEXT;
-- When the executor's lease ends (unix milliseconds). A redeemed call with
-- no outcome by then gets the outcome 'lease_expired'.
ALTER TABLE calls ADD COLUMN lease_until INTEGER;
-- What a person found out about a call whose outcome is unknown or
-- lease_expired.
ALTER TABLE calls ADD COLUMN resolution TEXT CHECK (resolution IN ('executed','not_executed'));
ALTER TABLE calls ADD COLUMN resolved_by TEXT;
ALTER TABLE calls ADD COLUMN resolved_channel TEXT;
ALTER TABLE calls ADD COLUMN resolution_note TEXT;
ALTER TABLE calls ADD COLUMN resolution_evidence TEXT;
ALTER TABLE calls ADD COLUMN resolved_at INTEGER;

-- Calls redeemed before leases existed and never reported get the default
-- lease from their redemption: nobody knows whether they ran, so they wait
-- for a person like any other.
UPDATE calls SET lease_until = redeemed_at + 300000
    WHERE status = 'redeemed' AND outcome_status IS NULL AND redeemed_at IS NOT NULL;

-- The lease loop wakes at the earliest lease end and lists the lapsed ones.
CREATE INDEX calls_lease ON calls (lease_until) WHERE status = 'redeemed' AND outcome_status IS NULL;
-- The Unresolved view, oldest outcome first, and the history's unresolved
-- filter in history order.
CREATE INDEX calls_unresolved ON calls (outcome_at)
    WHERE status = 'redeemed' AND outcome_status IN ('unknown','lease_expired') AND resolution IS NULL;
CREATE INDEX calls_unresolved_created ON calls (created_at)
    WHERE status = 'redeemed' AND outcome_status IN ('unknown','lease_expired') AND resolution IS NULL;
CREATE INDEX calls_outcome_status_created ON calls (outcome_status, created_at);
CREATE INDEX calls_open_created ON calls (created_at) WHERE status = 'redeemed' AND outcome_status IS NULL;
CREATE INDEX calls_resolved_created ON calls (created_at) WHERE resolution IS NOT NULL;

-- A reported outcome is final: only the console's lease_expired gives way,
-- to the executor's late report.
CREATE TRIGGER calls_outcome_final BEFORE UPDATE OF outcome_status, outcome_detail, outcome_at ON calls
WHEN OLD.outcome_status IS NOT NULL AND OLD.outcome_status <> 'lease_expired'
    AND (NEW.outcome_status IS NOT OLD.outcome_status OR NEW.outcome_detail IS NOT OLD.outcome_detail
         OR NEW.outcome_at IS NOT OLD.outcome_at)
BEGIN
    SELECT RAISE(ABORT, 'countersign: a reported outcome cannot change');
END;

-- A resolution is recorded once and never changes.
CREATE TRIGGER calls_resolution_final BEFORE UPDATE OF resolution, resolved_by, resolved_channel, resolution_note,
    resolution_evidence, resolved_at ON calls
WHEN OLD.resolution IS NOT NULL
    AND (NEW.resolution IS NOT OLD.resolution OR NEW.resolved_by IS NOT OLD.resolved_by
         OR NEW.resolved_channel IS NOT OLD.resolved_channel OR NEW.resolution_note IS NOT OLD.resolution_note
         OR NEW.resolution_evidence IS NOT OLD.resolution_evidence OR NEW.resolved_at IS NOT OLD.resolved_at)
BEGIN
    SELECT RAISE(ABORT, 'countersign: a resolution cannot change');
END;

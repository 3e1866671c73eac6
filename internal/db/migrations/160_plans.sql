-- Plans (docs/plans.md): an agent's declared list of exact calls that a
-- person approves once. Each item is a call with plan_id and plan_index; an
-- item is never in the queue on its own and is decided only through its
-- plan. A plan that ended (denied, cancelled, expired) never changes again.
CREATE TABLE plans (
    id                 TEXT PRIMARY KEY,        -- pln_ and a sortable random id
    actor              TEXT NOT NULL,
    audience           TEXT NOT NULL,
    submitted_by       TEXT NOT NULL,           -- the API token that submitted it
    rationale          BLOB NOT NULL,
    ordered            INTEGER NOT NULL CHECK (ordered IN (0, 1)),
    digest             TEXT NOT NULL,
    items              INTEGER NOT NULL CHECK (items BETWEEN 1 AND 50),
    approvals_required INTEGER NOT NULL CHECK (approvals_required >= 1),
    max_for_ms         INTEGER NOT NULL CHECK (max_for_ms > 0),
    status             TEXT NOT NULL CHECK (status IN ('pending','approved','denied','cancelled','expired')),
    created_at         INTEGER NOT NULL,
    decide_by          INTEGER NOT NULL,
    decided_at         INTEGER,
    decided_by         TEXT,
    reason             BLOB,
    valid_until        INTEGER,                 -- set when approved
    CHECK ((status = 'approved') = (valid_until IS NOT NULL) OR status IN ('cancelled','expired'))
) STRICT;

-- Submission counts a token's pending plans; the console lists them and the
-- expiry sweep finds those whose deadline passed.
CREATE INDEX plans_pending ON plans (submitted_by, decide_by) WHERE status = 'pending';
CREATE INDEX plans_pending_all ON plans (decide_by, id) WHERE status = 'pending';
-- The expiry sweep finds approved plans whose time ran out.
CREATE INDEX plans_approved ON plans (valid_until) WHERE status = 'approved';

CREATE TRIGGER plans_final BEFORE UPDATE ON plans WHEN OLD.status IN ('denied','cancelled','expired')
BEGIN SELECT RAISE(ABORT, 'countersign: an ended plan is final'); END;
CREATE TRIGGER plans_no_delete BEFORE DELETE ON plans
BEGIN SELECT RAISE(ABORT, 'countersign: plans are kept'); END;

ALTER TABLE calls ADD COLUMN plan_id TEXT REFERENCES plans (id);
ALTER TABLE calls ADD COLUMN plan_index INTEGER;

CREATE UNIQUE INDEX calls_plan_items ON calls (plan_id, plan_index) WHERE plan_id IS NOT NULL;

-- An item's plan never changes once written.
CREATE TRIGGER calls_plan_link BEFORE UPDATE OF plan_id, plan_index ON calls
WHEN NEW.plan_id IS NOT OLD.plan_id OR NEW.plan_index IS NOT OLD.plan_index
BEGIN
    SELECT RAISE(ABORT, 'countersign: a plan item''s plan cannot change');
END;

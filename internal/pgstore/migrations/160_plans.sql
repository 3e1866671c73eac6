-- Plans (docs/plans.md): an agent's declared list of exact calls that a
-- person approves once. Each item is a call with plan_id and plan_index; an
-- item is never in the queue on its own and is decided only through its
-- plan. A plan that ended (denied, cancelled, expired) never changes again.
CREATE TABLE plans (
    id                 TEXT COLLATE "C" PRIMARY KEY,
    actor              TEXT COLLATE "C" NOT NULL,
    audience           TEXT COLLATE "C" NOT NULL,
    submitted_by       TEXT COLLATE "C" NOT NULL,
    rationale          BYTEA NOT NULL,
    ordered            BOOLEAN NOT NULL,
    digest             TEXT COLLATE "C" NOT NULL,
    items              INTEGER NOT NULL CHECK (items BETWEEN 1 AND 50),
    approvals_required INTEGER NOT NULL CHECK (approvals_required >= 1),
    max_for_ms         BIGINT NOT NULL CHECK (max_for_ms > 0),
    status             TEXT COLLATE "C" NOT NULL CHECK (status IN ('pending','approved','denied','cancelled','expired')),
    created_at         BIGINT NOT NULL,
    decide_by          BIGINT NOT NULL,
    decided_at         BIGINT,
    decided_by         TEXT COLLATE "C",
    reason             BYTEA,
    valid_until        BIGINT,
    CHECK ((status = 'approved') = (valid_until IS NOT NULL) OR status IN ('cancelled','expired'))
);

CREATE INDEX plans_pending ON plans (submitted_by, decide_by) WHERE status = 'pending';
CREATE INDEX plans_pending_all ON plans (decide_by, id) WHERE status = 'pending';
-- The expiry sweep finds approved plans whose time ran out.
CREATE INDEX plans_approved ON plans (valid_until) WHERE status = 'approved';

CREATE FUNCTION plans_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'countersign: plans are kept';
    END IF;
    IF OLD.status IN ('denied','cancelled','expired') THEN
        RAISE EXCEPTION 'countersign: an ended plan is final';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER plans_final BEFORE UPDATE OR DELETE ON plans
    FOR EACH ROW EXECUTE FUNCTION plans_final();

ALTER TABLE calls ADD COLUMN plan_id TEXT COLLATE "C" REFERENCES plans (id);
ALTER TABLE calls ADD COLUMN plan_index INTEGER;

CREATE UNIQUE INDEX calls_plan_items ON calls (plan_id, plan_index) WHERE plan_id IS NOT NULL;

-- An item's plan never changes once written.
CREATE FUNCTION calls_plan_link() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.plan_id IS DISTINCT FROM OLD.plan_id OR NEW.plan_index IS DISTINCT FROM OLD.plan_index THEN
        RAISE EXCEPTION 'countersign: a plan item''s plan cannot change';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER calls_plan_link BEFORE UPDATE OF plan_id, plan_index ON calls
    FOR EACH ROW EXECUTE FUNCTION calls_plan_link();

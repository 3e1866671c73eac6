-- Counter-proposals (docs/counters.md): an operator answers a pending call
-- with an edited one. The original ends as 'countered' and names its
-- counter; the counter names the original and the operator who edited it,
-- and waits for the submitting agent to accept it before its grant is
-- minted.
ALTER TABLE calls DROP CONSTRAINT calls_status_check;
ALTER TABLE calls ADD CONSTRAINT calls_status_check
    CHECK (status IN ('pending','approved','denied','expired','cancelled','redeemed','countered'));

CREATE OR REPLACE FUNCTION calls_terminal() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.status IN ('denied','expired','cancelled','redeemed','countered') AND NEW.status <> OLD.status)
       OR (OLD.status = 'approved' AND NEW.status NOT IN ('approved','redeemed')) THEN
        RAISE EXCEPTION 'countersign: terminal call status cannot change';
    END IF;
    RETURN NEW;
END $$;

ALTER TABLE calls ADD COLUMN countered_by TEXT COLLATE "C";
ALTER TABLE calls ADD COLUMN countered_from TEXT COLLATE "C";
ALTER TABLE calls ADD COLUMN edited_by TEXT COLLATE "C";
ALTER TABLE calls ADD COLUMN accepted_at BIGINT;

CREATE UNIQUE INDEX calls_countered_from ON calls (countered_from) WHERE countered_from IS NOT NULL;

-- A counter's links never change once written.
CREATE FUNCTION calls_counter_links() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.countered_by IS NOT NULL AND NEW.countered_by IS DISTINCT FROM OLD.countered_by)
       OR NEW.countered_from IS DISTINCT FROM OLD.countered_from OR NEW.edited_by IS DISTINCT FROM OLD.edited_by THEN
        RAISE EXCEPTION 'countersign: a counter-proposal''s links cannot change';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER calls_counter_links BEFORE UPDATE OF countered_by, countered_from, edited_by ON calls
    FOR EACH ROW EXECUTE FUNCTION calls_counter_links();

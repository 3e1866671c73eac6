-- The login throttle keeps at most a fixed number of keys (PostgreSQL;
-- mirrors the SQLite migration of the same number). A throttled key (one
-- that has used its free failures) is never evicted to make room, only
-- forgotten at forget_at; other keys are evicted fewest failures first,
-- then oldest. login_strikes_size keeps the number of rows, so that
-- checking the cap reads one row instead of counting them.
ALTER TABLE login_strikes ADD COLUMN throttled BOOLEAN NOT NULL DEFAULT false;
-- Rows kept from before: a key past the smallest free allowance (5
-- failures) counts as throttled, so none is evicted early.
UPDATE login_strikes SET throttled = true WHERE failures > 5;
CREATE INDEX login_strikes_evict ON login_strikes (failures, last_at, key) WHERE NOT throttled;

CREATE TABLE login_strikes_size (
    one  INTEGER PRIMARY KEY CHECK (one = 1),
    rows BIGINT NOT NULL
);
INSERT INTO login_strikes_size (one, rows) SELECT 1, COUNT(*) FROM login_strikes;
-- Statement triggers over the transition tables: a prune of many rows
-- updates the count once. The insert trigger of an upsert sees only the
-- rows it inserted.
CREATE FUNCTION login_strikes_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE login_strikes_size SET rows = rows + (SELECT COUNT(*) FROM added);
    ELSE
        UPDATE login_strikes_size SET rows = rows - (SELECT COUNT(*) FROM removed);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER login_strikes_added AFTER INSERT ON login_strikes
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION login_strikes_count();
CREATE TRIGGER login_strikes_removed AFTER DELETE ON login_strikes
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION login_strikes_count();

-- The login throttle keeps at most a fixed number of keys
-- (account.Service.ThrottleRows). A throttled key (one that has used its
-- free failures, so every further attempt waits) is never evicted to make
-- room, only forgotten at forget_at; other keys are evicted fewest failures
-- first, then oldest. login_strikes_size keeps the number of rows, so that
-- checking the cap reads one row instead of counting them.
ALTER TABLE login_strikes ADD COLUMN throttled INTEGER NOT NULL DEFAULT 0 CHECK (throttled IN (0, 1));
-- Rows kept from before: a key past the smallest free allowance (5
-- failures) counts as throttled, so none is evicted early.
UPDATE login_strikes SET throttled = 1 WHERE failures > 5;
CREATE INDEX login_strikes_evict ON login_strikes (failures, last_at, key) WHERE throttled = 0;

CREATE TABLE login_strikes_size (
    one  INTEGER PRIMARY KEY CHECK (one = 1),
    rows INTEGER NOT NULL
) STRICT;
INSERT INTO login_strikes_size (one, rows) SELECT 1, COUNT(*) FROM login_strikes;
-- An upsert that updates fires no INSERT trigger, so only new keys count.
CREATE TRIGGER login_strikes_added AFTER INSERT ON login_strikes
BEGIN
    UPDATE login_strikes_size SET rows = rows + 1;
END;
CREATE TRIGGER login_strikes_removed AFTER DELETE ON login_strikes
BEGIN
    UPDATE login_strikes_size SET rows = rows - 1;
END;

-- The notification channels the rule that matched a call asked for
-- (mirrors the SQLite migration of the same number).
ALTER TABLE calls ADD COLUMN notify TEXT NOT NULL DEFAULT '';

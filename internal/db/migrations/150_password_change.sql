-- A local account whose password an administrator set must choose its own
-- at its next login (1) before it may do anything else; the account's own
-- change clears the mark (0).
ALTER TABLE users ADD COLUMN must_change_password INTEGER NOT NULL DEFAULT 0 CHECK (must_change_password IN (0, 1));

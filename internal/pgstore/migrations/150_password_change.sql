-- A local account whose password an administrator set must choose its own
-- at its next login (PostgreSQL; mirrors the SQLite migration of the same
-- number).
ALTER TABLE users ADD COLUMN must_change_password INTEGER NOT NULL DEFAULT 0 CHECK (must_change_password IN (0, 1));

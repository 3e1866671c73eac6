-- A oneshot may belong to an account (a passkey prompt does), which keeps
-- at most a few under way at once (PostgreSQL; mirrors the SQLite
-- migration of the same number).
ALTER TABLE oneshots ADD COLUMN owner TEXT COLLATE "C" NOT NULL DEFAULT '';
CREATE INDEX oneshots_owner ON oneshots (kind, owner, expires_at);

-- A oneshot may belong to an account (a passkey prompt does), which keeps
-- at most a few under way at once: a new one beyond the bound replaces the
-- account's oldest (account.Service.Oneshots, PutOwned).
ALTER TABLE oneshots ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE INDEX oneshots_owner ON oneshots (kind, owner, expires_at);

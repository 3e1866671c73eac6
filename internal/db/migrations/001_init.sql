-- Countersign schema, version 1.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;

CREATE TABLE calls (
    seq                INTEGER PRIMARY KEY,
    id                 TEXT NOT NULL UNIQUE,
    actor              TEXT NOT NULL,
    audience           TEXT NOT NULL,
    tool               TEXT NOT NULL,
    target             TEXT NOT NULL,
    args               TEXT NOT NULL,           -- canonical JSON of every argument
    rationale          TEXT NOT NULL DEFAULT '',
    envelope           BLOB NOT NULL,           -- canonical envelope bytes that digest hashes
    digest             TEXT NOT NULL,
    status             TEXT NOT NULL CHECK (status IN ('pending','approved','denied','expired','cancelled','redeemed')),
    approvals_required INTEGER NOT NULL,
    grant_ttl_ms       INTEGER NOT NULL,
    created_at         INTEGER NOT NULL,        -- unix milliseconds
    decide_by          INTEGER NOT NULL,
    decided_at         INTEGER,
    denied_by          TEXT,
    denied_channel     TEXT,
    deny_reason        TEXT,
    grant_token        TEXT,
    grant_jti          TEXT UNIQUE,
    grant_kid          TEXT,
    grant_expires_at   INTEGER,
    redeemed_at        INTEGER,
    outcome_status     TEXT,
    outcome_detail     TEXT,
    outcome_at         INTEGER
) STRICT;

CREATE INDEX calls_pending ON calls (decide_by) WHERE status = 'pending';
CREATE INDEX calls_actor_digest ON calls (actor, digest, seq);

-- Terminal states never change: enforced below the application as well.
CREATE TRIGGER calls_terminal BEFORE UPDATE OF status ON calls
WHEN OLD.status IN ('denied','expired','cancelled','redeemed') AND NEW.status <> OLD.status
   OR (OLD.status = 'approved' AND NEW.status NOT IN ('approved','redeemed'))
BEGIN
    SELECT RAISE(ABORT, 'countersign: terminal call status cannot change');
END;

CREATE TABLE approvals (
    call_id  TEXT NOT NULL REFERENCES calls (id),
    operator TEXT NOT NULL,
    channel  TEXT NOT NULL,
    at       INTEGER NOT NULL,
    PRIMARY KEY (call_id, operator)
) STRICT;

-- The nonce ledger: a grant's jti is accepted at most once.
CREATE TABLE redemptions (
    jti     TEXT PRIMARY KEY,
    call_id TEXT NOT NULL REFERENCES calls (id),
    at      INTEGER NOT NULL
) STRICT;

CREATE TABLE retries (
    actor      TEXT NOT NULL,
    tool       TEXT NOT NULL,
    count      INTEGER NOT NULL,
    blocked_at INTEGER,
    PRIMARY KEY (actor, tool)
) STRICT;

CREATE TABLE audit (
    seq       INTEGER PRIMARY KEY,
    time      TEXT NOT NULL,
    kind      TEXT NOT NULL,
    call_id   TEXT NOT NULL,
    principal TEXT NOT NULL,
    channel   TEXT NOT NULL,
    details   TEXT NOT NULL,   -- canonical JSON
    prev_hash TEXT NOT NULL,
    hash      TEXT NOT NULL
) STRICT;
CREATE INDEX audit_call ON audit (call_id, seq);

CREATE TABLE tokens (
    id         TEXT PRIMARY KEY,
    hash       TEXT NOT NULL UNIQUE,   -- SHA-256 of the secret
    actor      TEXT NOT NULL,
    audience   TEXT NOT NULL,
    note       TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
) STRICT;

-- The audit trail is append-only.
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN
    SELECT RAISE(ABORT, 'countersign: audit entries cannot be changed');
END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
BEGIN
    SELECT RAISE(ABORT, 'countersign: audit entries cannot be deleted');
END;

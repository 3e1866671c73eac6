-- Countersign schema, version 3: signed audit checkpoints, and the indexes
-- that answer history queries and audit exports quickly at scale.

-- A checkpoint is a signed statement that audit entry seq had hash head at
-- time. The signed message is "countersign/v1/checkpoint:" followed by the
-- RFC 8785 bytes of {"head","seq","time"} (see docs/audit.md).
CREATE TABLE checkpoints (
    seq        INTEGER PRIMARY KEY,   -- the audit entry covered
    head       TEXT NOT NULL,         -- that entry's hash
    time       TEXT NOT NULL,         -- when it was signed (audit time format)
    kid        TEXT NOT NULL,         -- first 16 hex digits of SHA-256(public key)
    public_key TEXT NOT NULL,         -- raw Ed25519 public key, base64url
    signature  TEXT NOT NULL          -- raw Ed25519 signature, base64url
) STRICT;

CREATE TRIGGER checkpoints_no_update BEFORE UPDATE ON checkpoints
BEGIN
    SELECT RAISE(ABORT, 'countersign: audit checkpoints cannot be changed');
END;
CREATE TRIGGER checkpoints_no_delete BEFORE DELETE ON checkpoints
BEGIN
    SELECT RAISE(ABORT, 'countersign: audit checkpoints cannot be deleted');
END;

-- Export by time: the first entry at or after a time, the last before one.
CREATE INDEX audit_time ON audit (time);

-- History pages list calls newest first, by (created_at, seq); each filter
-- has an index in that order (seq, the rowid, ends every index).
CREATE INDEX calls_created ON calls (created_at);
CREATE INDEX calls_actor_created ON calls (actor, created_at);
CREATE INDEX calls_tool_created ON calls (tool, created_at);
CREATE INDEX calls_status_created ON calls (status, created_at);
CREATE INDEX calls_digest ON calls (digest);
-- The two pairings auditors ask for most: what an agent did with one tool,
-- and how an agent's calls ended.
CREATE INDEX calls_actor_tool_created ON calls (actor, tool, created_at);
CREATE INDEX calls_actor_status_created ON calls (actor, status, created_at);

-- Who decided each call, and through which channel: one row per operator
-- and channel that approved or denied it, with the call's created_at copied
-- so that the operator and channel filters read in history order. Kept by
-- triggers in the same transaction as the approval or denial.
CREATE TABLE call_deciders (
    operator   TEXT NOT NULL,
    channel    TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    call_seq   INTEGER NOT NULL REFERENCES calls (seq),
    PRIMARY KEY (operator, channel, created_at, call_seq)
) STRICT, WITHOUT ROWID;
CREATE INDEX call_deciders_operator ON call_deciders (operator, created_at, call_seq);
CREATE INDEX call_deciders_channel ON call_deciders (channel, created_at, call_seq);

CREATE TRIGGER approvals_deciders AFTER INSERT ON approvals
BEGIN
    INSERT OR IGNORE INTO call_deciders (operator, channel, created_at, call_seq)
        SELECT NEW.operator, NEW.channel, c.created_at, c.seq FROM calls c WHERE c.id = NEW.call_id;
END;

CREATE TRIGGER calls_denied_deciders AFTER UPDATE OF denied_by ON calls
WHEN NEW.denied_by IS NOT NULL
BEGIN
    INSERT OR IGNORE INTO call_deciders (operator, channel, created_at, call_seq)
        VALUES (NEW.denied_by, COALESCE(NEW.denied_channel, ''), NEW.created_at, NEW.seq);
END;

INSERT OR IGNORE INTO call_deciders (operator, channel, created_at, call_seq)
    SELECT a.operator, a.channel, c.created_at, c.seq FROM approvals a JOIN calls c ON c.id = a.call_id;
INSERT OR IGNORE INTO call_deciders (operator, channel, created_at, call_seq)
    SELECT denied_by, COALESCE(denied_channel, ''), created_at, seq FROM calls WHERE denied_by IS NOT NULL;

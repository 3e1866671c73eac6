-- Countersign schema, version 3: signed audit checkpoints, and the indexes
-- that answer history queries and audit exports quickly at scale
-- (PostgreSQL; mirrors the SQLite migration of the same number).

-- A checkpoint is a signed statement that audit entry seq had hash head at
-- time. The signed message is "countersign/v1/checkpoint:" followed by the
-- RFC 8785 bytes of {"head","seq","time"} (see docs/audit.md).
CREATE TABLE checkpoints (
    seq        BIGINT PRIMARY KEY,    -- the audit entry covered
    head       TEXT COLLATE "C" NOT NULL,         -- that entry's hash
    time       TEXT COLLATE "C" NOT NULL,         -- when it was signed (audit time format)
    kid        TEXT COLLATE "C" NOT NULL,         -- first 16 hex digits of SHA-256(public key)
    public_key TEXT COLLATE "C" NOT NULL,         -- raw Ed25519 public key, base64url
    signature  TEXT COLLATE "C" NOT NULL          -- raw Ed25519 signature, base64url
);
CREATE TRIGGER checkpoints_no_update BEFORE UPDATE OR DELETE ON checkpoints
    FOR EACH ROW EXECUTE FUNCTION countersign_append_only();
CREATE TRIGGER checkpoints_no_truncate BEFORE TRUNCATE ON checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION countersign_append_only();

-- Export by time: the first entry at or after a time, the last before one.
CREATE INDEX audit_time ON audit (time, seq);

-- History pages list calls newest first, by (created_at, seq); each filter
-- has an index in that order.
CREATE INDEX calls_created ON calls (created_at, seq);
CREATE INDEX calls_actor_created ON calls (actor, created_at, seq);
CREATE INDEX calls_tool_created ON calls (tool, created_at, seq);
CREATE INDEX calls_status_created ON calls (status, created_at, seq);
CREATE INDEX calls_digest ON calls (digest);
CREATE INDEX calls_actor_tool_created ON calls (actor, tool, created_at, seq);
CREATE INDEX calls_actor_status_created ON calls (actor, status, created_at, seq);

-- Who decided each call, and through which channel: one row per operator
-- and channel that approved or denied it, with the call's created_at copied
-- so that the operator and channel filters read in history order. Kept by
-- triggers in the same transaction as the approval or denial.
CREATE TABLE call_deciders (
    operator   TEXT COLLATE "C" NOT NULL,
    channel    TEXT COLLATE "C" NOT NULL,
    created_at BIGINT NOT NULL,
    call_seq   BIGINT NOT NULL REFERENCES calls (seq),
    PRIMARY KEY (operator, channel, created_at, call_seq)
);
CREATE INDEX call_deciders_operator ON call_deciders (operator, created_at, call_seq);
CREATE INDEX call_deciders_channel ON call_deciders (channel, created_at, call_seq);

CREATE FUNCTION approvals_deciders() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO call_deciders (operator, channel, created_at, call_seq)
        SELECT NEW.operator, NEW.channel, c.created_at, c.seq FROM calls c WHERE c.id = NEW.call_id
        ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER approvals_deciders AFTER INSERT ON approvals
    FOR EACH ROW EXECUTE FUNCTION approvals_deciders();

CREATE FUNCTION calls_denied_deciders() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.denied_by IS NOT NULL THEN
        INSERT INTO call_deciders (operator, channel, created_at, call_seq)
            VALUES (NEW.denied_by, COALESCE(NEW.denied_channel, ''), NEW.created_at, NEW.seq)
            ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER calls_denied_deciders AFTER UPDATE OF denied_by ON calls
    FOR EACH ROW EXECUTE FUNCTION calls_denied_deciders();

INSERT INTO call_deciders (operator, channel, created_at, call_seq)
    SELECT a.operator, a.channel, c.created_at, c.seq FROM approvals a JOIN calls c ON c.id = a.call_id
    ON CONFLICT DO NOTHING;
INSERT INTO call_deciders (operator, channel, created_at, call_seq)
    SELECT denied_by, COALESCE(denied_channel, ''), created_at, seq FROM calls WHERE denied_by IS NOT NULL
    ON CONFLICT DO NOTHING;

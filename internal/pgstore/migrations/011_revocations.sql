-- Grants revoked by an operator before they were redeemed (PostgreSQL;
-- mirrors the SQLite migration of the same number).
CREATE TABLE grant_revocations (
    call_id    TEXT COLLATE "C" PRIMARY KEY REFERENCES calls (id),
    jti        TEXT COLLATE "C" NOT NULL UNIQUE,
    revoked_by TEXT COLLATE "C" NOT NULL,
    channel    TEXT COLLATE "C" NOT NULL,
    reason     BYTEA NOT NULL,                 -- an operator's words (see 001)
    revoked_at BIGINT NOT NULL                 -- unix milliseconds
);

CREATE FUNCTION grant_revocations_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'grant revocations are final'; END $$;
CREATE TRIGGER grant_revocations_no_change BEFORE UPDATE OR DELETE ON grant_revocations
FOR EACH ROW EXECUTE FUNCTION grant_revocations_final();

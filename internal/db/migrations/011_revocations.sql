-- Grants revoked by an operator before they were redeemed. The call keeps
-- its status (approved); its grant is refused at redemption (revoked), and
-- the call is shown as revoked.
CREATE TABLE grant_revocations (
    call_id    TEXT PRIMARY KEY REFERENCES calls (id),
    jti        TEXT NOT NULL UNIQUE,
    revoked_by TEXT NOT NULL,
    channel    TEXT NOT NULL,
    reason     TEXT NOT NULL,
    revoked_at INTEGER NOT NULL        -- unix milliseconds
) STRICT;

CREATE TRIGGER grant_revocations_no_update BEFORE UPDATE ON grant_revocations
BEGIN SELECT RAISE(ABORT, 'grant revocations are final'); END;
CREATE TRIGGER grant_revocations_no_delete BEFORE DELETE ON grant_revocations
BEGIN SELECT RAISE(ABORT, 'grant revocations are final'); END;

-- Who owns an agent, who may approve a tool's calls, and approvals signed
-- by passkeys (PostgreSQL; mirrors the SQLite migration of the same number).

ALTER TABLE tokens ADD COLUMN owners TEXT COLLATE "C" NOT NULL DEFAULT '[]';
ALTER TABLE calls ADD COLUMN owners TEXT COLLATE "C" NOT NULL DEFAULT '[]';
ALTER TABLE calls ADD COLUMN approvers TEXT COLLATE "C" NOT NULL DEFAULT '{}';
ALTER TABLE calls ADD COLUMN require_passkey BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE approvals ADD COLUMN passkey_id BYTEA;
ALTER TABLE approvals ADD COLUMN passkey_name TEXT;
ALTER TABLE approvals ADD COLUMN evidence TEXT COLLATE "C";

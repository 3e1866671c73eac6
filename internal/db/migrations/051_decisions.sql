-- Who owns an agent, who may approve a tool's calls, and approvals signed
-- by passkeys.

-- An agent token's owners (JSON array): account names, or team:GROUP for
-- the members of a provider group. Copied onto each call at submission, so
-- that a later change of owners re-opens nothing.
ALTER TABLE tokens ADD COLUMN owners TEXT NOT NULL DEFAULT '[]';
ALTER TABLE calls ADD COLUMN owners TEXT NOT NULL DEFAULT '[]';
-- The tool's reviewer condition at submission ({"roles":[...],"groups":[...]},
-- empty for anyone who may decide), and whether every approval must be
-- signed by a passkey (the tool's approve_with, or the ask rule's).
ALTER TABLE calls ADD COLUMN approvers TEXT NOT NULL DEFAULT '{}';
ALTER TABLE calls ADD COLUMN require_passkey INTEGER NOT NULL DEFAULT 0 CHECK (require_passkey IN (0, 1));
-- An approval signed by a passkey: which one, by the name it had, and the
-- evidence (countersign.passkey-approval.v1, see docs/passkeys.md). NULL
-- for an approval by click or from the command line.
ALTER TABLE approvals ADD COLUMN passkey_id BLOB;
ALTER TABLE approvals ADD COLUMN passkey_name TEXT;
ALTER TABLE approvals ADD COLUMN evidence TEXT;

-- An operator's optional comment with an approval (mirrors the SQLite
-- migration of the same number).
ALTER TABLE approvals ADD COLUMN comment TEXT NOT NULL DEFAULT '';

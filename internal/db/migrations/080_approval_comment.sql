-- An operator's optional comment with an approval: stored with the
-- approval, recorded in its audit entry, and returned to the agent.
ALTER TABLE approvals ADD COLUMN comment TEXT NOT NULL DEFAULT '';

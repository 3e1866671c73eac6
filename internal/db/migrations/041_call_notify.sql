-- The notification channels the rule that matched a call asked for
-- (a rule's notify list), comma-separated; '' when none did.
ALTER TABLE calls ADD COLUMN notify TEXT NOT NULL DEFAULT '';

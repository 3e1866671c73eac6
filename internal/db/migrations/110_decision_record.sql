-- The decision record of each approval: how it was given (click, passkey,
-- batch, command, policy), the digest the approver posted, what made it
-- besides the approver (a batch's id), and the page that presented the
-- call, checked from the page's presentation token (NULL when no page
-- did). Whether a person saw the call follows from these.
ALTER TABLE approvals ADD COLUMN method TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN digest TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN via TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN presented_page TEXT;
ALTER TABLE approvals ADD COLUMN presented_at INTEGER;
-- Approvals stored before: the method as their channel and passkey said
-- it, the digest the call's (every approval was refused unless it was).
UPDATE approvals SET method = CASE
    WHEN passkey_id IS NOT NULL THEN 'passkey'
    WHEN channel = 'web' THEN 'click'
    WHEN channel = 'cli' THEN 'command'
    ELSE channel END;
UPDATE approvals SET digest = (SELECT c.digest FROM calls c WHERE c.id = approvals.call_id);

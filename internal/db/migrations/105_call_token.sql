-- The id of the API token that submitted the call: only that token sees it,
-- its grant, or cancels it, and the identical-envelope lookup at submission
-- finds only that token's calls. NULL for calls stored before: every token of
-- their actor sees those, and none finds them again.
ALTER TABLE calls ADD COLUMN submitted_by TEXT;

-- Each submission counts its token's pending calls (at most the bound).
CREATE INDEX calls_pending_by_token ON calls (submitted_by) WHERE status = 'pending';

-- The id of the API token that submitted the call: only that token sees it,
-- its grant, or cancels it, and the identical-envelope lookup at submission
-- finds only that token's calls. NULL for calls stored before: every token of
-- their actor sees those, and none finds them again.
ALTER TABLE calls ADD COLUMN submitted_by TEXT;

-- Fewer index writes per call. Every index on calls is written when a call
-- is stored, and an index on status again at each change of status (a call
-- that is approved and redeemed changes status twice); the single writer
-- pays for each of them inside the write lock.

-- One index for a call's digest: the history's digest prefix filter ranges
-- over its first column, and the resubmission lookup (actor and digest,
-- newest first) reads its two columns and the seq every index ends with.
DROP INDEX calls_actor_digest;
DROP INDEX calls_digest;
CREATE INDEX calls_digest ON calls (digest, actor);

-- Only calls with a reported outcome have an outcome status; a call is
-- stored without one, so it enters this index only when its outcome does.
DROP INDEX calls_outcome_status_created;
CREATE INDEX calls_outcome_status_created ON calls (outcome_status, created_at) WHERE outcome_status IS NOT NULL;

-- The actor-and-status pair in history order holds the final statuses
-- only, which a call reaches once: a call enters it once instead of at
-- every step of its way. The history drives an actor with pending or
-- approved by the rarer of calls_actor_created and calls_status_created.
-- Written NOT IN with two values: SQLite tests a list of two by
-- comparisons, a longer one through a temporary table built at every
-- statement that writes a call.
DROP INDEX calls_actor_status_created;
CREATE INDEX calls_actor_status_created ON calls (actor, status, created_at)
    WHERE status NOT IN ('pending','approved');

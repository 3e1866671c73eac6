-- The notification outbox: one row per event and channel, written by the
-- transaction of the change it announces and delivered after commit by the
-- dispatcher (internal/notify). Times are unix milliseconds.
CREATE TABLE outbox (
    seq             INTEGER PRIMARY KEY,
    event_id        TEXT NOT NULL,             -- receivers deduplicate by it
    kind            TEXT NOT NULL,             -- call.submitted, ...
    channel         TEXT NOT NULL,
    call_id         TEXT NOT NULL DEFAULT '',  -- '' for events about a tool
    body            BLOB NOT NULL,             -- the event's JSON
    at              INTEGER NOT NULL,          -- when the event happened; the order per channel and call
    scheduled_at    INTEGER NOT NULL,          -- starts the give-up clock
    due_at          INTEGER NOT NULL,          -- the next attempt
    while_pending   INTEGER NOT NULL DEFAULT 0 CHECK (while_pending IN (0, 1)),
    state           TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending','delivered','dead','skipped')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT NOT NULL DEFAULT '',
    last_attempt_at INTEGER,
    delivered_at    INTEGER,
    receipt         TEXT NOT NULL DEFAULT '',  -- the channel's handle on what it sent
    lease_owner     TEXT NOT NULL DEFAULT '',
    lease_until     INTEGER NOT NULL DEFAULT 0,
    UNIQUE (event_id, channel)
) STRICT;
CREATE INDEX outbox_due ON outbox (due_at, seq) WHERE state = 'pending';
CREATE INDEX outbox_call ON outbox (call_id, channel, at, seq);
CREATE INDEX outbox_conditional ON outbox (call_id) WHERE state = 'pending' AND while_pending = 1;
CREATE INDEX outbox_channel ON outbox (channel, seq);

-- Browsers' Web Push subscriptions. The endpoint was checked against the
-- push services' allowlist when it was stored, and is checked again before
-- every send.
CREATE TABLE push_subscriptions (
    endpoint   TEXT PRIMARY KEY,
    p256dh     TEXT NOT NULL,
    auth       TEXT NOT NULL,
    account    TEXT NOT NULL REFERENCES users (name),
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX push_subscriptions_account ON push_subscriptions (account);

-- Failed console logins, counted per throttle key (PostgreSQL; mirrors the
-- SQLite migration of the same number). key is a SHA-256 of the key, never
-- the name or address typed. A row means nothing from forget_at on and is
-- pruned.
CREATE TABLE login_strikes (
    key       TEXT COLLATE "C" PRIMARY KEY,
    failures  BIGINT NOT NULL CHECK (failures > 0),
    last_at   BIGINT NOT NULL,            -- unix milliseconds
    forget_at BIGINT NOT NULL             -- unix milliseconds
);
CREATE INDEX login_strikes_forget ON login_strikes (forget_at);

-- Failed console logins, counted per throttle key (an account name, a
-- known device, a client address or /64), so that every console process on
-- the database throttles alike. key is a SHA-256 of the key, never the name
-- or address typed. A row means nothing from forget_at on and is pruned.
CREATE TABLE login_strikes (
    key       TEXT PRIMARY KEY,
    failures  INTEGER NOT NULL CHECK (failures > 0),
    last_at   INTEGER NOT NULL,           -- unix milliseconds
    forget_at INTEGER NOT NULL            -- unix milliseconds
) STRICT;
CREATE INDEX login_strikes_forget ON login_strikes (forget_at);

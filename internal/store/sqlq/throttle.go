package sqlq

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/account"
)

// The login throttle's writes. Reading many keys and evicting all but
// some stay per engine: PostgreSQL binds the keys as one array, SQLite
// spells out a list of placeholders.

// SetLoginStrikes keeps a key's strikes, or forgets the key when it has no
// failures left.
func SetLoginStrikes(ctx context.Context, q Querier, s account.Strikes) error {
	var err error
	if s.Failures <= 0 {
		_, err = q.Exec(ctx, `DELETE FROM login_strikes WHERE key = ?`, s.Key)
	} else {
		_, err = q.Exec(ctx, `INSERT INTO login_strikes (key, failures, last_at, forget_at, throttled) VALUES (?,?,?,?,?)
			ON CONFLICT (key) DO UPDATE SET failures = excluded.failures, last_at = excluded.last_at, forget_at = excluded.forget_at,
				throttled = excluded.throttled`,
			s.Key, int64(s.Failures), ms(s.Last), ms(s.Forget), s.Throttled)
	}
	if err != nil {
		return fmt.Errorf("store: keep login strikes: %w", err)
	}
	return nil
}

// PruneLoginStrikes forgets the keys whose strikes were to be forgotten by
// now.
func PruneLoginStrikes(ctx context.Context, q Querier, now time.Time) error {
	if _, err := q.Exec(ctx, `DELETE FROM login_strikes WHERE forget_at <= ?`, ms(now)); err != nil {
		return fmt.Errorf("store: prune login strikes: %w", err)
	}
	return nil
}

// LoginStrikesSize is how many keys the throttle holds.
func LoginStrikesSize(ctx context.Context, q Querier) (int, error) {
	var n int64
	if err := q.QueryRow(ctx, `SELECT rows FROM login_strikes_size`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count login strikes: %w", err)
	}
	return int(n), nil
}

// NextLoginStrikeForget is when the first key is to be forgotten; the zero
// time when there is none.
func NextLoginStrikeForget(ctx context.Context, q Querier) (time.Time, error) {
	var next sql.NullInt64
	if err := q.QueryRow(ctx, `SELECT MIN(forget_at) FROM login_strikes`).Scan(&next); err != nil {
		return time.Time{}, fmt.Errorf("store: read login strikes: %w", err)
	}
	return fromMS(next), nil
}

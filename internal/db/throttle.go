package db

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/account"
)

// The failed logins the console's throttle counts: the login-throttle half
// of account.Store and account.Tx. The table is bounded by the service
// (account.Service.ReserveLogin): login_strikes_size, kept by triggers,
// says how many rows it has, and eviction reads a partial index of the
// keys that are not throttled.

func loginStrikes(ctx context.Context, q querier, keys []string) (map[string]account.Strikes, error) {
	out := map[string]account.Strikes{}
	if len(keys) == 0 {
		return out, nil
	}
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	rows, err := q.QueryContext(ctx, `SELECT key, failures, last_at, forget_at, throttled FROM login_strikes
		WHERE key IN (?`+strings.Repeat(",?", len(keys)-1)+`)`, args...)
	if err != nil {
		return nil, classify(fmt.Errorf("db: read login strikes: %w", err))
	}
	defer rows.Close()
	for rows.Next() {
		var s account.Strikes
		var last, forget int64
		if err := rows.Scan(&s.Key, &s.Failures, &last, &forget, &s.Throttled); err != nil {
			return nil, fmt.Errorf("db: read login strikes: %w", err)
		}
		s.Last, s.Forget = time.UnixMilli(last).UTC(), time.UnixMilli(forget).UTC()
		out[s.Key] = s
	}
	return out, classify(rows.Err())
}

// LoginStrikes returns the failed logins kept for keys.
func (a Accounts) LoginStrikes(ctx context.Context, keys []string) (map[string]account.Strikes, error) {
	return loginStrikes(ctx, a.d.sql, keys)
}

func (t *storeTx) LoginStrikes(keys []string) (map[string]account.Strikes, error) {
	return loginStrikes(t.ctx, t.tx, keys)
}

func (t *storeTx) SetLoginStrikes(s account.Strikes) error {
	var err error
	if s.Failures <= 0 {
		_, err = t.tx.ExecContext(t.ctx, `DELETE FROM login_strikes WHERE key = ?`, s.Key)
	} else {
		_, err = t.tx.ExecContext(t.ctx, `INSERT INTO login_strikes (key, failures, last_at, forget_at, throttled) VALUES (?,?,?,?,?)
			ON CONFLICT (key) DO UPDATE SET failures = excluded.failures, last_at = excluded.last_at, forget_at = excluded.forget_at,
				throttled = excluded.throttled`,
			s.Key, s.Failures, ms(s.Last), ms(s.Forget), s.Throttled)
	}
	if err != nil {
		return fmt.Errorf("db: keep login strikes: %w", err)
	}
	return nil
}

func (t *storeTx) PruneLoginStrikes(now time.Time) error {
	if _, err := t.tx.ExecContext(t.ctx, `DELETE FROM login_strikes WHERE forget_at <= ?`, ms(now)); err != nil {
		return fmt.Errorf("db: prune login strikes: %w", err)
	}
	return nil
}

func (t *storeTx) LoginStrikesSize() (int, error) {
	var n int
	if err := t.tx.QueryRowContext(t.ctx, `SELECT rows FROM login_strikes_size`).Scan(&n); err != nil {
		return 0, fmt.Errorf("db: count login strikes: %w", err)
	}
	return n, nil
}

func (t *storeTx) EvictLoginStrikes(n int, keep []string) (int, error) {
	if n <= 0 {
		return 0, nil
	}
	args := make([]any, 0, len(keep)+1)
	notIn := ""
	if len(keep) > 0 {
		notIn = ` AND key NOT IN (?` + strings.Repeat(",?", len(keep)-1) + `)`
		for _, k := range keep {
			args = append(args, k)
		}
	}
	args = append(args, n)
	res, err := t.tx.ExecContext(t.ctx, `DELETE FROM login_strikes WHERE key IN (
		SELECT key FROM login_strikes WHERE throttled = 0`+notIn+` ORDER BY failures, last_at, key LIMIT ?)`, args...)
	if err != nil {
		return 0, fmt.Errorf("db: evict login strikes: %w", err)
	}
	deleted, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("db: evict login strikes: %w", err)
	}
	return int(deleted), nil
}

func (t *storeTx) NextLoginStrikeForget() (time.Time, error) {
	var next sql.NullInt64
	if err := t.tx.QueryRowContext(t.ctx, `SELECT MIN(forget_at) FROM login_strikes`).Scan(&next); err != nil {
		return time.Time{}, fmt.Errorf("db: read login strikes: %w", err)
	}
	if !next.Valid {
		return time.Time{}, nil
	}
	return time.UnixMilli(next.Int64).UTC(), nil
}

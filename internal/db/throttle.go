package db

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/store/sqlq"
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
	return sqlq.SetLoginStrikes(t.ctx, shared{t.tx}, s)
}

func (t *storeTx) PruneLoginStrikes(now time.Time) error {
	return sqlq.PruneLoginStrikes(t.ctx, shared{t.tx}, now)
}

func (t *storeTx) LoginStrikesSize() (int, error) {
	return sqlq.LoginStrikesSize(t.ctx, shared{t.tx})
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
	return sqlq.NextLoginStrikeForget(t.ctx, shared{t.tx})
}

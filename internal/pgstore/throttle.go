package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/store/sqlq"
)

// The failed logins the console's throttle counts, shared by every replica:
// the login-throttle half of account.Store and account.Tx. The check and
// the count of an attempt are one write transaction (account.Service), so
// they run under the chain head lock like every write. The table is
// bounded by the service: login_strikes_size, kept by statement triggers,
// says how many rows it has, and eviction reads a partial index of the
// keys that are not throttled.

func loginStrikes(ctx context.Context, q querier, keys []string) (map[string]account.Strikes, error) {
	out := map[string]account.Strikes{}
	if len(keys) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT key, failures, last_at, forget_at, throttled FROM login_strikes WHERE key = ANY($1)`, keys)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: read login strikes: %w", err))
	}
	defer rows.Close()
	for rows.Next() {
		var s account.Strikes
		var failures, last, forget int64
		if err := rows.Scan(&s.Key, &failures, &last, &forget, &s.Throttled); err != nil {
			return nil, fmt.Errorf("pgstore: read login strikes: %w", err)
		}
		s.Failures = int(failures)
		s.Last, s.Forget = time.UnixMilli(last).UTC(), time.UnixMilli(forget).UTC()
		out[s.Key] = s
	}
	return out, classify(rows.Err())
}

// LoginStrikes returns the failed logins kept for keys.
func (a Accounts) LoginStrikes(ctx context.Context, keys []string) (map[string]account.Strikes, error) {
	return loginStrikes(ctx, a.d.pool, keys)
}

func (t *txn) LoginStrikes(keys []string) (map[string]account.Strikes, error) {
	return loginStrikes(t.ctx, t.tx, keys)
}

func (t *txn) SetLoginStrikes(s account.Strikes) error {
	return sqlq.SetLoginStrikes(t.ctx, shared{t.tx}, s)
}

func (t *txn) PruneLoginStrikes(now time.Time) error {
	return sqlq.PruneLoginStrikes(t.ctx, shared{t.tx}, now)
}

func (t *txn) LoginStrikesSize() (int, error) {
	return sqlq.LoginStrikesSize(t.ctx, shared{t.tx})
}

func (t *txn) EvictLoginStrikes(n int, keep []string) (int, error) {
	if n <= 0 {
		return 0, nil
	}
	if keep == nil {
		keep = []string{}
	}
	tag, err := t.tx.Exec(t.ctx, `DELETE FROM login_strikes WHERE key IN (
		SELECT key FROM login_strikes WHERE NOT throttled AND key <> ALL($1) ORDER BY failures, last_at, key LIMIT $2)`,
		keep, int64(n))
	if err != nil {
		return 0, fmt.Errorf("pgstore: evict login strikes: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

func (t *txn) NextLoginStrikeForget() (time.Time, error) {
	return sqlq.NextLoginStrikeForget(t.ctx, shared{t.tx})
}

package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/account"
)

// The failed logins the console's throttle counts, shared by every replica:
// the login-throttle half of account.Store and account.Tx. The check and
// the count of an attempt are one write transaction (account.Service), so
// they run under the chain head lock like every write.

func loginStrikes(ctx context.Context, q querier, keys []string) (map[string]account.Strikes, error) {
	out := map[string]account.Strikes{}
	if len(keys) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT key, failures, last_at, forget_at FROM login_strikes WHERE key = ANY($1)`, keys)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: read login strikes: %w", err))
	}
	defer rows.Close()
	for rows.Next() {
		var s account.Strikes
		var failures, last, forget int64
		if err := rows.Scan(&s.Key, &failures, &last, &forget); err != nil {
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
	var err error
	if s.Failures <= 0 {
		_, err = t.tx.Exec(t.ctx, `DELETE FROM login_strikes WHERE key = $1`, s.Key)
	} else {
		_, err = t.tx.Exec(t.ctx, `INSERT INTO login_strikes (key, failures, last_at, forget_at) VALUES ($1,$2,$3,$4)
			ON CONFLICT (key) DO UPDATE SET failures = excluded.failures, last_at = excluded.last_at, forget_at = excluded.forget_at`,
			s.Key, int64(s.Failures), ms(s.Last), ms(s.Forget))
	}
	if err != nil {
		return fmt.Errorf("pgstore: keep login strikes: %w", err)
	}
	return nil
}

func (t *txn) PruneLoginStrikes(now time.Time) error {
	if _, err := t.tx.Exec(t.ctx, `DELETE FROM login_strikes WHERE forget_at <= $1`, ms(now)); err != nil {
		return fmt.Errorf("pgstore: prune login strikes: %w", err)
	}
	return nil
}

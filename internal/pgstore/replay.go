package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

// ReplayCalls calls fn for every call created at or after since, oldest
// first, with its approvals, from one read snapshot and in constant memory.
func (d *DB) ReplayCalls(ctx context.Context, since time.Time, fn func(*queue.Call) error) error {
	return d.readSnapshot(ctx, func(q querier) error {
		rows, err := q.Query(ctx, `SELECT `+qualified+`, `+approvalsColumn+`
			FROM calls c WHERE c.created_at >= $1 ORDER BY c.created_at, c.seq`, ms(since))
		if err != nil {
			return classify(fmt.Errorf("pgstore: replay calls: %w", err))
		}
		defer rows.Close()
		for rows.Next() {
			c, err := scanCallWithApprovals(rows)
			if err != nil {
				return err
			}
			if err := fn(c); err != nil {
				return err
			}
		}
		return classify(rows.Err())
	})
}

package db

import (
	"context"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

// ReplayCalls calls fn for every call created at or after since, oldest
// first, with its approvals, from one read snapshot and in constant memory.
// It implements replay.Source.
func (d *DB) ReplayCalls(ctx context.Context, since time.Time, fn func(*queue.Call) error) error {
	return d.readSnapshot(ctx, func(q querier) error {
		rows, err := q.QueryContext(ctx, `SELECT `+qualified+`, `+approvalsColumn+`
			FROM calls c WHERE c.created_at >= ? ORDER BY c.created_at, c.seq`, ms(since))
		if err != nil {
			return classify(fmt.Errorf("db: replay calls: %w", err))
		}
		defer rows.Close()
		for rows.Next() {
			c, s, err := scanCallWith(rows, 1)
			if err != nil {
				return err
			}
			if s.approvals != "[]" {
				if err := addApprovals(c, s.approvals); err != nil {
					return err
				}
			}
			if err := fn(c); err != nil {
				return err
			}
		}
		return classify(rows.Err())
	})
}

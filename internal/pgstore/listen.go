package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/queue"
)

// Listener hears of the changes other replicas commit and hands them to
// apply as queue events, so that this replica's pages update and its
// long-polls wake.
//
// It holds one connection of its own, LISTENing on Channel. A notification
// is only a wake-up: the listener then reads every audit entry after the
// last one it handled, in chain order, so a notification lost or merged
// loses nothing. Every write holds the chain head lock until it has
// committed, so entries become visible in seq order and none is skipped.
// When the connection drops, the listener says so (Connected), reconnects
// with backoff, and reads everything that was committed meanwhile: no page
// or waiter misses a decision. Entries this process wrote itself were
// published when they committed and are skipped.
//
// The same connection listens on PresenceChannel, for who views which
// call page on the other replicas (Presence).
type Listener struct {
	d        *DB
	apply    func(queue.Event)
	log      *slog.Logger
	presence *Presence

	connected  atomic.Bool
	reconnects atomic.Int64
	cursor     atomic.Int64 // the last audit seq handled
	done       chan struct{}
}

// Listener backoff between reconnection attempts.
const (
	listenBackoffMin = 50 * time.Millisecond
	listenBackoffMax = 5 * time.Second
	resyncBatch      = 1000
)

// Listen starts the listener; it runs until ctx ends. It starts from the
// newest audit entry: what was committed before is read by the pages and
// waiters themselves.
func (d *DB) Listen(ctx context.Context, apply func(queue.Event), log *slog.Logger) (*Listener, error) {
	if log == nil {
		log = slog.Default()
	}
	l := &Listener{d: d, apply: apply, log: log, done: make(chan struct{}), presence: newPresence(d, log, d.presenceRefresh)}
	seq, _, err := d.AuditHead(ctx)
	if err != nil {
		return nil, err
	}
	l.cursor.Store(seq)
	sent := make(chan struct{})
	go func() { defer close(sent); l.presence.run(ctx) }()
	go func() { defer close(l.done); l.run(ctx); <-sent }()
	return l, nil
}

// Presence is who views which call page on the other replicas, and how
// this replica tells them of its own viewers.
func (l *Listener) Presence() *Presence { return l.presence }

// Connected reports whether the listener's connection is up.
func (l *Listener) Connected() bool { return l.connected.Load() }

// Reconnects counts the connections made after the first.
func (l *Listener) Reconnects() int64 { return l.reconnects.Load() }

// Cursor is the last audit seq the listener has handled.
func (l *Listener) Cursor() int64 { return l.cursor.Load() }

// Done is closed when the listener has stopped (and its presence has said
// goodbye to the other replicas).
func (l *Listener) Done() <-chan struct{} { return l.done }

func (l *Listener) run(ctx context.Context) {
	backoff := listenBackoffMin
	for first := true; ctx.Err() == nil; first = false {
		err := l.session(ctx, first)
		l.connected.Store(false)
		if ctx.Err() != nil {
			return
		}
		l.log.Warn("live updates: lost the PostgreSQL listener connection; reconnecting",
			slog.Any("error", err), slog.Duration("backoff", backoff))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, listenBackoffMax)
		if l.connected.Load() {
			backoff = listenBackoffMin
		}
	}
}

// session connects, listens, catches up and handles notifications until
// the connection fails.
func (l *Listener) session(ctx context.Context, first bool) error {
	// The pool's parser, so that pool settings in the URL (pool_max_conns)
	// are not sent to the server as parameters.
	pcfg, err := pgxpool.ParseConfig(l.d.raw)
	if err != nil {
		return err
	}
	cfg := pcfg.ConnConfig
	cfg.ConnectTimeout = 5 * time.Second
	cfg.RuntimeParams["application_name"] = "countersign-listener"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, ch := range []string{Channel, PresenceChannel} {
		if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	if !first {
		l.reconnects.Add(1)
	}
	// Listening now: whatever commits from here on is notified, and what
	// committed before is read by catching up.
	if err := l.catchUp(ctx, conn); err != nil {
		return err
	}
	l.connected.Store(true)
	l.presence.listening()
	if !first {
		l.log.Info("live updates: the PostgreSQL listener reconnected and caught up", slog.Int64("seq", l.cursor.Load()))
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Channel == PresenceChannel {
			l.presence.receive(n.Payload)
			continue
		}
		var v int64
		if _, err := fmt.Sscanf(n.Payload, "%d", &v); err != nil {
			l.log.Warn("live updates: a notification this version does not read", slog.String("payload", n.Payload))
		}
		if v != 0 && v <= l.cursor.Load() {
			continue // read already, with an earlier notification
		}
		if err := l.catchUp(ctx, conn); err != nil {
			return err
		}
	}
}

// change is what catching up found about one call or pair.
type change struct {
	kinds []string
	block *queue.Block
}

// catchUp reads every audit entry after the cursor, in batches, and
// publishes what other replicas changed.
func (l *Listener) catchUp(ctx context.Context, conn *pgx.Conn) error {
	for {
		cursor := l.cursor.Load()
		rows, err := conn.Query(ctx, `SELECT seq, kind, call_id, details, hash FROM audit WHERE seq > $1 ORDER BY seq LIMIT $2`,
			cursor, resyncBatch)
		if err != nil {
			return err
		}
		var order []string
		calls := map[string]*change{}
		var blocks []*change
		n, last := 0, cursor
		for rows.Next() {
			var seq int64
			var kind, callID, details, hash string
			if err := rows.Scan(&seq, &kind, &callID, &details, &hash); err != nil {
				rows.Close()
				return err
			}
			n, last = n+1, seq
			if l.d.own(seq, hash) {
				continue
			}
			switch {
			case callID != "":
				c := calls[callID]
				if c == nil {
					c = &change{}
					calls[callID] = c
					order = append(order, callID)
				}
				c.kinds = append(c.kinds, kind)
			case kind == audit.KindRetryBlocked || kind == audit.KindRetryCleared:
				if b := blockOf(details); b != nil {
					blocks = append(blocks, &change{kinds: []string{kind}, block: b})
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, id := range order {
			if err := l.publishCall(ctx, id, calls[id].kinds); err != nil {
				return err
			}
		}
		for _, b := range blocks {
			l.publishBlock(ctx, b.kinds[0], b.block)
		}
		l.cursor.Store(last)
		l.d.forgetOwnUpTo(last)
		if n < resyncBatch {
			return nil
		}
	}
}

// publishCall publishes a call's state now, under the kind that tells a
// page what to do: submitted when the call is new and still pending, else
// the newest change.
func (l *Listener) publishCall(ctx context.Context, id string, kinds []string) error {
	c, err := l.d.Store().Call(ctx, id)
	if errors.Is(err, queue.ErrNotFound) {
		return nil // an entry about a call that was never stored (a rejection)
	}
	if err != nil {
		return err
	}
	kind := kinds[len(kinds)-1]
	for _, k := range kinds {
		if k == audit.KindSubmitted && c.Status == queue.StatusPending {
			kind = audit.KindSubmitted
		}
	}
	l.apply(queue.Event{Kind: kind, Call: c})
	return nil
}

func (l *Listener) publishBlock(ctx context.Context, kind string, b *queue.Block) {
	if kind == audit.KindRetryBlocked {
		if bs, err := l.d.Store().Blocks(ctx); err == nil {
			for _, x := range bs {
				if x.Actor == b.Actor && x.Tool == b.Tool {
					*b = x
				}
			}
		}
	}
	l.apply(queue.Event{Kind: kind, Block: b})
}

// blockOf reads the actor and tool of a retry entry's details.
func blockOf(details string) *queue.Block {
	v, err := audit.ParseDetails([]byte(details))
	if err != nil {
		return nil
	}
	o, ok := v.(canonical.Object)
	if !ok {
		return nil
	}
	actor, _ := o.Get("actor")
	tool, _ := o.Get("tool")
	a, _ := actor.(string)
	t, _ := tool.(string)
	if a == "" {
		return nil
	}
	return &queue.Block{Actor: a, Tool: t}
}

package console

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/web/templates"
)

// What needs people is counted for the navigation of every page: the
// pending calls, those due soon, the blocked agents and the unresolved
// outcomes. The counts are shared by every viewer and kept in memory:
//
//   - a page reads them as they were last counted, and counts them itself
//     only when they are older than needsMaxAge, so reading a page adds no
//     statement while the console is busy;
//   - a socket's first message counts them again if anything changed
//     since they were counted, so a page that goes live starts true;
//   - after a change (a local one, or one another replica committed), and
//     every needsRecount while any page has a socket open, they are counted
//     again once the changes of needsSettle are in, and pushed to every
//     open page when they differ. With no socket open nothing is counted
//     in the background.
const (
	needsDue     = 10 * time.Minute
	needsDueText = "10 min"
	needsMaxAge  = 10 * time.Second
	needsSettle  = 200 * time.Millisecond
	needsRecount = 30 * time.Second
)

// needsCounts is the console's copy of the counts.
type needsCounts struct {
	mu   sync.Mutex
	cur  templates.Needs
	at   time.Time // when cur was counted; zero before the first count
	wake chan struct{}
	// dirty is set by every change and cleared before each count.
	dirty atomic.Bool
}

func newNeedsCounts() *needsCounts { return &needsCounts{wake: make(chan struct{}, 1)} }

// changed says the counts may have changed. It never blocks.
func (n *needsCounts) changed(queue.Event) {
	n.dirty.Store(true)
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// countNeeds reads the counts from the store: three statements.
func (c *Console) countNeeds(ctx context.Context, now time.Time) templates.Needs {
	out := templates.Needs{DueWithin: needsDueText}
	var err error
	if out.Pending, out.Due, err = c.q.CountPending(ctx, now.Add(needsDue)); err == nil {
		var blocks []queue.Block
		if blocks, err = c.q.Blocks(ctx); err == nil {
			out.Blocked = len(blocks)
			out.Unresolved, err = c.q.CountUnresolved(ctx)
		}
	}
	if err != nil {
		c.log.Warn("count what needs people", slog.Any("error", err))
		return templates.Needs{Unknown: true}
	}
	return out
}

// needs is the counts for a page of v: as last counted, or counted now
// when that was longer than needsMaxAge ago.
func (c *Console) needs(v *viewer) *templates.Needs { return c.needsOf(v, false) }

// needsOf is needs, counted again when anything changed since the last
// count if fresh is set.
func (c *Console) needsOf(v *viewer, fresh bool) *templates.Needs {
	now := c.now()
	n := c.needsCounts
	n.mu.Lock()
	cur, at := n.cur, n.at
	n.mu.Unlock()
	if at.IsZero() || now.Sub(at) > needsMaxAge || now.Before(at) || fresh && n.dirty.Load() {
		n.dirty.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		cur = c.countNeeds(ctx, now)
		cancel()
		n.mu.Lock()
		if !cur.Unknown && (n.at.IsZero() || !n.at.After(now)) {
			n.cur, n.at = cur, now
		}
		n.mu.Unlock()
	}
	cur.CanDecide = v.user.Role.CanDecide()
	return &cur
}

// needsLoop counts again after changes and on a timer while pages have
// sockets, and pushes new counts to them.
func (c *Console) needsLoop() {
	n := c.needsCounts
	t := time.NewTicker(needsRecount)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-n.wake:
			select {
			case <-time.After(needsSettle):
			case <-c.stop:
				return
			}
		case <-t.C:
		}
		if c.hub.clientCount() == 0 {
			// Nobody is shown the counts live: the next page counts them
			// if they are stale.
			continue
		}
		now := c.now()
		n.dirty.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		fresh := c.countNeeds(ctx, now)
		cancel()
		if fresh.Unknown {
			continue
		}
		n.mu.Lock()
		same := !n.at.IsZero() && n.cur == fresh
		n.cur, n.at = fresh, now
		n.mu.Unlock()
		if !same {
			c.hub.pushNeeds(fresh)
		}
	}
}

// pushNeeds sends new counts to every open page: one rendering for
// deciders, one for everyone else.
func (h *hub) pushNeeds(n templates.Needs) {
	h.do(func() {
		var msgs [2][]byte
		for cl := range h.clients {
			decide := cl.viewer.user.Role.CanDecide()
			i := 0
			if decide {
				i = 1
			}
			if msgs[i] == nil {
				shown := n
				shown.CanDecide = decide
				msg, err := renderBytes(templates.NeedsNav(shown, true))
				if err != nil {
					h.log.Error("console: render the counts", slog.Any("error", err))
					return
				}
				msgs[i] = msg
			}
			h.deliver(cl, msgs[i])
		}
	})
}

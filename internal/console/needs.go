package console

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/web/templates"
)

// What needs people is counted for the navigation of every page: the
// calls the viewer has to decide, those of them due soon, the blocked
// agents and the unresolved outcomes. "To decide" counts the calls whose
// page would offer the viewer Approve (queue.Standing: the tool's
// approvers and groups with the escalation tiers reached, owners, the
// own-call ban, delegations the viewer holds, freezes and changed tools);
// a viewer who does not decide is shown every pending call. What the
// counts are read from is shared by every viewer and kept in memory (the
// pending calls grouped by what a standing reads of them, the live
// delegations, the freezes): each viewer's counts are worked out from it
// without a statement.
//
//   - a page reads it as it was last read, and reads it again itself
//     only when it is older than needsMaxAge, so reading a page adds no
//     statement while the console is busy;
//   - a socket's first message reads it again if anything changed since,
//     so a page that goes live starts true;
//   - after a change (a local one, or one another replica committed), and
//     every needsRecount while any page has a socket open, it is read
//     again once the changes of needsSettle are in, and each open page is
//     pushed its viewer's counts when they differ from those it was last
//     sent. With no socket open nothing is read in the background.
const (
	needsDue     = 10 * time.Minute
	needsDueText = "10 min"
	needsMaxAge  = 10 * time.Second
	needsSettle  = 200 * time.Millisecond
	needsRecount = 30 * time.Second
)

// needsRead is what every viewer's counts are worked out from.
type needsRead struct {
	groups []queue.PendingGroup
	// changed says, for each group, whether its tool's definition is no
	// longer the one its calls were made under.
	changed     []bool
	delegations []*queue.Delegation // live when read
	freezes     []queue.Freeze
	blocked     int
	unresolved  int
	// unknown is set when the store could not be read.
	unknown bool
}

// needsCounts is the console's copy of what the counts are read from.
type needsCounts struct {
	mu   sync.Mutex
	cur  *needsRead
	at   time.Time // when cur was read; zero before the first read
	wake chan struct{}
	// dirty is set by every change and cleared before each read.
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

// readNeeds reads what the counts are worked out from: five statements.
func (c *Console) readNeeds(ctx context.Context, now time.Time) *needsRead {
	out := &needsRead{}
	err := func() error {
		var err error
		if out.groups, err = c.q.PendingGroups(ctx, now.Add(needsDue)); err != nil {
			return err
		}
		for _, g := range out.groups {
			out.changed = append(out.changed, c.q.ToolChanged(g.Call))
		}
		if out.delegations, err = c.q.Delegations(ctx, queue.DelegationFilter{LiveAt: now, Limit: queue.MaxDelegationsLive}); err != nil {
			return err
		}
		if out.freezes, err = c.q.Freezes(ctx); err != nil {
			return err
		}
		blocks, err := c.q.Blocks(ctx)
		if err != nil {
			return err
		}
		out.blocked = len(blocks)
		out.unresolved, err = c.q.CountUnresolved(ctx)
		return err
	}()
	if err != nil {
		c.log.Warn("count what needs people", slog.Any("error", err))
		return &needsRead{unknown: true}
	}
	return out
}

// pending is how many calls are pending, and how many of them are due.
func (r *needsRead) pending() (all, due int) {
	for _, g := range r.groups {
		all, due = all+g.Count, due+g.Due
	}
	return all, due
}

// countsFor works out u's counts at now: the calls whose page offers u
// Approve when u decides, every pending call when u does not.
func (r *needsRead) countsFor(u account.User, now time.Time) templates.Needs {
	if r.unknown {
		return templates.Needs{Unknown: true}
	}
	out := templates.Needs{DueWithin: needsDueText, Blocked: r.blocked, Unresolved: r.unresolved, CanDecide: u.CanDecide()}
	if !out.CanDecide {
		out.Pending, out.Due = r.pending()
		return out
	}
	delegators := r.delegatorsOf(u, now)
	for i, g := range r.groups {
		if queue.StandingOf(g.Call, u, r.freezes, r.changed[i], delegators).MayApprove() {
			out.Pending, out.Due = out.Pending+g.Count, out.Due+g.Due
		}
	}
	return out
}

// delegatorsOf lists the people with a delegation to u live at now, as
// last read.
func (r *needsRead) delegatorsOf(u account.User, now time.Time) []string {
	var out []string
	for _, d := range r.delegations {
		if d.Delegate == u.Name && d.LiveAt(now) {
			out = append(out, d.Delegator)
		}
	}
	return out
}

// needs is the counts for a page of v: worked out from what was last
// read, or read now when that was longer than needsMaxAge ago.
func (c *Console) needs(v *viewer) *templates.Needs { return c.needsOf(v, false) }

// needsOf is needs, read again when anything changed since the last read
// if fresh is set.
func (c *Console) needsOf(v *viewer, fresh bool) *templates.Needs {
	now := c.now()
	out := c.needsNow(now, fresh).countsFor(v.user, now)
	return &out
}

// needsNow is what the counts are worked out from: as last read, or read
// now when that was longer than needsMaxAge ago (or anything changed
// since, if fresh is set).
func (c *Console) needsNow(now time.Time, fresh bool) *needsRead {
	n := c.needsCounts
	n.mu.Lock()
	cur, at := n.cur, n.at
	n.mu.Unlock()
	if at.IsZero() || now.Sub(at) > needsMaxAge || now.Before(at) || fresh && n.dirty.Load() {
		n.dirty.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		cur = c.readNeeds(ctx, now)
		cancel()
		n.mu.Lock()
		if !cur.unknown && (n.at.IsZero() || !n.at.After(now)) {
			n.cur, n.at = cur, now
		}
		n.mu.Unlock()
	}
	return cur
}

// needsLoop reads again after changes and on a timer while pages have
// sockets, and pushes each open page its viewer's counts.
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
			// Nobody is shown the counts live: the next page reads them
			// if they are stale.
			continue
		}
		now := c.now()
		n.dirty.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		fresh := c.readNeeds(ctx, now)
		cancel()
		if fresh.unknown {
			continue
		}
		n.mu.Lock()
		n.cur, n.at = fresh, now
		n.mu.Unlock()
		c.hub.pushNeeds(func(u account.User) templates.Needs { return fresh.countsFor(u, now) })
	}
}

// pushNeeds sends each open page its viewer's counts, as countsFor works
// them out, when they differ from those it was last sent: one rendering
// per distinct counts.
func (h *hub) pushNeeds(countsFor func(account.User) templates.Needs) {
	h.do(func() {
		msgs := map[templates.Needs][]byte{}
		for cl := range h.clients {
			shown := countsFor(cl.viewer.user)
			if cl.needsSent && cl.needs == shown {
				continue
			}
			msg, ok := msgs[shown]
			if !ok {
				var err error
				if msg, err = renderBytes(templates.NeedsNav(shown, true)); err != nil {
					h.log.Error("console: render the counts", slog.Any("error", err))
					return
				}
				msgs[shown] = msg
			}
			cl.needs, cl.needsSent = shown, true
			h.deliver(cl, msg)
		}
	})
}

// sentNeeds records the counts a socket's first message sent cl, unless a
// push sent it counts already: those reach the page after the first
// message.
func (h *hub) sentNeeds(cl *client, n templates.Needs) {
	h.do(func() {
		if !cl.needsSent {
			cl.needs, cl.needsSent = n, true
		}
	})
}

package console

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/web/templates"
)

// The hub owns the set of open sockets. Committed queue changes arrive
// through publish (called on the committing goroutine, after commit, so it
// never blocks); the hub renders each change as HTML fragments for the
// pages that show it and queues them on each socket's buffered channel. A
// socket whose channel is full is dropped: its page reconnects and
// resynchronizes. Only the hub closes a socket's channel.

// client is one open socket: one page in one tab.
type client struct {
	conn *websocket.Conn
	send chan []byte
	// full is signalled (never closed) when send is half full, which cuts
	// short the write pump's hold on a busy socket (writeBatch); it has
	// room for one signal.
	full chan struct{}
	// hold is the write pump's timer for its hold (writeBatch).
	hold   *time.Timer
	viewer *viewer
	// release frees its place among the sockets open (Console.sockets)
	// when its read pump ends.
	release func()
	callID  string // the call page it shows, or "" for the queue page
	// queue is a queue page's filter: only the calls it lets through are
	// pushed to the page.
	queue queueQuery
	view  string // viewUnresolved for the Unresolved page, else ""
	// needs are the counts the page was last pushed (needsSent set once
	// it was pushed any); only the hub's goroutine reads and writes them.
	needs     templates.Needs
	needsSent bool

	// closeCode and closeText are set by the hub before it closes send, and
	// read by the writer after it sees send closed.
	closeCode int
	closeText string
}

// hubDeps is what the hub is given: how to render a change for one page,
// who views a call on other replicas, where it counts its pushes, its log
// and clock, and the console's stop.
type hubDeps struct {
	// fragment renders a change for one client: a key shared by clients
	// that get the same bytes, and the render (nil: nothing for it).
	fragment func(ev queue.Event, cl *client, now time.Time) (string, func() ([]byte, error))
	presence Presence               // nil: this replica's viewers only
	pushes   *prometheus.CounterVec // "sent" and "dropped"
	log      *slog.Logger
	now      func() time.Time
	stop     <-chan struct{}
}

type hub struct {
	hubDeps
	register   chan *client
	unregister chan *client
	ops        chan func()
	stopped    chan struct{}

	mu      sync.Mutex // guards pending and elsewhere
	pending []queue.Event
	// elsewhere are the calls whose viewers on other replicas changed.
	elsewhere map[string]bool
	wake      chan struct{}

	// Owned by the run goroutine.
	clients map[*client]struct{}
	seen    map[string]seenCall
	// viewersChanged are the calls whose pages opened or closed since the
	// hub last told those pages who is viewing them.
	viewersChanged map[string]bool
}

// seenCall remembers the furthest state pushed for a call, so that an
// event published late (after a later change of the same call) is not
// pushed over the newer state, and whether the queue pages were told to
// remove the call. A call leaves the queue once and never comes back (every
// state after pending is final for the queue), and a page that opens later
// reads its snapshot after the change that took the call off committed, so
// the queue pages are sent its removal once: the grant that follows an
// approval and the redemption push nothing more to them.
type seenCall struct {
	rank    int
	at      time.Time
	removed bool
}

func newHub(d hubDeps) *hub {
	return &hub{
		hubDeps: d, register: make(chan *client), unregister: make(chan *client), ops: make(chan func()),
		stopped: make(chan struct{}), wake: make(chan struct{}, 1),
		clients: map[*client]struct{}{}, seen: map[string]seenCall{}, viewersChanged: map[string]bool{},
		elsewhere: map[string]bool{},
	}
}

// othersChanged queues a call whose viewers on other replicas changed. It
// never blocks.
func (h *hub) othersChanged(callID string) {
	h.mu.Lock()
	h.elsewhere[callID] = true
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// publish queues a committed change for the hub. It never blocks.
func (h *hub) publish(ev queue.Event) {
	h.mu.Lock()
	h.pending = append(h.pending, ev)
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *hub) run() {
	defer close(h.stopped)
	forget := time.NewTicker(time.Minute)
	defer forget.Stop()
	for {
		select {
		case cl := <-h.register:
			h.clients[cl] = struct{}{}
			if cl.callID != "" {
				h.viewersChanged[cl.callID] = true
			}
		case cl := <-h.unregister:
			if _, ok := h.clients[cl]; ok {
				h.drop(cl, websocket.CloseNormalClosure, "")
			}
		case op := <-h.ops:
			op()
		case <-h.wake:
			h.mu.Lock()
			evs := h.pending
			h.pending = nil
			for id := range h.elsewhere {
				h.viewersChanged[id] = true
			}
			clear(h.elsewhere)
			h.mu.Unlock()
			for _, ev := range evs {
				h.fanout(ev)
			}
		case <-forget.C:
			cutoff := time.Now().Add(-10 * time.Minute)
			for id, s := range h.seen {
				if s.at.Before(cutoff) {
					delete(h.seen, id)
				}
			}
		case <-h.stop:
			for cl := range h.clients {
				h.drop(cl, websocket.CloseServiceRestart, "the console is restarting")
			}
			return
		}
		h.tellViewers()
	}
}

// tellViewers sends the pages of each call whose viewers changed the
// names of everyone viewing it. The fragment is the same for every viewer
// of the call; each page leaves out its own viewer's name. With a shared
// presence (Config.Presence) this replica's viewers are told to the other
// replicas, and theirs are named too.
func (h *hub) tellViewers() {
	presence := h.presence
	for len(h.viewersChanged) > 0 {
		for id := range h.viewersChanged {
			delete(h.viewersChanged, id)
			var names []string
			var on []*client
			for cl := range h.clients {
				if cl.callID != id {
					continue
				}
				on = append(on, cl)
				if !slices.Contains(names, cl.viewer.user.Name) {
					names = append(names, cl.viewer.user.Name)
				}
			}
			if presence != nil {
				presence.Viewing(id, names)
			}
			if len(on) == 0 {
				continue
			}
			if presence != nil {
				for _, n := range presence.Others(id) {
					if !slices.Contains(names, n) {
						names = append(names, n)
					}
				}
			}
			sort.Strings(names)
			viewers := make([]templates.Viewing, len(names))
			for i, n := range names {
				viewers[i] = templates.Viewing{Name: n, Shown: reveal.Of(n)}
			}
			msg, err := renderBytes(templates.Presence(viewers))
			if err != nil {
				h.log.Error("console: render presence", slog.Any("error", err))
				continue
			}
			for _, cl := range on {
				h.deliver(cl, msg)
			}
		}
	}
}

// drop removes a client and closes its channel; the writer then sends the
// close frame and closes the connection.
func (h *hub) drop(cl *client, code int, text string) {
	delete(h.clients, cl)
	if cl.callID != "" {
		h.viewersChanged[cl.callID] = true
	}
	cl.closeCode, cl.closeText = code, text
	close(cl.send)
}

// deliver queues msg for cl, dropping cl if its buffer is full.
func (h *hub) deliver(cl *client, msg []byte) {
	if cl.offer(msg) {
		h.pushes.WithLabelValues("sent").Inc()
	} else {
		h.log.Info("console: dropping a socket that does not keep up", slog.String("user", cl.viewer.user.Name))
		h.pushes.WithLabelValues("dropped").Inc()
		h.drop(cl, websocket.CloseTryAgainLater, "too slow; reconnect")
	}
}

// offer queues msg on cl's channel unless it is full, and signals cl.full
// when the channel is half full or more.
func (cl *client) offer(msg []byte) bool {
	select {
	case cl.send <- msg:
	default:
		return false
	}
	if len(cl.send) >= cap(cl.send)/2 {
		select {
		case cl.full <- struct{}{}:
		default:
		}
	}
	return true
}

// add registers a client; false when the hub has stopped.
func (h *hub) add(cl *client) bool {
	select {
	case h.register <- cl:
		return true
	case <-h.stopped:
		return false
	}
}

// remove unregisters a client if it is still registered.
func (h *hub) remove(cl *client) {
	select {
	case h.unregister <- cl:
	case <-h.stopped:
	}
}

// do runs op on the hub goroutine and waits for it; false when the hub
// has stopped.
func (h *hub) do(op func()) bool {
	done := make(chan struct{})
	select {
	case h.ops <- func() { op(); close(done) }:
		<-done
		return true
	case <-h.stopped:
		return false
	}
}

// sessionIDs lists the sessions that have open sockets.
func (h *hub) sessionIDs() []string {
	var ids []string
	h.do(func() {
		set := map[string]bool{}
		for cl := range h.clients {
			if !set[cl.viewer.idHash] {
				set[cl.viewer.idHash] = true
				ids = append(ids, cl.viewer.idHash)
			}
		}
	})
	return ids
}

// endSessions tells the pages of these sessions that they ended, then
// closes their sockets with a policy-violation code so they do not
// reconnect.
func (h *hub) endSessions(idHashes ...string) {
	set := map[string]bool{}
	for _, id := range idHashes {
		set[id] = true
	}
	h.do(func() {
		msg, err := renderBytes(templates.SessionEnded())
		for cl := range h.clients {
			if !set[cl.viewer.idHash] {
				continue
			}
			if err == nil {
				select {
				case cl.send <- msg:
				default:
				}
			}
			h.drop(cl, websocket.ClosePolicyViolation, "session ended")
		}
	})
}

// endUser ends the sockets of every session of one user.
func (h *hub) endUser(name string) {
	var ids []string
	h.do(func() {
		for cl := range h.clients {
			if cl.viewer.user.Name == name {
				ids = append(ids, cl.viewer.idHash)
			}
		}
	})
	if len(ids) > 0 {
		h.endSessions(ids...)
	}
}

// clientCount is how many sockets are open.
func (h *hub) clientCount() int {
	n := 0
	h.do(func() { n = len(h.clients) })
	return n
}

// rank orders the states of one call: approvals only grow, and every
// state after pending is final for the queue; after redemption, an open
// lease comes before lease_expired, which comes before a reported outcome,
// and a resolution after either.
func rank(c *queue.Call) int {
	switch c.Status {
	case queue.StatusPending:
		return len(c.Approvals)
	case queue.StatusApproved:
		return 1000
	}
	r := 2000
	switch {
	case c.Outcome == nil:
	case c.Outcome.Status == queue.OutcomeLeaseExpired:
		r = 2500
	default:
		r = 3000
	}
	if c.Resolution != nil {
		r += 100
	}
	return r
}

// fanout renders ev for every client that shows it. Fragments are rendered
// once per distinct view and the same bytes are queued on every socket of
// that view: per role (and owner) for queue cards, which hold no form and
// nothing of the viewer, per session for anything that holds a form (a
// CSRF token) or says what the viewer did. The removal of a call's card
// is sent to the queue pages once (see seenCall).
func (h *hub) fanout(ev queue.Event) {
	removed := false // the queue pages were told to remove ev's call
	if ev.Call != nil {
		r := rank(ev.Call)
		s, ok := h.seen[ev.Call.ID]
		if ok && r < s.rank {
			return // a newer state of this call was already pushed
		}
		removed = ok && s.removed
		h.seen[ev.Call.ID] = seenCall{rank: r, at: time.Now(), removed: removed}
	}
	now := h.now()
	cache := map[string][]byte{}
	sentRemove := false
	for cl := range h.clients {
		key, render := h.fragment(ev, cl, now)
		if render == nil || key == keyQueueRemove && removed {
			continue
		}
		msg, ok := cache[key]
		if !ok {
			var err error
			if msg, err = render(); err != nil {
				h.log.Error("console: render fragment", slog.String("kind", ev.Kind), slog.Any("error", err))
				continue
			}
			cache[key] = msg
		}
		h.deliver(cl, msg)
		sentRemove = sentRemove || key == keyQueueRemove
	}
	if sentRemove {
		s := h.seen[ev.Call.ID]
		s.removed = true
		h.seen[ev.Call.ID] = s
	}
}

// fragmentFor decides what a client is sent for ev: a cache key and a
// renderer, or a nil renderer for nothing.
func (c *Console) fragmentFor(ev queue.Event, cl *client, now time.Time) (string, func() ([]byte, error)) {
	v := cl.viewer
	if ev.Block != nil {
		if cl.callID != "" || cl.view != "" {
			return "", nil
		}
		b := c.blockView(*ev.Block, v, now)
		switch ev.Kind {
		case audit.KindRetryBlocked:
			return "block:" + v.idHash, func() ([]byte, error) { return renderBytes(templates.BlockUpsert(b)) }
		case audit.KindRetryCleared:
			return "unblock", func() ([]byte, error) { return renderBytes(templates.Remove(b.DOMID)) }
		}
		return "", nil
	}
	if ev.Plan != nil {
		if cl.callID != "" || cl.view != "" {
			return "", nil
		}
		// The queue's plans are few (at most five pending per token): the
		// section is read and sent whole.
		return "plans", func() ([]byte, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			plans, err := c.planCards(ctx)
			if err != nil {
				return nil, err
			}
			return renderBytes(templates.PlansSection(plans, "true"))
		}
	}
	call := ev.Call
	if call == nil {
		return "", nil
	}
	if cl.view == viewUnresolved {
		return c.unresolvedFragment(call, v, now)
	}
	if cl.callID != "" {
		if cl.callID != call.ID {
			return "", nil
		}
		return "status:" + v.idHash, func() ([]byte, error) {
			return renderBytes(templates.StatusPush(c.statusView(call, v, now)))
		}
	}
	decide := v.user.Role.CanDecide()
	// The deception check reads every argument; only a filter on warnings
	// needs it.
	if cl.queue.filtered() && !cl.queue.matches(call, cl.queue.Warn && queue.Deceptive(call), c.q.Tools()) {
		// The page never showed this call: its filter keeps it out, and
		// nothing a change makes to a call changes what the filter reads.
		return "", nil
	}
	if coveredVia(call) != "" {
		return c.coveredFragment(ev, call, now)
	}
	// An owner's card is highlighted: the fragment depends on the viewer.
	owned := call.OwnedBy(v.user) != ""
	switch {
	case call.Status == queue.StatusRedeemed && ev.Kind != audit.KindRedeemed:
		return "", nil // leases, outcomes and resolutions: long off the queue
	case ev.Kind == audit.KindSubmitted && call.Status == queue.StatusPending && !cl.queue.takes(call):
		return "new-row", func() ([]byte, error) { return renderBytes(templates.NewRow(call.ID)) }
	case ev.Kind == audit.KindSubmitted && call.Status == queue.StatusPending:
		return "upsert:" + boolKey(decide) + boolKey(owned), func() ([]byte, error) {
			return renderBytes(templates.CardUpsert(c.cardView(call, decide, owned, now)))
		}
	case call.Status == queue.StatusPending:
		return "card:" + boolKey(decide) + boolKey(owned), func() ([]byte, error) {
			return renderBytes(templates.CardItem(c.cardView(call, decide, owned, now), "true"))
		}
	default:
		return keyQueueRemove, func() ([]byte, error) { return renderBytes(templates.Remove("call-" + call.ID)) }
	}
}

// keyQueueRemove is the key of a queue page's fragment that removes a
// call's card.
const keyQueueRemove = "remove"

func boolKey(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// unresolvedFragment is what the Unresolved page is sent for a change of
// call: its card while it waits for a person, its removal once it does
// not (resolved, or a late report came). Cards hold a form, so they are
// rendered per session.
func (c *Console) unresolvedFragment(call *queue.Call, v *viewer, now time.Time) (string, func() ([]byte, error)) {
	if call.Unresolved() {
		return "unresolved:" + v.idHash, func() ([]byte, error) {
			return renderBytes(templates.UnresolvedUpsert(c.unresolvedCard(call, v, now)))
		}
	}
	if call.Status != queue.StatusRedeemed || call.Outcome == nil {
		return "", nil // it never was on the page
	}
	return "unresolved-remove", func() ([]byte, error) {
		return renderBytes(templates.Remove(templates.UnresolvedCard{ID: call.ID}.DOMID()))
	}
}

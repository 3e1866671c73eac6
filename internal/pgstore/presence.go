package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"
)

// PresenceChannel is the NOTIFY channel on which replicas tell each other
// who has which call page open.
const PresenceChannel = "countersign_presence"

// DefaultPresenceRefresh is how often a replica restates who views its
// call pages unless Options.PresenceRefresh says otherwise. A replica's
// viewers are forgotten by the others presenceTTL of its refreshes after
// it last stated them (each message says how long), so those of a
// replica that was killed (and could not say goodbye) vanish within
// three refreshes and a second: 16 s by default.
const DefaultPresenceRefresh = 5 * time.Second

const (
	presenceTTL = 3 // refreshes
	// presenceMaxTTL bounds, in refreshes, the lifetime another replica's
	// message may state: ten times what a replica states itself, so a
	// message written by anyone else with database credentials cannot pin
	// viewers on call pages until a restart.
	presenceMaxTTL = 10 * presenceTTL
	// presencePayloadMax keeps a message under PostgreSQL's NOTIFY payload
	// limit (8000 bytes).
	presencePayloadMax = 7000
)

// presenceMsg is one notification on PresenceChannel.
type presenceMsg struct {
	Replica string `json:"r"`
	// Views are this replica's viewers of each call named: all of them
	// (several messages never split one call's viewers), none when empty.
	Views map[string][]string `json:"v,omitempty"`
	// Sync asks every replica to restate its viewers now: the sender has
	// just started listening and knows nothing.
	Sync bool `json:"sync,omitempty"`
	// Bye says the replica is stopping: forget all its viewers.
	Bye bool `json:"bye,omitempty"`
	// TTL is how long, in milliseconds, the views are kept unless stated
	// again: presenceTTL of the sender's refreshes. A receiver keeps them
	// at most presenceMaxTTL of its refreshes and does not read a message
	// with a negative TTL.
	TTL int64 `json:"ttl,omitempty"`
}

// Presence shares who has which call page open between the replicas of
// one database, over the listener's connection: each replica tells the
// others, by NOTIFY, the names viewing each of its call pages whenever
// they change, and restates them all every refresh. What another replica
// stated is kept until it states otherwise, says goodbye, or falls
// presenceTTL refreshes silent (it was killed, or lost the database).
//
// Presence is advisory: it decides nothing, and nothing of it is stored.
// Sending never blocks the caller; a message that cannot be sent is
// restated with the next refresh.
type Presence struct {
	d       *DB
	id      string // this replica, random per process
	log     *slog.Logger
	refresh time.Duration
	now     func() time.Time
	kick    chan struct{}

	mu       sync.Mutex
	local    map[string][]string              // call → this replica's viewers, sorted, never empty
	dirty    map[string]bool                  // calls whose viewers are still to be sent
	restate  bool                             // send every call's viewers with the next message
	sync     bool                             // ask the others to restate with the next message
	remote   map[string]map[string]remoteView // call → replica → its viewers
	onChange []func(callID string)
}

// remoteView is what another replica last said of one call's viewers.
type remoteView struct {
	names   []string
	expires time.Time
}

func newPresence(d *DB, log *slog.Logger, refresh time.Duration) *Presence {
	if refresh <= 0 {
		refresh = DefaultPresenceRefresh
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Presence{
		d: d, id: hex.EncodeToString(b[:]), log: log, refresh: refresh, now: time.Now,
		kick: make(chan struct{}, 1), local: map[string][]string{}, dirty: map[string]bool{},
		remote: map[string]map[string]remoteView{},
	}
}

// Viewing says who has callID's page open on this replica now (nobody
// when names is empty). It never blocks; the other replicas hear of a
// change shortly after.
func (p *Presence) Viewing(callID string, names []string) {
	names = sortedSet(names)
	p.mu.Lock()
	if slices.Equal(p.local[callID], names) {
		p.mu.Unlock()
		return
	}
	if len(names) == 0 {
		delete(p.local, callID)
	} else {
		p.local[callID] = names
	}
	p.dirty[callID] = true
	p.mu.Unlock()
	p.wake()
}

// Others are the names viewing callID's page on other replicas, sorted.
func (p *Presence) Others(callID string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []string
	for _, v := range p.remote[callID] {
		names = append(names, v.names...)
	}
	return sortedSet(names)
}

// OnChange registers f, called with a call's id when Others of that call
// may have changed. It is called on the listener's goroutines and must
// not block. Register before the listener hears anything.
func (p *Presence) OnChange(f func(callID string)) {
	p.mu.Lock()
	p.onChange = append(p.onChange, f)
	p.mu.Unlock()
}

func (p *Presence) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// listening is called each time the listener has (re)started listening:
// messages sent meanwhile were missed, and the others may have forgotten
// this replica's viewers, so it asks for theirs and restates its own.
func (p *Presence) listening() {
	p.mu.Lock()
	p.sync, p.restate = true, true
	p.mu.Unlock()
	p.wake()
}

// receive handles one notification on PresenceChannel.
func (p *Presence) receive(payload string) {
	var m presenceMsg
	if err := json.Unmarshal([]byte(payload), &m); err != nil || m.Replica == "" {
		p.log.Warn("presence: a notification this version does not read", slog.String("payload", payload))
		return
	}
	if m.Replica == p.id {
		return // its own, heard back
	}
	if m.TTL < 0 {
		p.log.Warn("presence: a notification with a negative lifetime; ignored", slog.String("payload", payload))
		return
	}
	expires := p.now().Add(p.lifetime(m.TTL))
	var changed []string
	p.mu.Lock()
	if m.Sync {
		p.restate = true
		p.wake()
	}
	if m.Bye {
		for call, by := range p.remote {
			if _, ok := by[m.Replica]; ok {
				delete(by, m.Replica)
				changed = append(changed, call)
			}
			if len(by) == 0 {
				delete(p.remote, call)
			}
		}
	}
	for call, names := range m.Views {
		names = sortedSet(names)
		by := p.remote[call]
		before, had := by[m.Replica]
		if len(names) == 0 {
			if had {
				delete(by, m.Replica)
				if len(by) == 0 {
					delete(p.remote, call)
				}
				changed = append(changed, call)
			}
			continue
		}
		if by == nil {
			by = map[string]remoteView{}
			p.remote[call] = by
		}
		by[m.Replica] = remoteView{names: names, expires: expires}
		if !had || !slices.Equal(before.names, names) {
			changed = append(changed, call)
		}
	}
	fs := p.onChange
	p.mu.Unlock()
	p.tell(fs, changed)
}

// lifetime is how long the views of a message stating ttl milliseconds
// are kept: presenceTTL default refreshes when it states none, and at most
// presenceMaxTTL refreshes (of this replica's refresh, or the default when
// that is shorter). The bound is applied before the conversion, which would
// overflow for a ttl over about 292 years.
func (p *Presence) lifetime(ttl int64) time.Duration {
	if ttl == 0 {
		return presenceTTL * DefaultPresenceRefresh
	}
	bound := presenceMaxTTL * max(p.refresh, DefaultPresenceRefresh)
	if ttl >= bound.Milliseconds() {
		return bound
	}
	return time.Duration(ttl) * time.Millisecond
}

// expire forgets what replicas that fell silent said.
func (p *Presence) expire() {
	now := p.now()
	var changed []string
	p.mu.Lock()
	for call, by := range p.remote {
		for r, v := range by {
			if !v.expires.After(now) {
				delete(by, r)
				changed = append(changed, call)
			}
		}
		if len(by) == 0 {
			delete(p.remote, call)
		}
	}
	fs := p.onChange
	p.mu.Unlock()
	p.tell(fs, sortedSet(changed))
}

func (p *Presence) tell(fs []func(string), calls []string) {
	for _, call := range calls {
		for _, f := range fs {
			f(call)
		}
	}
}

// run sends this replica's changes and refreshes until ctx ends, then says
// goodbye.
func (p *Presence) run(ctx context.Context) {
	tick := time.NewTicker(p.refresh)
	defer tick.Stop()
	// Other replicas' views expire on their own refreshes: look at least
	// once a second.
	check := time.NewTicker(min(p.refresh, time.Second))
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			bye, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			p.notify(bye, presenceMsg{Replica: p.id, Bye: true})
			cancel()
			return
		case <-p.kick:
		case <-check.C:
			p.expire()
			continue
		case <-tick.C:
			p.mu.Lock()
			p.restate = true
			p.mu.Unlock()
		}
		p.flush(ctx)
	}
}

// flush sends what the others have not heard yet: the viewers of the calls
// that changed (every call's, on a restatement), in as few messages as fit.
func (p *Presence) flush(ctx context.Context) {
	p.mu.Lock()
	views := map[string][]string{}
	if p.restate {
		for call, names := range p.local {
			views[call] = names
		}
	}
	for call := range p.dirty {
		views[call] = p.local[call] // nil: nobody any more
	}
	ask := p.sync
	p.dirty, p.restate, p.sync = map[string]bool{}, false, false
	p.mu.Unlock()
	if len(views) == 0 && !ask {
		return
	}
	msgs := p.split(views)
	if len(msgs) == 0 {
		msgs = []presenceMsg{{Replica: p.id}}
	}
	msgs[0].Sync = ask
	for i, m := range msgs {
		if !p.notify(ctx, m) {
			// Not sent: send these calls again with the next message.
			p.mu.Lock()
			for _, rest := range msgs[i:] {
				for call := range rest.Views {
					p.dirty[call] = true
				}
				p.sync = p.sync || rest.Sync
			}
			p.mu.Unlock()
			return
		}
	}
}

// split packs views into messages under the payload limit. The viewers of
// one call are never split across messages (each message says all of a
// call's viewers); a call with more names than one message holds has the
// names that fit sent.
func (p *Presence) split(views map[string][]string) []presenceMsg {
	calls := make([]string, 0, len(views))
	for call := range views {
		calls = append(calls, call)
	}
	sort.Strings(calls)
	var out []presenceMsg
	cur, size := presenceMsg{Replica: p.id, Views: map[string][]string{}}, 64
	for _, call := range calls {
		names := views[call]
		n := entrySize(call, names)
		for n > presencePayloadMax-64 && len(names) > 0 {
			names = names[:len(names)-1]
			n = entrySize(call, names)
		}
		if len(names) < len(views[call]) {
			p.log.Warn("presence: too many viewers of one call to tell the other replicas; naming those that fit",
				slog.String("call", call), slog.Int("viewers", len(views[call])), slog.Int("named", len(names)))
		}
		if size+n > presencePayloadMax && len(cur.Views) > 0 {
			out = append(out, cur)
			cur, size = presenceMsg{Replica: p.id, Views: map[string][]string{}}, 64
		}
		cur.Views[call] = names
		size += n
	}
	if len(cur.Views) > 0 {
		out = append(out, cur)
	}
	return out
}

// entrySize is the encoded size of one call's entry in a message.
func entrySize(call string, names []string) int {
	k, _ := json.Marshal(call)
	v, _ := json.Marshal(names)
	return len(k) + len(v) + 2
}

// notify sends one message through the pool; false when it failed.
func (p *Presence) notify(ctx context.Context, m presenceMsg) bool {
	m.TTL = (presenceTTL * p.refresh).Milliseconds()
	payload, err := json.Marshal(m)
	if err != nil {
		return false
	}
	if _, err := p.d.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, PresenceChannel, string(payload)); err != nil {
		if ctx.Err() == nil {
			p.log.Warn("presence: could not tell the other replicas who views which call; retrying with the next refresh",
				slog.Any("error", err))
		}
		return false
	}
	return true
}

// sortedSet returns names sorted without repeats, in a new slice (nil
// when empty).
func sortedSet(names []string) []string {
	if len(names) == 0 {
		return nil
	}
	out := slices.Clone(names)
	sort.Strings(out)
	return slices.Compact(out)
}

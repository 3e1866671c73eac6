package queue

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/tools"
)

// Policy constants of DESIGN §5.
const (
	// RetryLimit is how many content rejections in a row an (actor, tool)
	// pair may have before it is blocked.
	RetryLimit = 3
	// DeniedMemory is how long a denied digest is refused outright.
	DeniedMemory = 10 * time.Minute
	// MaxWait bounds a long-poll.
	MaxWait = 60 * time.Second
	// MaxReasonBytes bounds a denial reason and an outcome detail.
	MaxReasonBytes = 2000
)

// Signer mints and verifies grants; *grant.Keyring implements it.
type Signer interface {
	Mint(c grant.Claims) (token, kid string, err error)
	Verify(token string, ctx grant.Context, call grant.Presented, now time.Time) grant.Result
}

// Event is a committed change, published after the transaction commits.
type Event struct {
	Kind  string // an audit kind: submitted, approved, granted, denied, ...
	Call  *Call  // the call after the change; nil for retry events
	Block *Block // for retry_blocked and retry_cleared
	// Reason is set for redemption_refused.
	Reason string
	// Editor is set for countered: the operator who answered the call
	// with an edited one.
	Editor string
	// Freeze is set for frozen and unfrozen.
	Freeze *Freeze
	// Allowance is set for the changes of an allowance (KindAllowanceGiven,
	// KindAllowanceConfirmed, KindAllowanceRevoked, KindAllowanceEnded):
	// the allowance after the change.
	Allowance *Allowance
	// Plan is set for the changes of a plan (KindPlanSubmitted,
	// KindPlanApproved, KindPlanDenied, KindPlanCancelled,
	// KindPlanExpired): the plan after the change.
	Plan *Plan
	// Items are the plan's items, on a plan's changes.
	Items []*Call
	// Delegation is set for KindDelegationGiven and KindDelegationEnded:
	// the delegation after the change. Its delegate's standing changed,
	// so what people may decide did too.
	Delegation *Delegation
	// Remote marks a change another server committed to the shared store
	// (a replica), published here by Apply: waiters wake and pages update
	// as for a local change, but it was not made here (metrics count only
	// their own changes).
	Remote bool
}

// Config holds the service's collaborators.
type Config struct {
	Store Store
	// Tools is the registry calls are validated against; when nil, the
	// registry Policy was compiled for.
	Tools *tools.Registry
	// Policy holds the compiled rules of Tools; nil means no rules: every
	// call goes to people.
	Policy *policy.Policy
	Signer Signer
	// Presentations checks the presentation tokens of decision pages;
	// with it, every decision through the browser must carry the token of
	// the page that showed the call (ApproveInput.Presented).
	Presentations *present.Key
	Now           func() time.Time
	Logger        *slog.Logger
	// Notifier, when set, turns each change into outbox notices written by
	// the change's own transaction.
	Notifier Notifier
	// MaxBlocksPerActor is how many (actor, tool) retry blocks an actor may
	// hold before it is blocked for every tool (default
	// DefaultMaxBlocksPerActor).
	MaxBlocksPerActor int
	// MaxPendingPerToken is how many calls one API token may keep waiting
	// for a decision (default DefaultMaxPendingPerToken); one more is
	// refused with ErrTooManyPending and stored nowhere.
	MaxPendingPerToken int
	// MaxAllowancesPerTool and MaxAllowancesPerGiver bound the live
	// allowances of one tool and of one giver (defaults
	// DefaultMaxAllowancesPerTool, DefaultMaxAllowancesPerGiver); one more
	// is refused.
	MaxAllowancesPerTool  int
	MaxAllowancesPerGiver int
	// Tracer makes a span of every store write (internal/tracing); nil
	// makes none and costs nothing.
	Tracer WriteTracer
}

// WriteTracer makes the span of a store write. StartWrite's function ends
// it with the ids and tools of the calls the write changed, the event ids
// of the notifications it enqueued, and its error (nil once committed).
type WriteTracer interface {
	StartWrite(ctx context.Context) (context.Context, func(calls, tools, events []string, err error))
}

// Service applies the queue's rules. It is safe for concurrent use; the
// store's write transactions serialize every decision.
type Service struct {
	store     Store
	maxBlocks int
	// maxPending bounds the pending calls of one token (Config.MaxPendingPerToken).
	maxPending int
	// maxAllowancesTool and maxAllowancesGiver bound live allowances
	// (Config.MaxAllowancesPerTool, Config.MaxAllowancesPerGiver).
	maxAllowancesTool, maxAllowancesGiver int
	tools                                 *tools.Registry
	policy                                *policy.Policy
	signer                                Signer
	present                               *present.Key
	now                                   func() time.Time
	log                                   *slog.Logger
	notify                                Notifier
	scopes                                scopeCache
	tracer                                WriteTracer

	waiters waiters
	// planWaits wakes plan long-polls when their plan is decided or ends.
	planWaits planWaiters

	mu        sync.RWMutex
	listeners []func(Event)
	kick      chan struct{} // wakes the expiry loop when a deadline may have moved
	wakeAt    atomic.Int64  // unix ms when the expiry loop next wakes by itself
	// leaseKick and leaseWakeAt are the same for the lease loop.
	leaseKick   chan struct{}
	leaseWakeAt atomic.Int64
	stopping    chan struct{}
	stopOnce    sync.Once
}

// NewService returns a queue over the given store.
func NewService(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	// The store keeps times to the millisecond; so does the service, so a
	// call reads the same from memory and from the database.
	clock := cfg.Now
	cfg.Now = func() time.Time { return clock().UTC().Truncate(time.Millisecond) }
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Tools == nil && cfg.Policy != nil {
		cfg.Tools = cfg.Policy.Registry()
	}
	return &Service{
		store: cfg.Store, tools: cfg.Tools, policy: cfg.Policy, signer: cfg.Signer, present: cfg.Presentations, now: cfg.Now, log: cfg.Logger, notify: cfg.Notifier, tracer: cfg.Tracer,
		maxBlocks:          cmp.Or(max(cfg.MaxBlocksPerActor, 0), DefaultMaxBlocksPerActor),
		maxPending:         cmp.Or(max(cfg.MaxPendingPerToken, 0), DefaultMaxPendingPerToken),
		maxAllowancesTool:  cmp.Or(max(cfg.MaxAllowancesPerTool, 0), DefaultMaxAllowancesPerTool),
		maxAllowancesGiver: cmp.Or(max(cfg.MaxAllowancesPerGiver, 0), DefaultMaxAllowancesPerGiver),
		waiters:            waiters{m: map[string]map[chan *Call]struct{}{}},
		kick:               make(chan struct{}, 1),
		leaseKick:          make(chan struct{}, 1),
		stopping:           make(chan struct{}),
	}
}

// Tools returns the registry the service validates against.
func (s *Service) Tools() *tools.Registry { return s.tools }

// Now is the service's clock: the time it stamps on what it records.
func (s *Service) Now() time.Time { return s.now() }

// Policy returns the compiled rules, nil when there are none.
func (s *Service) Policy() *policy.Policy { return s.policy }

// Subscribe registers fn to receive every committed change. fn runs on the
// goroutine that made the change and must not block.
func (s *Service) Subscribe(fn func(Event)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, fn)
}

// Apply publishes a change that another server committed to the store they
// share (several replicas on one PostgreSQL database; the store's listener
// calls it after the commit): long-polls waiting on the call wake, and
// subscribers hear of it as of a local change, with Remote set. A pending
// call may bring the next deadline forward, so the expiry loop looks
// again.
func (s *Service) Apply(ev Event) {
	ev.Remote = true
	if ev.Call != nil && ev.Call.Status == StatusPending {
		s.kickExpiry()
	}
	s.publish(ev)
}

func (s *Service) publish(events ...Event) {
	s.mu.RLock()
	ls := s.listeners
	s.mu.RUnlock()
	for _, ev := range events {
		if ev.Call != nil {
			s.waiters.wake(ev.Call)
		}
		if ev.Plan != nil && ev.Plan.Status != PlanPending {
			s.planWaits.wake(ev.Plan.ID)
		}
		for _, fn := range ls {
			fn(ev)
		}
	}
}

// update runs fn in a transaction and publishes its events after commit,
// in the order of the commits (the store runs the publication after the
// commit, before Update returns). When fn returns commitAnd(err), what fn
// wrote is committed and err is returned: a refusal that is itself
// recorded (an audited rejection, or an overdue call expired on the spot).
func (s *Service) update(ctx context.Context, fn func(tx Tx, emit func(Event)) error) error {
	if s.tracer != nil {
		return s.tracedUpdate(ctx, fn)
	}
	return s.untracedUpdate(ctx, fn, nil)
}

// tracedUpdate is update inside a store write span, which names the calls
// the write changed and the notifications it enqueued.
func (s *Service) tracedUpdate(ctx context.Context, fn func(tx Tx, emit func(Event)) error) error {
	ctx, end := s.tracer.StartWrite(ctx)
	var seen traced
	err := s.untracedUpdate(ctx, fn, &seen)
	end(seen.calls, seen.tools, seen.events, err)
	return err
}

// traced is what a traced write changed: its last attempt's calls, tools
// and notifications' event ids.
type traced struct{ calls, tools, events []string }

func (t *traced) see(events []Event, ns []Notice) {
	t.calls, t.tools, t.events = t.calls[:0], t.tools[:0], t.events[:0]
	for _, ev := range events {
		switch {
		case ev.Call != nil:
			t.calls, t.tools = appendNew(t.calls, ev.Call.ID), appendNew(t.tools, ev.Call.Tool)
		case ev.Allowance != nil:
			t.tools = appendNew(t.tools, ev.Allowance.Tool)
		}
	}
	for _, n := range ns {
		t.events = appendNew(t.events, n.EventID)
	}
}

func appendNew(list []string, s string) []string {
	if s == "" || slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

func (s *Service) untracedUpdate(ctx context.Context, fn func(tx Tx, emit func(Event)) error, seen *traced) error {
	var refusal error
	err := s.store.Update(ctx, func(tx Tx) error {
		var events []Event
		refusal = nil
		err := fn(tx, func(ev Event) {
			if ev.Call != nil {
				ev.Call = ev.Call.Clone()
			}
			if ev.Allowance != nil {
				ev.Allowance = ev.Allowance.Clone()
			}
			events = append(events, ev)
		})
		var r refused
		if errors.As(err, &r) {
			refusal, err = r.err, nil
		}
		if err != nil {
			return err
		}
		ns, err := s.enqueueNotices(tx, events)
		if err != nil {
			return err
		}
		if seen != nil {
			seen.see(events, ns)
		}
		if len(events) > 0 {
			tx.AfterCommit(func() { s.publish(events...) })
		}
		return nil
	})
	if err != nil {
		return err
	}
	return refusal
}

// refused carries a refusal out of a transaction that must still commit.
type refused struct{ err error }

func (r refused) Error() string { return r.err.Error() }

func commitAnd(err error) error { return refused{err} }

func (s *Service) entry(kind string, c *Call, principal, channel string, details map[string]any) *audit.Entry {
	if details == nil {
		details = map[string]any{}
	}
	return s.entryOf(kind, c, principal, channel, details)
}

// entryOf is entry with details of any type canonical.Encode takes (an
// Object whose members are written in order, say).
func (s *Service) entryOf(kind string, c *Call, principal, channel string, details any) *audit.Entry {
	id := ""
	if c != nil {
		id = c.ID
	}
	return &audit.Entry{Time: audit.FormatTime(s.now()), Kind: kind, CallID: id,
		Principal: principal, Channel: channel, Details: details}
}

package queue

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/policy"
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
	// Freeze is set for frozen and unfrozen.
	Freeze *Freeze
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
	Now    func() time.Time
	Logger *slog.Logger
	// Notifier, when set, turns each change into outbox notices written by
	// the change's own transaction.
	Notifier Notifier
	// MaxBlocksPerActor is how many (actor, tool) retry blocks an actor may
	// hold before it is blocked for every tool (default
	// DefaultMaxBlocksPerActor).
	MaxBlocksPerActor int
}

// Service applies the queue's rules. It is safe for concurrent use; the
// store's write transactions serialize every decision.
type Service struct {
	store     Store
	maxBlocks int
	tools     *tools.Registry
	policy    *policy.Policy
	signer    Signer
	now       func() time.Time
	log       *slog.Logger
	notify    Notifier

	waiters waiters

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
		store: cfg.Store, tools: cfg.Tools, policy: cfg.Policy, signer: cfg.Signer, now: cfg.Now, log: cfg.Logger, notify: cfg.Notifier,
		maxBlocks: cmp.Or(max(cfg.MaxBlocksPerActor, 0), DefaultMaxBlocksPerActor),
		waiters:   waiters{m: map[string]map[chan *Call]struct{}{}},
		kick:      make(chan struct{}, 1),
		leaseKick: make(chan struct{}, 1),
		stopping:  make(chan struct{}),
	}
}

// Tools returns the registry the service validates against.
func (s *Service) Tools() *tools.Registry { return s.tools }

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
	var refusal error
	err := s.store.Update(ctx, func(tx Tx) error {
		var events []Event
		refusal = nil
		err := fn(tx, func(ev Event) {
			if ev.Call != nil {
				ev.Call = ev.Call.Clone()
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
		if err := s.enqueueNotices(tx, events); err != nil {
			return err
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
	id := ""
	if c != nil {
		id = c.ID
	}
	if details == nil {
		details = map[string]any{}
	}
	return &audit.Entry{Time: audit.FormatTime(s.now()), Kind: kind, CallID: id,
		Principal: principal, Channel: channel, Details: details}
}

// Submit parses, validates and stores a proposal from an agent. It returns
// the call and whether it was newly created (false when an identical
// envelope from the same actor is still pending or approved).
func (s *Service) Submit(ctx context.Context, who Principal, body []byte) (*Call, bool, error) {
	p, perr := canonical.ParseProposal(body)
	return s.submit(ctx, who, body, p, perr)
}

// SubmitProposal is Submit of a proposal that the caller parsed strictly
// itself, with internal/canonical and canonical.ProposalFrom (the MCP
// gateway reads a tools/call's arguments with the number paths of the
// mirrored tool's pinned schema). When parsing failed, perr is the
// canonical.Problems it found and p.Tool names the tool that was called:
// the rejection is recorded and counted against (actor, tool) exactly as
// Submit's. Everything after parsing is Submit's.
func (s *Service) SubmitProposal(ctx context.Context, who Principal, p canonical.Proposal, perr error) (*Call, bool, error) {
	return s.submit(ctx, who, nil, p, perr)
}

func (s *Service) submit(ctx context.Context, who Principal, body []byte, p canonical.Proposal, perr error) (*Call, bool, error) {
	var t *tools.Tool
	var problems canonical.Problems
	var kind ProposalKind
	if perr != nil {
		problems = problemsOf(perr)
		kind = KindInvalidArguments
		if len(problems) == 1 && isParseCode(problems[0].Code) {
			kind = KindParse
		}
	} else if t, problems = s.tools.Check(p); len(problems) > 0 {
		kind = KindInvalidArguments
		if t == nil {
			kind = KindUnknownTool
		}
	}
	toolName := p.Tool
	if toolName == "" {
		toolName = toolHint(body)
	}
	if len(problems) > 0 {
		return nil, false, s.reject(ctx, who, s.retryTool(toolName), &ProposalError{Kind: kind, Tool: toolName, Problems: problems})
	}
	if t.Audience != who.Audience {
		err := &AudienceError{Tool: t.Name, ToolAudience: t.Audience, TokenAudience: who.Audience}
		var out error = err
		if aerr := s.update(ctx, func(tx Tx, emit func(Event)) error {
			out = err
			blocked, err := s.retryBlocked(tx, who.Actor, t.Name)
			if err != nil || blocked {
				out = ErrRetryLimit
				return err
			}
			if err := tx.Append(s.entry(audit.KindRejected, nil, who.Actor, audit.ChannelAPI, map[string]any{
				"tool": t.Name, "codes": []string{"audience_not_allowed"}, "audience": who.Audience})); err != nil {
				return err
			}
			return s.countRefusal(tx, who.Actor, t.Name, emit)
		}); aerr != nil {
			return nil, false, aerr
		}
		return nil, false, out
	}
	env := p.Envelope(who.Actor, who.Audience)
	env.Args = t.Bound(p.Args)
	envBytes, err := env.Canonical()
	if err != nil {
		return nil, false, fmt.Errorf("queue: canonical envelope: %w", err)
	}
	now := s.now()
	c := &Call{
		ID: NewCallID(), Actor: who.Actor, Audience: who.Audience, Tool: p.Tool, Target: p.Target,
		Args: p.Args, Rationale: p.Rationale, Envelope: envBytes, Digest: canonical.DigestOf(envBytes),
		Status: StatusPending, ApprovalsRequired: t.Approvals, GrantTTL: t.GrantTTL,
		CreatedAt: now, DecideBy: now.Add(t.DecideWithin), ToolDigest: t.DefinitionDigest,
		OutcomeWithin: t.OutcomeWithin,
		Owners:        append([]string(nil), who.Owners...), Approvers: t.Approvers, RequirePasskey: t.RequirePasskey,
	}
	// The rules run before the write lock is taken; what they decide is
	// applied in the transaction that stores the call.
	decision := s.decide(t, c)
	if decision.Action == policy.Ask {
		c.ApprovalsRequired = max(t.Approvals, decision.Approvals)
		c.RequirePasskey = c.RequirePasskey || decision.RequirePasskey
	}
	if decision.Rule != nil && len(decision.Rule.Notify) > 0 {
		c.Notify = append([]string(nil), decision.Rule.Notify...)
	}
	// A rule that approves mints the grant in the submission's
	// transaction; it is signed now, before the write lock (see presign).
	var pre *presigned
	if decision.Automatic() && decision.Action == policy.Approve {
		pre = s.presign(c, now)
	}
	var result *Call
	created := false
	err = s.update(ctx, func(tx Tx, emit func(Event)) error {
		rs, err := tx.Retry(who.Actor, p.Tool)
		if err != nil {
			return err
		}
		if rs.Blocked() {
			return ErrRetryLimit
		}
		if all, err := tx.Retry(who.Actor, AnyTool); err != nil {
			return err
		} else if all.Blocked() {
			return ErrRetryLimit
		}
		prev, err := tx.LatestByDigest(who.Actor, c.Digest)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return err
		case prev.ToolDigest == c.ToolDigest && (prev.Status == StatusPending && prev.DecideBy.After(now) ||
			prev.Status == StatusApproved && prev.GrantExpiresAt.After(now)):
			// An identical call made under another definition of the tool
			// is not this call: it can never be approved or redeemed
			// (tool_changed), so a new one is made.
			result = prev
			return nil
		case prev.Status == StatusDenied && now.Sub(prev.DecidedAt) < DeniedMemory:
			reason := ""
			if prev.Denial != nil {
				reason = prev.Denial.Reason
			}
			if err := tx.Append(s.entry(audit.KindRejected, prev, who.Actor, audit.ChannelAPI, map[string]any{
				"tool": p.Tool, "codes": []string{"previously_denied"}, "digest": c.Digest})); err != nil {
				return err
			}
			// Resubmitting what a person denied is a loop like any other:
			// it counts against (actor, tool).
			if err := s.countRefusal(tx, who.Actor, p.Tool, emit); err != nil {
				return err
			}
			return commitAnd(&DeniedError{CallID: prev.ID, Reason: reason, At: prev.DecidedAt})
		}
		if f, err := frozen(tx, p.Tool, who.Actor); err != nil {
			return err
		} else if f != nil {
			if err := tx.Append(s.entry(audit.KindRejected, nil, who.Actor, audit.ChannelAPI, map[string]any{
				"tool": p.Tool, "codes": []string{"frozen"}, "digest": c.Digest, "freeze": f.ID})); err != nil {
				return err
			}
			return commitAnd(&FrozenError{Freeze: *f})
		}
		if rs.Count > 0 {
			if err := tx.SetRetry(who.Actor, p.Tool, RetryState{}); err != nil {
				return err
			}
		}
		if err := tx.InsertCall(c); err != nil {
			return err
		}
		details := map[string]any{
			"tool": c.Tool, "target": c.Target, "audience": c.Audience, "digest": c.Digest,
			"args": c.Args, "rationale": c.Rationale, "decide_by": formatTime(c.DecideBy),
			"approvals_required": int64(c.ApprovalsRequired), "tool_digest": c.ToolDigest}
		if len(c.Owners) > 0 {
			details["owners"] = c.Owners
		}
		if !c.Approvers.Empty() {
			details["approvers"] = map[string]any{"roles": nonNil(c.Approvers.Roles), "groups": nonNil(c.Approvers.Groups)}
		}
		if c.RequirePasskey {
			details["approve_with"] = tools.ApproveWithPasskey
		}
		if err := tx.Append(s.entry(audit.KindSubmitted, c, who.Actor, audit.ChannelAPI, details)); err != nil {
			return err
		}
		result, created = c, true
		emit(Event{Kind: audit.KindSubmitted, Call: c})
		return s.applyRule(tx, c, decision, pre, emit)
	})
	var denied *PolicyDeniedError
	if errors.As(err, &denied) {
		return c, true, err
	}
	if err != nil {
		return nil, false, err
	}
	if created && c.Status == StatusPending && !s.wakesBefore(c.DecideBy) {
		s.kickExpiry()
	}
	return result, created, nil
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// problemsOf returns the problems of a parse error: canonical.Problems, or
// the single *canonical.Problem of canonical.ParseWith.
func problemsOf(err error) canonical.Problems {
	var ps canonical.Problems
	if errors.As(err, &ps) {
		return ps
	}
	var p *canonical.Problem
	if errors.As(err, &p) {
		return canonical.Problems{*p}
	}
	return canonical.Problems{{Code: canonical.CodeMalformedJSON, Message: err.Error(), Offset: -1}}
}

// isParseCode reports whether code comes from reading the JSON text itself
// rather than from checking its content.
func isParseCode(code string) bool {
	switch code {
	case canonical.CodeMalformedJSON, canonical.CodeInvalidUTF8, canonical.CodeDuplicateKey,
		canonical.CodeFloatNotAllowed, canonical.CodeInexactNumber, canonical.CodeOutOfRange, canonical.CodeTooDeep,
		canonical.CodeTooLarge:
		return true
	}
	return false
}

// toolHint finds the tool a body meant to call when the body did not parse
// as a whole, so its rejection counts against the right (actor, tool) pair.
// Only a top-level "tool" member counts (a decoy inside args is skipped), it
// is read from at most the first 64 KiB, and only a well-formed name is
// used; two top-level tool members that disagree name none.
func toolHint(body []byte) string {
	sc := hintScanner{b: body[:min(len(body), 64<<10)]}
	if !sc.byte('{') {
		return ""
	}
	found := ""
	for {
		key, ok := sc.str()
		if !ok || !sc.byte(':') {
			return found
		}
		sc.space()
		if key == "tool" && sc.peek() == '"' {
			name, ok := sc.str()
			if !ok {
				return found
			}
			if found != "" && found != name {
				return ""
			}
			found = name
		} else if !sc.skipValue() {
			return found
		}
		if !sc.byte(',') {
			break
		}
	}
	if found == "" {
		return ""
	}
	v, err := canonical.Parse([]byte(`{"tool":` + strconv.Quote(found) + `,"target":"x","args":{}}`))
	if err != nil {
		return ""
	}
	if p, problems := canonical.ProposalFrom(v, "", false); len(problems) == 0 {
		return p.Tool
	}
	return ""
}

// hintScanner reads just enough JSON to walk an object's top-level members
// in a body that may be malformed anywhere.
type hintScanner struct {
	b []byte
	i int
}

func (s *hintScanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

func (s *hintScanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// byte consumes c after white space.
func (s *hintScanner) byte(c byte) bool {
	s.space()
	if s.peek() != c {
		return false
	}
	s.i++
	return true
}

// str reads a string after white space; only plain strings (no escapes) are
// returned, since no valid tool name needs one.
func (s *hintScanner) str() (string, bool) {
	s.space()
	if s.peek() != '"' {
		return "", false
	}
	start, escaped := s.i+1, false
	for s.i++; s.i < len(s.b); s.i++ {
		switch s.b[s.i] {
		case '\\':
			escaped = true
			s.i++
		case '"':
			out := string(s.b[start:s.i])
			s.i++
			if escaped {
				return "\x00", true // never a tool name, but the member is read
			}
			return out, true
		}
	}
	return "", false
}

// skipValue skips one value, nested or not.
func (s *hintScanner) skipValue() bool {
	s.space()
	depth := 0
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case '"':
			if _, ok := s.str(); !ok {
				return false
			}
			if depth == 0 {
				return true
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return true // the end of the enclosing object
			}
			depth--
			if depth == 0 {
				s.i++
				return true
			}
		case ',':
			if depth == 0 {
				return true
			}
		}
		s.i++
	}
	return false
}

// reject records a content rejection and applies the retry cap. It returns
// perr, or ErrRetryLimit when the pair is already blocked.
func (s *Service) reject(ctx context.Context, who Principal, tool string, perr *ProposalError) error {
	s.log.Info("proposal rejected", slog.String("actor", who.Actor), slog.String("tool", tool),
		slog.String("kind", string(perr.Kind)), slog.Any("codes", perr.Problems.Codes()))
	var out error = perr
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		out = perr
		blocked, err := s.retryBlocked(tx, who.Actor, tool)
		if err != nil {
			return err
		}
		if blocked {
			out = ErrRetryLimit
			return nil
		}
		problems := make([]any, 0, len(perr.Problems))
		for _, p := range perr.Problems {
			problems = append(problems, map[string]any{"code": p.Code, "path": p.Path, "message": p.Message})
		}
		details := map[string]any{"tool": tool, "codes": perr.Problems.Codes(), "problems": problems}
		if perr.Tool != tool {
			details["tool_named"] = perr.Tool // what the agent called it, when no tool of the registry
		}
		if err := tx.Append(s.entry(audit.KindRejected, nil, who.Actor, audit.ChannelAPI, details)); err != nil {
			return err
		}
		return s.countRefusal(tx, who.Actor, tool, emit)
	})
	if err != nil {
		return err
	}
	return out
}

// Retry-cap keys that are not tool names (a tool name never holds a
// parenthesis or a star).
const (
	// UnknownTool is the one (actor, tool) pair that every rejection naming
	// no tool of the registry counts against: unknown, malformed or missing
	// names, so that an agent inventing names makes one block, not one per
	// name.
	UnknownTool = "(unknown)"
	// AnyTool is the actor-wide pair: once an actor holds Config.MaxBlocksPerActor
	// blocks it is blocked for every tool, shown as one block.
	AnyTool = "*"
)

// DefaultMaxBlocksPerActor is how many (actor, tool) blocks an actor may
// hold before the actor is blocked for every tool instead.
const DefaultMaxBlocksPerActor = 10

// retryTool is the retry-cap key of a tool name: the name when the
// registry knows it, else UnknownTool.
func (s *Service) retryTool(name string) string {
	if _, ok := s.tools.Tool(name); ok {
		return name
	}
	return UnknownTool
}

// retryBlocked reports whether actor is refused for tool, by the pair's
// own block or by the actor-wide one.
func (s *Service) retryBlocked(tx Tx, actor, tool string) (bool, error) {
	for _, k := range []string{tool, AnyTool} {
		rs, err := tx.Retry(actor, k)
		if err != nil {
			return false, err
		}
		if rs.Blocked() {
			return true, nil
		}
	}
	return false, nil
}

// countRefusal counts one refusal against (actor, tool) and blocks the
// pair at RetryLimit; the block is audited and pushed. An actor's blocks
// are counted under AnyTool, and the maxBlocks-th blocks the actor
// for every tool.
func (s *Service) countRefusal(tx Tx, actor, tool string, emit func(Event)) error {
	rs, err := tx.Retry(actor, tool)
	if err != nil {
		return err
	}
	rs.Count++
	if rs.Count >= RetryLimit && !rs.Blocked() {
		rs.BlockedAt = s.now()
		if err := s.block(tx, actor, tool, rs, emit); err != nil {
			return err
		}
		all, err := tx.Retry(actor, AnyTool)
		if err != nil {
			return err
		}
		all.Count++
		if all.Count >= s.maxBlocks && !all.Blocked() {
			all.BlockedAt = s.now()
			if err := s.block(tx, actor, AnyTool, all, emit); err != nil {
				return err
			}
		}
		if err := tx.SetRetry(actor, AnyTool, all); err != nil {
			return err
		}
	}
	return tx.SetRetry(actor, tool, rs)
}

func (s *Service) block(tx Tx, actor, tool string, rs RetryState, emit func(Event)) error {
	if err := tx.Append(s.entry(audit.KindRetryBlocked, nil, actor, audit.ChannelAPI, map[string]any{
		"actor": actor, "tool": tool, "count": int64(rs.Count)})); err != nil {
		return err
	}
	emit(Event{Kind: audit.KindRetryBlocked, Block: &Block{Actor: actor, Tool: tool, Count: rs.Count, BlockedAt: rs.BlockedAt}})
	return nil
}

// ClearRetry lifts the retry cap for (actor, tool).
func (s *Service) ClearRetry(ctx context.Context, operator, channel, actor, tool string) error {
	return s.update(ctx, func(tx Tx, emit func(Event)) error {
		if err := mayDecide(tx, operator); err != nil {
			return err
		}
		rs, err := tx.Retry(actor, tool)
		if err != nil {
			return err
		}
		if !rs.Blocked() {
			return ErrNotBlocked
		}
		if err := tx.SetRetry(actor, tool, RetryState{}); err != nil {
			return err
		}
		if tool != AnyTool {
			// One block fewer for the actor-wide count.
			all, err := tx.Retry(actor, AnyTool)
			if err != nil {
				return err
			}
			if all.Count > 0 {
				all.Count--
				if err := tx.SetRetry(actor, AnyTool, all); err != nil {
					return err
				}
			}
		}
		if err := tx.Append(s.entry(audit.KindRetryCleared, nil, operator, channel, map[string]any{
			"actor": actor, "tool": tool})); err != nil {
			return err
		}
		emit(Event{Kind: audit.KindRetryCleared, Block: &Block{Actor: actor, Tool: tool}})
		return nil
	})
}

// Get returns one of the principal's calls. Another actor's call is
// ErrNotFound.
func (s *Service) Get(ctx context.Context, who Principal, id string) (*Call, error) {
	c, err := s.store.Call(ctx, id)
	if err != nil {
		return nil, err
	}
	if c.Actor != who.Actor {
		return nil, ErrNotFound
	}
	return c, nil
}

// Call returns any call, for operators and auditors.
func (s *Service) Call(ctx context.Context, id string) (*Call, error) {
	return s.store.Call(ctx, id)
}

// PendingCalls lists at most limit pending calls, newest first, for the
// console's queue.
func (s *Service) PendingCalls(ctx context.Context, limit int) ([]*Call, error) {
	return s.store.PendingCalls(ctx, limit)
}

// UnresolvedCalls lists at most limit calls that wait for a person to say
// what happened, oldest outcome first.
func (s *Service) UnresolvedCalls(ctx context.Context, limit int) ([]*Call, error) {
	return s.store.UnresolvedCalls(ctx, limit)
}

// CountUnresolved counts the calls UnresolvedCalls lists.
func (s *Service) CountUnresolved(ctx context.Context) (int, error) {
	return s.store.CountUnresolved(ctx)
}

// Blocks lists the (actor, tool) pairs blocked by the retry cap.
func (s *Service) Blocks(ctx context.Context) ([]Block, error) { return s.store.Blocks(ctx) }

// Freezes lists the freezes in force, oldest first.
func (s *Service) Freezes(ctx context.Context) ([]Freeze, error) { return s.store.Freezes(ctx) }

// Wait returns the principal's call as soon as it is no longer pending, or
// when d has passed, ctx ends or the service shuts down.
func (s *Service) Wait(ctx context.Context, who Principal, id string, d time.Duration) (*Call, error) {
	if d > MaxWait {
		d = MaxWait
	}
	ch, done := s.waiters.add(id)
	defer done()
	c, err := s.Get(ctx, who, id)
	if err != nil || c.Status != StatusPending || d <= 0 {
		return c, err
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case changed := <-ch:
			if changed.Status != StatusPending {
				return changed.Clone(), nil
			}
			// A partial approval: the call is still pending; keep waiting.
			continue
		case <-timer.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.stopping:
		}
		return s.Get(context.WithoutCancel(ctx), who, id)
	}
}

// Waiting returns how many long-polls are open.
func (s *Service) Waiting() int64 { return s.waiters.count() }

// Shutdown releases every open long-poll with the call's current state and
// stops the expiry loop.
func (s *Service) Shutdown() {
	s.stopOnce.Do(func() { close(s.stopping) })
}

// Approve records operator's approval of call id, bound to the digest the
// operator was shown. The last approval the tool requires mints the grant in
// the same transaction.
func (s *Service) Approve(ctx context.Context, operator, channel, id, digest string) (*Call, error) {
	return s.ApproveWith(ctx, ApproveInput{Operator: operator, Channel: channel, CallID: id, Digest: digest})
}

// ApproveInput is one operator's approval of a call, bound to the digest
// the operator was shown.
type ApproveInput struct {
	Operator, Channel, CallID, Digest string
	// Comment is an optional note (at most MaxReasonBytes), stored with the
	// approval, recorded in its audit entry and returned to the agent.
	Comment string
	// Passkey is set when the operator's passkey signed the approval; a
	// call that requires one is refused without it.
	Passkey *PasskeyProof
	// Confirm is what the approver typed where the call's tool asks for its
	// target or a word to be typed (confirm: in the tools file), and
	// AcceptWarnings acknowledges the call's deception warning. Both are
	// checked in the decision's transaction against the call as stored,
	// whatever the channel (see Confirmation).
	Confirm        string
	AcceptWarnings bool
	// Seen is the call as the approver's channel read it before deciding,
	// if it did. It is a hint, never trusted: when this approval looks like
	// the last one the call needs, the grant is signed before the write
	// lock is taken, and the decision's transaction, which checks
	// everything on the call as stored, uses that signature only if it
	// mints exactly that grant.
	Seen *Call
}

// PasskeyProof is a verified passkey assertion over one call (the server
// checks it with internal/passkey before approving): which passkey, its
// signature counter before and after, its record with the counter
// advanced, and the evidence.
type PasskeyProof struct {
	Operator     string
	CredentialID []byte
	Name         string
	// CountBefore is the counter the assertion was checked against;
	// CountAfter the authenticator's new one. The approval is refused when
	// the stored counter is no longer CountBefore (another approval used
	// the passkey at the same moment, or it was removed).
	CountBefore, CountAfter uint32
	Record                  []byte
	// Evidence is the JSON of passkey.Evidence; its call_id, digest and
	// operator must be this approval's.
	Evidence []byte
}

// ApproveWith is Approve with the approval's comment.
func (s *Service) ApproveWith(ctx context.Context, in ApproveInput) (*Call, error) {
	operator, channel, id, digest := in.Operator, in.Channel, in.CallID, in.Digest
	comment := strings.TrimSpace(in.Comment)
	if len(comment) > MaxReasonBytes {
		return nil, fmt.Errorf("%w (at most %d bytes)", ErrCommentTooLong, MaxReasonBytes)
	}
	if err := account.CheckReserved(operator); err != nil {
		return nil, fmt.Errorf("queue: operator %q: %w", operator, err)
	}
	var evidence any
	if in.Passkey != nil {
		var err error
		if evidence, err = checkEvidence(in); err != nil {
			return nil, err
		}
	}
	// When the approver's channel read the call and this approval looks
	// like the last one it needs, the grant is signed now, before the write
	// lock; the transaction below uses it only if it does mint this call's
	// grant, and checks everything as if it had not been signed.
	var pre *presigned
	if c := in.Seen; c != nil && c.ID == id && c.Status == StatusPending && c.Digest == digest &&
		len(c.Approvals)+1 >= c.ApprovalsRequired && !c.ApprovedBy(operator) {
		pre = s.presign(c, s.now())
	}
	var out *Call
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		u, err := decider(tx, operator)
		if err != nil {
			return err
		}
		c, err := s.loadPending(tx, id, emit)
		if err != nil {
			return err
		}
		if digest != c.Digest {
			return ErrDigestMismatch
		}
		if canonical.DigestOf(c.Envelope) != c.Digest {
			// The stored envelope is not what the digest covers: the
			// database was edited. Nothing about this call can be trusted.
			return fmt.Errorf("%w: call %s", ErrIntegrity, c.ID)
		}
		if s.ToolChanged(c) {
			return ErrToolChanged
		}
		if f, err := frozen(tx, c.Tool, c.Actor); err != nil {
			return err
		} else if f != nil {
			return &FrozenError{Freeze: *f}
		}
		if err := mayApprove(c, u); err != nil {
			return err
		}
		if err := notApprovedAsAnother(tx, c, u); err != nil {
			return err
		}
		if c.RequirePasskey && in.Passkey == nil {
			return ErrPasskeyRequired
		}
		if err := Confirmation(s.Tools(), c, in.Confirm, in.AcceptWarnings); err != nil {
			return err
		}
		now := s.now()
		a := Approval{Operator: operator, Channel: channel, At: now, Comment: comment}
		if p := in.Passkey; p != nil {
			if err := tx.UsePasskey(operator, p.CredentialID, p.CountBefore, p.CountAfter, p.Record, now); err != nil {
				return err
			}
			a.Passkey = &ApprovalPasskey{CredentialID: p.CredentialID, Name: p.Name, Evidence: p.Evidence}
		}
		if err := tx.AddApproval(c.ID, a); err != nil {
			return err
		}
		c.Approvals = append(c.Approvals, a)
		details := map[string]any{"digest": c.Digest, "received": int64(len(c.Approvals)), "required": int64(c.ApprovalsRequired)}
		if comment != "" {
			details["comment"] = comment
		}
		if u.SSO() {
			details["operator_name"], details["operator_email"] = u.Shown(), u.Email
		}
		if a.Passkey != nil {
			details["method"] = "passkey"
			details["passkey"] = map[string]any{"credential_id": base64.RawURLEncoding.EncodeToString(a.Passkey.CredentialID),
				"name": a.Passkey.Name}
			details["evidence"] = evidence
		}
		if err := tx.Append(s.entry(audit.KindApproved, c, operator, channel, details)); err != nil {
			return err
		}
		if len(c.Approvals) >= c.ApprovalsRequired {
			if err := s.mint(tx, c, now, pre); err != nil {
				return err
			}
			emit(Event{Kind: audit.KindGranted, Call: c})
		} else {
			emit(Event{Kind: audit.KindApproved, Call: c})
		}
		out = c
		return nil
	})
	return out, err
}

// mayDecide is the rule of who may decide, checked inside the decision's
// transaction whatever the channel (browser, control socket, command
// line): an enabled account whose role decides (operator or admin).
// Otherwise one shell user could meet any quorum under invented names, and
// an account disabled a moment ago could still decide. That the operator is
// not the call's actor, and approves a call at most once, is checked with
// the call.
func mayDecide(tx Tx, operator string) error {
	_, err := decider(tx, operator)
	return err
}

// decider is mayDecide returning the account, as stored in this
// transaction.
func decider(tx Tx, operator string) (account.User, error) {
	u, err := tx.User(operator)
	if errors.Is(err, account.ErrUserNotFound) {
		return account.User{}, &DeciderError{Operator: operator}
	}
	if err == nil && !u.CanDecide() {
		return account.User{}, &DeciderError{Operator: operator, Found: true, Disabled: u.Disabled(), Role: u.Role}
	}
	return u, err
}

// mayApprove is the rest of the rule of who may approve one call, checked
// in the same transaction: not the call's actor (by name or the name shown
// for the account), not an owner of its agent
// (by name, short name or team), allowed by the tool's reviewer condition
// (role or provider group, as the account stands now), and not twice.
// Rules never reach it: they approve as policy:RULE, which no owner or
// operator can be, and an ask rule only raises how many of these approvals
// a call needs.
func mayApprove(c *Call, u account.User) error {
	if c.ProposedBy(u) {
		return ErrOwnCall
	}
	if o := c.OwnedBy(u); o != "" {
		return &OwnerError{Operator: u.Name, Owner: o}
	}
	if !c.Approvers.Allows(string(u.Role), u.Groups) {
		return &ApproversError{Operator: u.Name, Who: c.Approvers.Describe()}
	}
	if c.ApprovedBy(u.Name) {
		return ErrAlreadyApproved
	}
	return nil
}

// notApprovedAsAnother refuses an approval by a person who approved the
// call already under another account: a local account and a single-sign-on
// one go by the same name when one's name or short name is the other's,
// ignoring case (as owners and the call's own actor are matched), and a
// quorum counts people, not accounts. Rules' approvals (policy:ID) are no
// account and never match.
func notApprovedAsAnother(tx Tx, c *Call, u account.User) error {
	for _, a := range c.Approvals {
		if a.Operator == u.Name {
			continue
		}
		other, err := tx.User(a.Operator)
		if errors.Is(err, account.ErrUserNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if samePerson(u, other) {
			return &SamePersonError{Operator: u.Name, Other: a.Operator}
		}
	}
	return nil
}

// samePerson reports whether accounts a and b go by one name: a's name or
// short name is b's name or short name, ignoring case. It only ever finds
// more accounts to be one person, never fewer.
func samePerson(a, b account.User) bool {
	return goesBy(b, a.Name) || (a.ShortName != "" && goesBy(b, a.ShortName))
}

// checkEvidence reads a passkey approval's evidence: it must name this
// call, digest and operator, and it becomes the canonical value recorded
// in the audit entry.
func checkEvidence(in ApproveInput) (any, error) {
	p := in.Passkey
	var ev struct {
		CallID   string `json:"call_id"`
		Digest   string `json:"digest"`
		Operator string `json:"operator"`
	}
	if err := json.Unmarshal(p.Evidence, &ev); err != nil {
		return nil, fmt.Errorf("queue: passkey evidence: %w", err)
	}
	if p.Operator != in.Operator || ev.Operator != in.Operator || ev.CallID != in.CallID || ev.Digest != in.Digest {
		return nil, fmt.Errorf("queue: the passkey evidence is for call %s, digest %s, operator %q: %w",
			ev.CallID, ev.Digest, ev.Operator, ErrDigestMismatch)
	}
	v, err := canonical.Parse(p.Evidence)
	if err != nil {
		return nil, fmt.Errorf("queue: passkey evidence: %w", err)
	}
	return v, nil
}

// grantClaims are the claims of the grant that approving c at now mints.
func grantClaims(c *Call, now time.Time) grant.Claims {
	ttl := c.GrantTTL
	if ttl <= 0 || ttl > grant.MaxTTL {
		ttl = grant.MaxTTL
	}
	return grant.Claims{
		Subject: c.Actor, Audience: c.Audience, JTI: grant.NewJTI(),
		IssuedAt: now.Unix(), ExpiresAt: now.Unix() + int64(ttl/time.Second),
		CallID: c.ID, Tool: c.Tool, Target: c.Target, Digest: c.Digest,
	}
}

// presigned is a grant signed before the write lock was taken, for a
// decision that was expected to complete call's approvals. It is a grant
// only if the decision's transaction mints it (mint), and commits: until
// then it is a signature nobody has seen, stored nowhere, and redemption
// accepts only the grant whose jti the call records.
type presigned struct {
	claims     grant.Claims
	token, kid string
}

// presign signs, outside the write lock, the grant that a decision at now
// would mint for c as it was read, so that the transaction holding the
// lock does not spend the Ed25519 signature. nil when signing fails (the
// transaction then signs, and reports the error).
func (s *Service) presign(c *Call, now time.Time) *presigned {
	claims := grantClaims(c, now)
	token, kid, err := s.signer.Mint(claims)
	if err != nil {
		return nil
	}
	return &presigned{claims: claims, token: token, kid: kid}
}

// presignedAge is how much older than the decision a grant signed ahead
// may be; an older one (the write waited long for the lock) is signed
// again, so a grant never lives noticeably less than its tool's lifetime.
const presignedAge = 2 // seconds

// fits reports whether p is the grant of c decided at now: the claims of
// c's immutable fields, the lifetime c's tool gives, issued no later than
// now and at most presignedAge seconds before it.
func (p *presigned) fits(c *Call, now time.Time) bool {
	if p == nil {
		return false
	}
	want := grantClaims(c, now)
	got := p.claims
	return got.CallID == want.CallID && got.Subject == want.Subject && got.Audience == want.Audience &&
		got.Tool == want.Tool && got.Target == want.Target && got.Digest == want.Digest &&
		got.ExpiresAt-got.IssuedAt == want.ExpiresAt-want.IssuedAt &&
		got.IssuedAt <= want.IssuedAt && want.IssuedAt-got.IssuedAt <= presignedAge
}

// mint makes the decision at now final: the grant (pre when it fits c,
// else signed here) is stored with the call and audited, in the decision's
// transaction.
func (s *Service) mint(tx Tx, c *Call, now time.Time, pre *presigned) error {
	var claims grant.Claims
	var token, kid string
	if pre.fits(c, now) {
		claims, token, kid = pre.claims, pre.token, pre.kid
	} else {
		claims = grantClaims(c, now)
		var err error
		if token, kid, err = s.signer.Mint(claims); err != nil {
			return fmt.Errorf("queue: mint grant for %s: %w", c.ID, err)
		}
	}
	c.Status = StatusApproved
	c.DecidedAt = now
	c.Grant, c.GrantJTI, c.GrantKID = token, claims.JTI, kid
	c.GrantExpiresAt = time.Unix(claims.ExpiresAt, 0)
	if err := tx.UpdateCall(c); err != nil {
		return err
	}
	return tx.Append(s.entry(audit.KindGranted, c, "console", audit.ChannelAPI, map[string]any{
		"jti": claims.JTI, "kid": kid, "iat": claims.IssuedAt, "exp": claims.ExpiresAt, "digest": c.Digest}))
}

// loadPending reads a call that must still be pending. A call found past its
// deadline is expired on the spot, and that expiry is committed with the
// refusal.
func (s *Service) loadPending(tx Tx, id string, emit func(Event)) (*Call, error) {
	c, err := tx.Call(id)
	if err != nil {
		return nil, err
	}
	if c.Status != StatusPending {
		return nil, &NotPendingError{Status: c.Status}
	}
	if !s.now().Before(c.DecideBy) {
		if err := s.expire(tx, c, emit); err != nil {
			return nil, err
		}
		return nil, commitAnd(&NotPendingError{Status: StatusExpired, Expired: true})
	}
	return c, nil
}

// Deny ends call id with the operator's reason, which the agent receives.
func (s *Service) Deny(ctx context.Context, operator, channel, id, reason string) (*Call, error) {
	reason = strings.TrimSpace(reason)
	var out *Call
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		if err := mayDecide(tx, operator); err != nil {
			return err
		}
		if reason == "" {
			return ErrReasonRequired
		}
		if len(reason) > MaxReasonBytes {
			return ErrReasonTooLong
		}
		c, err := s.loadPending(tx, id, emit)
		if err != nil {
			return err
		}
		now := s.now()
		c.Status = StatusDenied
		c.DecidedAt = now
		c.Denial = &Denial{By: operator, Channel: channel, Reason: reason, At: now}
		if err := tx.UpdateCall(c); err != nil {
			return err
		}
		if err := tx.Append(s.entry(audit.KindDenied, c, operator, channel, map[string]any{
			"digest": c.Digest, "reason": reason})); err != nil {
			return err
		}
		emit(Event{Kind: audit.KindDenied, Call: c})
		out = c
		return nil
	})
	return out, err
}

// Cancel withdraws one of the principal's pending calls.
func (s *Service) Cancel(ctx context.Context, who Principal, id string) (*Call, error) {
	var out *Call
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		c, err := tx.Call(id)
		if err != nil {
			return err
		}
		if c.Actor != who.Actor {
			return ErrNotFound
		}
		if c.Status != StatusPending {
			return &NotPendingError{Status: c.Status}
		}
		c.Status = StatusCancelled
		c.DecidedAt = s.now()
		if err := tx.UpdateCall(c); err != nil {
			return err
		}
		if err := tx.Append(s.entry(audit.KindCancelled, c, who.Actor, audit.ChannelAPI, nil)); err != nil {
			return err
		}
		emit(Event{Kind: audit.KindCancelled, Call: c})
		out = c
		return nil
	})
	return out, err
}

// Package catalog pins the tool definitions of MCP servers and holds the
// first-seen and changed ones for an admin's review. Each definition is
// identified by its digest (tools.Mirror); a tool is callable only while the
// definition its server lists now is one an admin approved (or that was
// trusted at the first start with --trust-first-definitions). The catalog
// declares the store it needs; internal/db implements it.
package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/tools"
)

// Status is where a pinned definition is in its review.
type Status string

// Statuses of a definition. Pending and Quarantined definitions are not
// callable; Approved ones are while their server lists them.
const (
	Pending     Status = "pending"
	Approved    Status = "approved"
	Rejected    Status = "rejected"
	Quarantined Status = "quarantined"
)

// Audit kinds of the catalog.
const (
	KindDefinitionSeen     = "mcp_definition_seen"
	KindDefinitionReviewed = "mcp_definition_reviewed"
	KindServerQuarantined  = "mcp_server_quarantined"
	KindServerReleased     = "mcp_server_released"
)

// MaxUnreviewed bounds the definitions of one upstream that await review:
// the pending ones, and the unmirrorable ones first seen since its
// quarantine was last lifted. A listing that would pin more quarantines
// the upstream whole instead: nothing of that listing is pinned, one
// audit entry and one tool.review_needed notice say so, and none of its
// tools is listed or callable until an admin lifts the quarantine
// (Release).
const MaxUnreviewed = 50

// ReviewPath is the console's list of definitions to review.
const ReviewPath = "/admin/mcp"

// A server's quarantine is kept as a pin of its own: no tool name, a
// digest with this prefix and the time; Quarantined while in force,
// Approved once an admin lifted it.
const quarantinePrefix = "server-quarantine:"

// isQuarantine reports whether p records a server's quarantine.
func isQuarantine(p Pin) bool { return p.Tool == "" && strings.HasPrefix(p.Digest, quarantinePrefix) }

// ErrNotQuarantined is a release of a server that is not quarantined.
var ErrNotQuarantined = errors.New("catalog: the server is not quarantined")

// TrustedBy names who approved a definition trusted at the first start.
const TrustedBy = "console:trust-first-definitions"

// Pin is one definition of one upstream tool.
type Pin struct {
	Server string
	Tool   string // the upstream's own tool name
	Digest string
	// Definition is the canonical JSON that Digest covers; for a
	// quarantined tool, the raw listing as it was read.
	Definition []byte
	Status     Status
	// Reasons say why a tool was quarantined.
	Reasons   []string
	FirstSeen time.Time
	// DecidedBy and DecidedAt are set once an admin reviewed it.
	DecidedBy string
	DecidedAt time.Time
}

// Errors of the catalog.
var (
	ErrNotFound   = errors.New("catalog: no such definition")
	ErrNotPending = errors.New("catalog: the definition was already reviewed")
)

// Store is the catalog's storage.
type Store interface {
	// Definitions returns every pinned definition of the server's tools, oldest
	// first.
	Definitions(ctx context.Context, server string) ([]Pin, error)
	// Update runs fn in one write transaction.
	Update(ctx context.Context, fn func(Tx) error) error
}

// Tx is what one catalog transaction can do.
type Tx interface {
	// Definition returns one definition; ErrNotFound when it was never
	// seen.
	Definition(server, tool, digest string) (Pin, error)
	// InsertDefinition records a definition seen for the first time.
	InsertDefinition(p Pin) error
	// SetDefinitionStatus records a review.
	SetDefinitionStatus(server, tool, digest string, status Status, by string, at time.Time) error
	Append(e *audit.Entry) error
	// Enqueue writes notices to the outbox, delivered after commit.
	Enqueue(ns []queue.Notice) error
}

// RuleChecker checks the rules that the tools file gives a mirrored tool
// against the schema its server listed; internal/policy's Policy is one.
// The error's *tools.LintError lists the problems.
type RuleChecker interface {
	CheckMirrored(t *tools.Tool) error
}

// ReviewNotifier says which notices announce that a tool's definition
// awaits an admin's review; internal/notify's Router is one. It runs
// inside the transaction that pins the definition.
type ReviewNotifier interface {
	ToolReview(tool, reason, page string, at time.Time) []queue.Notice
}

// DefinitionPath is the console's page of one pinned definition, where an
// admin reviews it.
func DefinitionPath(server, tool, digest string) string {
	return "/tools/mcp/" + url.PathEscape(server) + "/" + url.PathEscape(tool) + "/" + url.PathEscape(digest)
}

// Listed is one tool as its server lists it (raw schema and annotations).
type Listed struct {
	Name        string
	Description string
	InputSchema []byte
	Annotations []byte
}

// Entry is one tool of a server's current listing with its review state,
// for the console and for serving tools/list.
type Entry struct {
	Pin
	// Tool is the compiled tool; nil when quarantined.
	Tool *tools.Tool
	// Previous is the last approved definition of the same tool, when the
	// current one differs from it: the review page shows the diff.
	Previous *Pin
	// RuleProblems say why the tools file's rules for the tool do not fit
	// the schema its server listed; while there are any, no rule decides
	// its calls and every call goes to people.
	RuleProblems []string
}

// Callable reports whether calls of the entry's tool may be made.
func (e Entry) Callable() bool { return e.Status == Approved && e.Tool != nil }

// Catalog applies the pinning rules for every upstream.
type Catalog struct {
	store      Store
	registry   *tools.Registry
	overrides  map[string]map[string]tools.MCPOverride
	trustFirst bool
	// reviewFirst are the tools (per server) TrustFirst leaves to review.
	reviewFirst map[string][]string
	rules       RuleChecker
	notify      ReviewNotifier
	now         func() time.Time
	log         *slog.Logger

	mu       sync.RWMutex
	current  map[string][]Entry // by server, sorted by tool name
	listed   map[string][]Listed
	trusted  map[string]bool // servers whose first listing of this process was trusted
	held     map[string]bool // servers quarantined as of their last refresh
	onChange []func(server string)
}

// Config holds a catalog's collaborators.
type Config struct {
	Store    Store
	Registry *tools.Registry
	// TrustFirst approves, at the first listing of each server after the
	// console starts, the definitions of tools never seen before.
	TrustFirst bool
	// ReviewFirst names, per server, tools whose first definition awaits
	// an admin's review even with TrustFirst.
	ReviewFirst map[string][]string
	// Rules checks each definition's rules when it is pinned; nil checks
	// none (Decide still refuses rules that do not fit).
	Rules RuleChecker
	// Notifier announces definitions that await review (the
	// tool.review_needed event) in the transaction that pins them; nil
	// announces nothing.
	Notifier ReviewNotifier
	Now      func() time.Time
	Logger   *slog.Logger
}

// New returns a catalog over the registry's upstreams.
func New(cfg Config) *Catalog {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Catalog{store: cfg.Store, registry: cfg.Registry, trustFirst: cfg.TrustFirst, reviewFirst: cfg.ReviewFirst, rules: cfg.Rules, notify: cfg.Notifier,
		now: cfg.Now, log: cfg.Logger,
		overrides: map[string]map[string]tools.MCPOverride{}, current: map[string][]Entry{},
		listed: map[string][]Listed{}, trusted: map[string]bool{}, held: map[string]bool{}}
	for _, u := range cfg.Registry.Upstreams() {
		c.overrides[u.Name] = u.Tools
	}
	return c
}

// OnChange registers fn to run after a server's entries change.
func (c *Catalog) OnChange(fn func(server string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onChange = append(c.onChange, fn)
}

// QuarantineDigest identifies a listing that could not be mirrored.
func QuarantineDigest(l Listed) string {
	h := sha256.New()
	h.Write([]byte(tools.DefinitionPrefix + "quarantined:"))
	for _, part := range [][]byte{[]byte(l.Name), []byte(l.Description), l.InputSchema, l.Annotations} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Apply takes a complete listing of a server's tools: it pins every
// definition not seen before (pending, quarantined, or approved when
// trusted at the first start), and makes exactly the approved ones
// callable.
func (c *Catalog) Apply(ctx context.Context, server string, listing []Listed) error {
	c.mu.Lock()
	trust := c.trustFirst && !c.trusted[server]
	c.trusted[server] = true
	c.listed[server] = listing
	c.mu.Unlock()
	type compiled struct {
		l      Listed
		tool   *tools.Tool
		digest string
		def    []byte
		reason []string
		rules  []string // rule problems
	}
	var all []compiled
	for _, l := range listing {
		t, err := tools.Mirror(tools.MirrorSpec{Server: server, Name: l.Name, Description: l.Description,
			InputSchema: l.InputSchema, Annotations: l.Annotations, Override: c.overrides[server][l.Name]})
		var q *tools.QuarantineError
		switch {
		case errors.As(err, &q):
			raw, _ := canonical.Encode(canonical.Object{{Name: "annotations", Value: string(l.Annotations)},
				{Name: "description", Value: l.Description}, {Name: "inputSchema", Value: string(l.InputSchema)}, {Name: "name", Value: l.Name}})
			all = append(all, compiled{l: l, digest: QuarantineDigest(l), def: raw, reason: q.Reasons})
		case err != nil:
			return err
		default:
			all = append(all, compiled{l: l, tool: t, digest: t.DefinitionDigest, def: t.Mirror.Definition, rules: c.ruleProblems(t)})
		}
	}
	now := c.now().UTC().Truncate(time.Millisecond)
	pins, err := c.store.Definitions(ctx, server)
	if err != nil {
		return fmt.Errorf("catalog: %s: %w", server, err)
	}
	held, unreviewed := quarantineOf(pins)
	if held != nil {
		// Quarantined: nothing is pinned until an admin lifts it.
		return c.refresh(ctx, server)
	}
	seen := map[string]bool{}
	for _, p := range pins {
		seen[p.Tool+"\x00"+p.Digest] = true
	}
	var fresh []string
	for _, x := range all {
		if !seen[x.l.Name+"\x00"+x.digest] {
			if x.tool == nil || !trust || slices.Contains(c.reviewFirst[server], x.l.Name) {
				unreviewed++
			}
			fresh = append(fresh, x.l.Name)
			seen[x.l.Name+"\x00"+x.digest] = true
		}
	}
	if unreviewed > MaxUnreviewed {
		if err := c.quarantine(ctx, server, len(fresh), now); err != nil {
			return fmt.Errorf("catalog: %s: %w", server, err)
		}
		return c.refresh(ctx, server)
	}
	var review []reviewItem
	err = c.store.Update(ctx, func(tx Tx) error {
		review = review[:0]
		for _, x := range all {
			_, err := tx.Definition(server, x.l.Name, x.digest)
			if err == nil {
				continue
			}
			if !errors.Is(err, ErrNotFound) {
				return err
			}
			p := Pin{Server: server, Tool: x.l.Name, Digest: x.digest, Definition: x.def, Status: Pending, Reasons: x.reason, FirstSeen: now}
			if x.tool == nil {
				p.Status = Quarantined
			} else if trust && !slices.Contains(c.reviewFirst[server], x.l.Name) {
				known, err := c.knownTool(ctx, server, x.l.Name)
				if err != nil {
					return err
				}
				if !known {
					p.Status, p.DecidedBy, p.DecidedAt = Approved, TrustedBy, now
				}
			}
			if err := tx.InsertDefinition(p); err != nil {
				return err
			}
			details := map[string]any{"server": server, "tool": x.l.Name, "digest": x.digest, "status": string(p.Status)}
			if len(p.Reasons) > 0 {
				details["reasons"] = append([]string(nil), p.Reasons...)
			}
			if len(x.rules) > 0 {
				details["rule_problems"] = append([]string(nil), x.rules...)
			}
			if err := tx.Append(&audit.Entry{Time: audit.FormatTime(now), Kind: KindDefinitionSeen, Principal: "console",
				Channel: audit.ChannelAPI, Details: details}); err != nil {
				return err
			}
			if p.Status == Pending {
				review = append(review, reviewItem{tool: x.l.Name, digest: x.digest, rules: x.rules})
			}
		}
		return c.announce(ctx, tx, server, review, now)
	})
	for _, x := range all {
		if len(x.rules) > 0 {
			c.log.Warn("the tools file's rules for a mirrored tool do not fit its schema: every call of it goes to people",
				slog.String("tool", tools.MirroredName(server, x.l.Name)), slog.String("digest", x.digest), slog.Any("problems", x.rules))
		}
	}
	if err != nil {
		return fmt.Errorf("catalog: %s: %w", server, err)
	}
	return c.refresh(ctx, server)
}

// reviewItem is one definition pinned to await review.
type reviewItem struct {
	tool, digest string
	rules        []string
}

// announce writes one tool.review_needed notice for the definitions one
// listing pinned to await review: the definition's own page for one, the
// review list, under the tool name "{server}/*", for several.
func (c *Catalog) announce(ctx context.Context, tx Tx, server string, review []reviewItem, now time.Time) error {
	if c.notify == nil || len(review) == 0 {
		return nil
	}
	if len(review) == 1 {
		x := review[0]
		return tx.Enqueue(c.notify.ToolReview(tools.MirroredName(server, x.tool), c.reviewReason(ctx, server, x.tool, x.digest, x.rules),
			DefinitionPath(server, x.tool, x.digest), now))
	}
	names := make([]string, 0, 5)
	for _, x := range review[:min(5, len(review))] {
		names = append(names, x.tool)
	}
	more := ""
	if len(review) > len(names) {
		more = fmt.Sprintf(" and %d more", len(review)-len(names))
	}
	reason := fmt.Sprintf("%d definitions of %s's tools await an administrator's review (%s%s); none of them is callable until then",
		len(review), server, strings.Join(names, ", "), more)
	misfit := 0
	for _, x := range review {
		if len(x.rules) > 0 {
			misfit++
		}
	}
	if misfit > 0 {
		reason += fmt.Sprintf("; the tools file's rules do not fit the schema of %d of them, so no rule decides their calls", misfit)
	}
	return tx.Enqueue(c.notify.ToolReview(tools.MirroredName(server, "*"), reason, ReviewPath, now))
}

// quarantineOf reads a server's pins: the quarantine in force (nil when
// none), and how many definitions count against MaxUnreviewed.
func quarantineOf(pins []Pin) (held *Pin, unreviewed int) {
	var lifted time.Time
	for i := range pins {
		p := &pins[i]
		if !isQuarantine(*p) {
			continue
		}
		if p.Status == Quarantined {
			held = p
		} else if p.DecidedAt.After(lifted) {
			lifted = p.DecidedAt
		}
	}
	for _, p := range pins {
		switch {
		case isQuarantine(p):
		case p.Status == Pending:
			unreviewed++
		case p.Status == Quarantined && p.FirstSeen.After(lifted):
			unreviewed++
		}
	}
	return held, unreviewed
}

// quarantine records that a listing would have pinned more definitions
// than MaxUnreviewed: one pin, one audit entry and one notice.
func (c *Catalog) quarantine(ctx context.Context, server string, fresh int, now time.Time) error {
	c.log.Warn("an upstream listed more new definitions than may await review: it is quarantined, none of its tools is served until an admin lifts it",
		slog.String("upstream", server), slog.Int("new", fresh), slog.Int("max", MaxUnreviewed))
	return c.store.Update(ctx, func(tx Tx) error {
		p := Pin{Server: server, Digest: quarantinePrefix + now.Format(time.RFC3339Nano), Definition: []byte("{}"), Status: Quarantined,
			Reasons:   []string{fmt.Sprintf("the %d new definitions it listed would have made more than %d await review", fresh, MaxUnreviewed)},
			FirstSeen: now}
		if err := tx.InsertDefinition(p); err != nil {
			return err
		}
		if err := tx.Append(&audit.Entry{Time: audit.FormatTime(now), Kind: KindServerQuarantined, Principal: "console",
			Channel: audit.ChannelAPI, Details: map[string]any{"server": server, "new_definitions": fresh, "max_unreviewed": MaxUnreviewed}}); err != nil {
			return err
		}
		if c.notify == nil {
			return nil
		}
		return tx.Enqueue(c.notify.ToolReview(tools.MirroredName(server, "*"), fmt.Sprintf(
			"the server %s is quarantined: it listed %d new definitions while at most %d may await review. None of its tools is listed or callable "+
				"until an administrator reviews the pending definitions and lifts the quarantine", server, fresh, MaxUnreviewed), ReviewPath, now))
	})
}

// Quarantine returns the quarantine in force on a server, if any.
func (c *Catalog) Quarantine(ctx context.Context, server string) (Pin, bool, error) {
	pins, err := c.store.Definitions(ctx, server)
	if err != nil {
		return Pin{}, false, err
	}
	held, _ := quarantineOf(pins)
	if held == nil {
		return Pin{}, false, nil
	}
	return *held, true, nil
}

// Release lifts a server's quarantine, by an admin, audited in the same
// transaction. The definitions still pending that the server no longer
// lists are rejected with it (none of them could be called: a tool is
// callable only under the definition listed now); those it lists stay
// pending. Then its latest listing is applied again: its approved tools
// are served, and its new definitions pinned, unless they would again
// exceed MaxUnreviewed.
func (c *Catalog) Release(ctx context.Context, server, admin string) error {
	if admin == "" {
		return errors.New("catalog: a release needs the admin's name")
	}
	held, ok, err := c.Quarantine(ctx, server)
	if err != nil {
		return err
	}
	if !ok {
		return ErrNotQuarantined
	}
	c.mu.RLock()
	listing := c.listed[server]
	c.mu.RUnlock()
	listed := map[string]bool{}
	for _, l := range listing {
		listed[l.Name+"\x00"+QuarantineDigest(l)] = true
		if t, err := tools.Mirror(tools.MirrorSpec{Server: server, Name: l.Name, Description: l.Description,
			InputSchema: l.InputSchema, Annotations: l.Annotations, Override: c.overrides[server][l.Name]}); err == nil {
			listed[l.Name+"\x00"+t.DefinitionDigest] = true
		}
	}
	pins, err := c.store.Definitions(ctx, server)
	if err != nil {
		return err
	}
	var stale []Pin
	for _, p := range pins {
		if p.Status == Pending && !listed[p.Tool+"\x00"+p.Digest] {
			stale = append(stale, p)
		}
	}
	now := c.now().UTC().Truncate(time.Millisecond)
	err = c.store.Update(ctx, func(tx Tx) error {
		for _, p := range stale {
			if err := tx.SetDefinitionStatus(server, p.Tool, p.Digest, Rejected, admin, now); err != nil {
				return err
			}
		}
		p, err := tx.Definition(server, "", held.Digest)
		if err != nil {
			return err
		}
		if p.Status != Quarantined {
			return ErrNotQuarantined
		}
		if err := tx.SetDefinitionStatus(server, "", held.Digest, Approved, admin, now); err != nil {
			return err
		}
		return tx.Append(&audit.Entry{Time: audit.FormatTime(now), Kind: KindServerReleased, Principal: admin,
			Channel: audit.ChannelWeb, Details: map[string]any{"server": server, "rejected_unlisted": len(stale)}})
	})
	if err != nil {
		return err
	}
	return c.Apply(ctx, server, listing)
}

// ruleProblems lists why the tools file's rules for t do not fit its
// schema; nil when they fit or nothing checks them.
func (c *Catalog) ruleProblems(t *tools.Tool) []string {
	if c.rules == nil {
		return nil
	}
	err := c.rules.CheckMirrored(t)
	if err == nil {
		return nil
	}
	var le *tools.LintError
	if !errors.As(err, &le) {
		return []string{err.Error()}
	}
	out := make([]string, len(le.Problems))
	for i, p := range le.Problems {
		out[i] = p.Path + ": " + p.Message
	}
	return out
}

// reviewReason says why a definition awaits review, for the
// tool.review_needed event.
func (c *Catalog) reviewReason(ctx context.Context, server, tool, digest string, ruleProblems []string) string {
	reason := "a tool seen for the first time: its definition awaits an administrator's review"
	if known, err := c.knownTool(ctx, server, tool); err == nil && known {
		reason = "its definition changed: the new definition awaits an administrator's review, and the tool is not callable until then"
	}
	reason += " (definition " + digest[:min(16, len(digest))] + ")"
	if len(ruleProblems) > 0 {
		reason += fmt.Sprintf("; the tools file's rules for it do not fit its schema (%d problems), so no rule decides its calls", len(ruleProblems))
	}
	return reason
}

// knownTool reports whether any definition of the tool was pinned before.
func (c *Catalog) knownTool(ctx context.Context, server, tool string) (bool, error) {
	pins, err := c.store.Definitions(ctx, server)
	if err != nil {
		return false, err
	}
	for _, p := range pins {
		if p.Tool == tool {
			return true, nil
		}
	}
	return false, nil
}

// refresh recomputes a server's entries from its latest listing and the
// store, and registers the callable tools.
func (c *Catalog) refresh(ctx context.Context, server string) error {
	pins, err := c.store.Definitions(ctx, server)
	if err != nil {
		return fmt.Errorf("catalog: %s: %w", server, err)
	}
	c.mu.RLock()
	listing := c.listed[server]
	c.mu.RUnlock()
	held, _ := quarantineOf(pins)
	byKey := map[string]Pin{}
	lastApproved := map[string]Pin{}
	for _, p := range pins {
		byKey[p.Tool+"\x00"+p.Digest] = p
		if p.Status == Approved {
			if prev, ok := lastApproved[p.Tool]; !ok || !p.DecidedAt.Before(prev.DecidedAt) {
				lastApproved[p.Tool] = p
			}
		}
	}
	var entries []Entry
	var callable []*tools.Tool
	for _, l := range listing {
		t, err := tools.Mirror(tools.MirrorSpec{Server: server, Name: l.Name, Description: l.Description,
			InputSchema: l.InputSchema, Annotations: l.Annotations, Override: c.overrides[server][l.Name]})
		digest := QuarantineDigest(l)
		if err == nil {
			digest = t.DefinitionDigest
		} else {
			t = nil
		}
		p, ok := byKey[l.Name+"\x00"+digest]
		if !ok {
			continue // not pinned yet: Apply pins before it refreshes
		}
		e := Entry{Pin: p, Tool: t}
		if t != nil {
			e.RuleProblems = c.ruleProblems(t)
		}
		if prev, ok := lastApproved[l.Name]; ok && prev.Digest != digest {
			e.Previous = &prev
		}
		if e.Callable() {
			callable = append(callable, t)
		}
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Pin.Tool < entries[j].Pin.Tool })
	if held != nil {
		callable = nil // a quarantined server serves nothing
	}
	c.registry.SetMirrored(server, callable)
	c.mu.Lock()
	c.current[server] = entries
	c.held[server] = held != nil
	fns := c.onChange
	c.mu.Unlock()
	for _, fn := range fns {
		fn(server)
	}
	return nil
}

// Quarantined reports whether a server is quarantined (as of its last
// listing or review): none of its tools is listed or callable.
func (c *Catalog) Quarantined(server string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.held[server]
}

// Entries returns a server's current listing with review states.
func (c *Catalog) Entries(server string) []Entry {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return append([]Entry(nil), c.current[server]...)
}

// Servers returns the names of the configured upstreams.
func (c *Catalog) Servers() []string {
	var out []string
	for _, u := range c.registry.Upstreams() {
		out = append(out, u.Name)
	}
	return out
}

// Review approves or rejects one pending definition, by an admin, and
// audits it in the same transaction. A quarantined definition cannot be
// approved: nothing could check its calls.
func (c *Catalog) Review(ctx context.Context, server, tool, digest, admin string, approve bool) error {
	return c.ReviewVia(ctx, server, tool, digest, admin, audit.ChannelWeb, approve)
}

// ReviewVia is Review through channel (audit.ChannelWeb, ChannelCLI,
// ChannelAPI), which its audit entry records. The caller has checked that
// admin is an enabled admin.
func (c *Catalog) ReviewVia(ctx context.Context, server, tool, digest, admin, channel string, approve bool) error {
	if admin == "" {
		return errors.New("catalog: a review needs the admin's name")
	}
	now := c.now().UTC().Truncate(time.Millisecond)
	status := Rejected
	if approve {
		status = Approved
	}
	err := c.store.Update(ctx, func(tx Tx) error {
		p, err := tx.Definition(server, tool, digest)
		if err != nil {
			return err
		}
		if p.Status != Pending {
			return fmt.Errorf("%w (it is %s)", ErrNotPending, p.Status)
		}
		if err := tx.SetDefinitionStatus(server, tool, digest, status, admin, now); err != nil {
			return err
		}
		return tx.Append(&audit.Entry{Time: audit.FormatTime(now), Kind: KindDefinitionReviewed, Principal: admin,
			Channel: channel, Details: map[string]any{"server": server, "tool": tool, "digest": digest, "status": string(status)}})
	})
	if err != nil {
		return err
	}
	return c.refresh(ctx, server)
}

// Definition returns one pinned definition of a server's tool, and the
// definition an admin approved last for that tool before it was first seen
// (nil when there is none): the review page shows what changed.
func (c *Catalog) Definition(ctx context.Context, server, tool, digest string) (Pin, *Pin, error) {
	pins, err := c.store.Definitions(ctx, server)
	if err != nil {
		return Pin{}, nil, err
	}
	var found *Pin
	for i := range pins {
		if pins[i].Tool == tool && pins[i].Digest == digest {
			found = &pins[i]
		}
	}
	if found == nil {
		return Pin{}, nil, fmt.Errorf("%w: %s/%s %s", ErrNotFound, server, tool, digest)
	}
	var prev *Pin
	for i := range pins {
		p := &pins[i]
		if p.Tool != tool || p.Digest == digest || p.Status != Approved || p.FirstSeen.After(found.FirstSeen) {
			continue
		}
		if prev == nil || p.DecidedAt.After(prev.DecidedAt) {
			prev = p
		}
	}
	return *found, prev, nil
}

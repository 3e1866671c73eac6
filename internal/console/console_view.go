package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/internal/tools"
	"github.com/countersign/countersign/web/templates"
)

// maxQueueCards bounds the pending calls a call page's navigation reads
// to find the next one to decide (maxNavigationPages queue pages). maxQueueBlocks bounds the blocked pairs
// the queue shows, so that neither the page nor a socket's first message
// grows with what an agent can make.
const (
	maxQueueCards  = 500
	maxQueueBlocks = 100
)

// queueView reads the pending calls the query lets through, in its
// order, and the retry blocks.
func (c *Console) queueView(ctx context.Context, v *viewer, now time.Time, qq queueQuery) (templates.QueueView, error) {
	// Either view reads one page by deadline, through the pending index
	// from the page's key: the rows read are those shown, however many
	// calls wait.
	calls, err := c.q.PendingPage(ctx, pageKey(qq.After), queuePageSize+1)
	if err != nil {
		return templates.QueueView{}, err
	}
	next := ""
	if len(calls) > queuePageSize {
		calls = calls[:queuePageSize]
		nq := qq
		nq.After = pageKeyString(calls[len(calls)-1])
		next = "/?" + nq.values().Encode()
	}
	blocks, err := c.q.Blocks(ctx)
	if err != nil {
		return templates.QueueView{}, err
	}
	query := qq.values().Encode()
	ws := "/ws"
	if wq := qq.values(); next != "" {
		wq.Set("upto", pageKeyString(calls[len(calls)-1]))
		ws += "?" + wq.Encode()
	} else if query != "" {
		ws += "?" + query
	}
	qv := templates.QueueView{Page: c.page(v, "Queue", "queue", ws, now), MaxBatch: queue.MaxBatch, Query: query, Filtered: qq.filtered(),
		Filter: templates.QueueFilter{Sort: qq.Sort, Tool: qq.Tool, Actor: qq.Actor, Target: qq.Target, Warn: qq.Warn, Risk: qq.Risk, Effect: qq.Effect}}
	if reg := c.q.Tools(); reg != nil {
		qv.Tools = reg.Names()
	}
	lq, cq := qq, qq
	lq.List, lq.After, cq.List, cq.After = true, "", false, ""
	qv.List, qv.NextPage, qv.Paged, qv.PageSize = qq.List, next, next != "" || qq.After != "", queuePageSize
	qv.ListURL, qv.CardsURL = "/?"+lq.values().Encode(), "/?"+cq.values().Encode()
	qv.FirstURL = qv.CardsURL
	if qq.List {
		qv.FirstURL = qv.ListURL
	}
	decide := v.user.Role.CanDecide()
	for _, call := range calls {
		card := c.cardView(call, decide, call.OwnedBy(v.user) != "", now)
		if qq.matches(call, card.Deceptive, c.q.Tools()) {
			qv.Cards = append(qv.Cards, card)
		}
	}
	if !qq.List {
		sortCards(qv.Cards, qq.Sort)
	}
	if len(blocks) > maxQueueBlocks {
		qv.BlocksHidden = len(blocks) - maxQueueBlocks
		blocks = blocks[:maxQueueBlocks]
	}
	for _, b := range blocks {
		qv.Blocks = append(qv.Blocks, c.blockView(b, v, now))
	}
	if qq.After == "" {
		if qv.Plans, err = c.planCards(ctx); err != nil {
			return templates.QueueView{}, err
		}
	}
	qv.CoveredMax, qv.CoveredFor = maxCoveredShown, "hour"
	if qv.Covered, err = c.coveredCards(ctx, now, qq); err != nil {
		return templates.QueueView{}, err
	}
	return qv, nil
}

func (c *Console) page(v *viewer, title, nav, ws string, now time.Time) templates.Page {
	var fz []queue.Freeze
	var err error
	if v != nil {
		fz, err = c.freezes()
	}
	return c.pageWith(v, title, nav, ws, now, fz, err)
}

// freezes reads the freezes in force, for a page.
func (c *Console) freezes() ([]queue.Freeze, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	fz, err := c.q.Freezes(ctx)
	if err != nil {
		c.log.Warn("read the freezes in force for a page", slog.Any("error", err))
	}
	return fz, err
}

// pageWith is page with the freezes in force already read (err when they
// could not be).
func (c *Console) pageWith(v *viewer, title, nav, ws string, now time.Time, fz []queue.Freeze, err error) templates.Page {
	p := templates.Page{Title: title, Nav: nav, WS: ws, Now: now}
	if v != nil {
		p.Viewer = v.templ()
		p.Needs = c.needs(v)
		// Every page of a logged-in person says what is frozen.
		if err != nil {
			p.FreezesUnknown = true
		}
		for _, f := range fz {
			p.Freezes = append(p.Freezes, templates.FreezeBanner{Tool: f.Tool, Actor: f.Actor, Scope: reveal.String(f.Scope()),
				Reason: reveal.String(f.Reason), By: reveal.String(f.By), Since: f.At})
		}
	}
	return p
}

// viewerPasskeys is how many passkeys the viewer has, read once per
// request (or socket) when passkeys are on.
func (c *Console) viewerPasskeys(v *viewer) int {
	if c.cfg.Passkeys == nil {
		return 0
	}
	v.passkeysOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		pks, err := c.accounts.Passkeys(ctx, v.user.Name)
		if err != nil {
			c.log.Warn("read the viewer's passkeys", slog.Any("error", err))
		}
		v.passkeys = len(pks)
	})
	return v.passkeys
}

// shownName is how an operator is named on a page: a single-sign-on
// principal with the name the provider gives beside it.
func (c *Console) shownName(name string) string {
	if !strings.HasPrefix(name, account.OIDCPrefix) {
		return name
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	u, err := c.accounts.UserByName(ctx, name)
	if err != nil || u.Shown() == u.Name {
		return name
	}
	return u.Shown() + " (" + name + ")"
}

func (c *Console) cardView(call *queue.Call, canDecide, owned bool, now time.Time) templates.Card {
	card := templates.Card{
		ID: call.ID, Tool: reveal.Of(call.Tool), Target: reveal.Of(call.Target), Actor: reveal.Of(call.Actor), RawTool: call.Tool,
		CreatedAt: call.CreatedAt, DecideBy: call.DecideBy,
		Received: len(call.Approvals), Required: call.ApprovalsRequired, CanDecide: canDecide, Now: now,
		Group: groupKey(call), Owned: owned,
	}
	card.Risk, card.Effects = riskOf(c.q.Tools(), call.Tool)
	// The summary is read from what the digest covers, checked as the call
	// page checks it: an edit of the stored copy of the arguments does not
	// change what the card says, and a record that no longer matches its
	// digest shows a warning instead of a summary. One check per card: the
	// hub renders a card once per change for all the viewers of a role.
	env, err := queue.HashedEnvelope(call)
	if err != nil {
		var ie *queue.IntegrityError
		what := "its stored record does not match its digest"
		if errors.As(err, &ie) {
			what = ie.What
		}
		card.Integrity = "STOP: the stored record of this call does not match its digest (" + what +
			"). Do not approve it: the database was edited. An administrator should run console audit verify."
		card.Deceptive = queue.DeceptiveWith(call, nil)
		return card
	}
	if reg := c.q.Tools(); reg != nil {
		if t, ok := reg.Tool(call.Tool); ok {
			card.Summary = summary(t, env.Args)
		}
	}
	card.StoredDiffers = storedDiffers(env.Args, call.Args)
	card.Deceptive = queue.DeceptiveWith(call, env.Args)
	return card
}

// storedDiffers reports whether the stored copy of a call's arguments
// differs from what was hashed in any bound member (the informational
// members, which the digest leaves out, are only in the stored copy).
func storedDiffers(bound, stored canonical.Object) bool {
	if stored == nil {
		stored = canonical.Object{}
	}
	var differ []string
	mergeArgs(bound, stored, "", &differ)
	return len(differ) > 0
}

// blockDOMID names a block's element after its (actor, tool) pair.
func blockDOMID(actor, tool string) string {
	h := sha256.Sum256([]byte(actor + "\x00" + tool))
	return "block-" + hex.EncodeToString(h[:8])
}

func (c *Console) blockView(b queue.Block, v *viewer, now time.Time) templates.Block {
	bv := templates.Block{
		DOMID: blockDOMID(b.Actor, b.Tool), Actor: reveal.Of(b.Actor), Tool: blockToolText(b.Tool),
		RawActor: b.Actor, RawTool: b.Tool, Count: b.Count, BlockedAt: b.BlockedAt, Now: now,
	}
	bv.Deceptive = bv.Actor.Deceptive() || bv.Tool.Deceptive()
	if v.user.Role.CanDecide() {
		bv.CanClear, bv.CSRF = true, v.csrf
	}
	return bv
}

// blockToolText names a block's tool, or what a retry key that is not a
// tool name stands for.
func blockToolText(tool string) templates.Text {
	switch tool {
	case queue.UnknownTool:
		return templates.Plain("tools not in the tools file (every unknown name counts here)")
	case queue.AnyTool:
		return templates.Plain("every tool (this agent holds too many blocks)")
	}
	return reveal.Of(tool)
}

func optText(s string) *templates.Text {
	if s == "" {
		return nil
	}
	t := reveal.Of(s)
	return &t
}

func (c *Console) statusView(call *queue.Call, v *viewer, now time.Time) templates.StatusView {
	var fz []queue.Freeze
	if call.Status == queue.StatusPending && v.user.Role.CanDecide() {
		fz, _ = c.freezes()
	}
	return c.statusViewWith(call, v, now, fz)
}

// statusViewWith is statusView with the freezes in force already read.
func (c *Console) statusViewWith(call *queue.Call, v *viewer, now time.Time, fz []queue.Freeze) templates.StatusView {
	s := templates.StatusView{
		CallID: call.ID, Status: string(call.Shown()), Digest: call.Digest,
		Required: call.ApprovalsRequired, Received: len(call.Approvals),
		DecideBy: call.DecideBy, DecidedAt: call.DecidedAt, GrantExpiresAt: call.GrantExpiresAt,
		RedeemedAt: call.RedeemedAt, Now: now, Rule: call.DecidedByRule(), GrantState: call.GrantState(now),
		ToolChanged: (call.Status == queue.StatusPending || call.Status == queue.StatusApproved) && c.q.ToolChanged(call),
		PlanID:      call.PlanID, PlanIndex: call.PlanIndex,
	}
	if s.ToolChanged {
		s.ToolMadeUnder = call.ToolDigest
		if reg := c.q.Tools(); reg != nil {
			if t, ok := reg.Tool(call.Tool); ok {
				s.ToolHere = t.DefinitionDigest
			}
		}
	}
	for _, a := range call.Approvals {
		ta := templates.Approval{By: reveal.Of(c.shownName(a.Operator)), Method: a.Method, Channel: a.Channel, Human: a.Human(), At: a.At, Comment: optText(a.Comment),
			Via: a.Via}
		if a.Method == queue.MethodAllowance {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			ta.Left = c.allowanceLeft(ctx, a.Via, now)
			cancel()
		}
		if a.Passkey != nil {
			name := reveal.Of(a.Passkey.Name)
			ta.Passkey = &name
		}
		if a.For != "" {
			behalf := reveal.Of(c.shownName(a.For))
			ta.For = &behalf
		}
		s.Approvals = append(s.Approvals, ta)
	}
	s.Tool, s.Target = reveal.Of(call.Tool), reveal.Of(call.Target)
	for _, o := range call.Owners {
		s.Owners = append(s.Owners, reveal.Of(o))
	}
	if !call.Approvers.Empty() {
		s.Approvers = reveal.String(call.Approvers.Describe())
	}
	for i, t := range call.Escalate {
		s.Tiers = append(s.Tiers, templates.TierShown{At: call.CreatedAt.Add(t.After), Adds: tierAdds(t), Reached: i < call.Reached})
	}
	s.RequirePasskey, s.PasskeysOn = call.RequirePasskey, c.cfg.Passkeys != nil
	if call.Denial != nil {
		s.DeniedBy, s.DenyReason = optText(call.Denial.By), optText(call.Denial.Reason)
	}
	if call.Outcome != nil {
		s.Outcome, s.OutcomeDetail = call.Outcome.Status, optText(call.Outcome.Detail)
	}
	s.RedeemedBy, s.LeaseUntil = call.RedeemedBy, call.LeaseUntil
	s.Resolution = resolutionShown(call.Resolution)
	s.Unresolved = call.Unresolved()
	s.Resolve, _, _ = c.resolveForm(call, v, "call")
	if call.Revoked != nil {
		s.RevokedBy, s.RevokeReason, s.RevokedAt = optText(call.Revoked.By), optText(call.Revoked.Reason), call.Revoked.At
	}
	if v.user.Role.CanDecide() {
		// Whether the page offers Approve is the viewer's standing, the
		// rule the navigation's "to decide" count follows too.
		st := queue.StandingOf(call, v.user, fz, s.ToolChanged, nil)
		s.CanDecide, s.CSRF = true, v.csrf
		s.OwnCall = st.OwnCall
		s.ApprovedByViewer = st.Approved
		s.CanRevoke = call.Status == queue.StatusApproved && call.Revoked == nil && now.Before(call.GrantExpiresAt)
		s.OwnedByViewer = reveal.String(st.Owner)
		s.ViewerMayApprove = st.Allowed
		if call.Status == queue.StatusPending {
			s.ViewerPasskeys = c.viewerPasskeys(v)
			s.Presented = c.q.Present(present.PageCall, v.user.Name, call)
			if !st.Allowed && !st.OwnCall && st.Owner == "" {
				// Delegations are read only for a viewer whose own
				// standing does not let them approve.
				st = queue.StandingOf(call, v.user, fz, s.ToolChanged, c.delegators(v, now))
				for _, name := range st.For {
					s.ApproveFor = append(s.ApproveFor, templates.ForChoice{Name: name, Shown: reveal.Of(c.shownName(name))})
				}
			}
		}
		if f := st.Frozen; f != nil && call.Status == queue.StatusPending {
			s.Frozen = &templates.FrozenView{Scope: f.Scope(), Reason: f.Reason, By: c.shownName(f.By), At: f.At}
		}
		s.Refusal = st.Refusal()
	}
	if call.Status == queue.StatusPending {
		s.Warned = queue.Deceptive(call)
		if reg := c.q.Tools(); reg != nil {
			if t, ok := reg.Tool(call.Tool); ok {
				s.DenyReasons = t.DenyReasons
				if s.CanDecide && s.ViewerMayApprove && !s.OwnCall && s.OwnedByViewer == "" {
					s.Offer = allowanceOffer(call, t)
					s.Counter = counterOffer(call, t)
				}
				if t.Confirm != nil {
					s.Confirm, s.ConfirmExpected = t.Confirm.Describe(), t.Confirm.Expected(shownText(reveal.Of(call.Target)))
				}
			}
		}
	}
	return s
}

// callView builds a call's page from what its digest covers: the stored
// canonical envelope, checked against the digest first. Actor, audience,
// tool, target and every bound argument are read from those bytes; only
// the informational members (which the digest leaves out) come from the
// stored arguments, and they are labelled "not bound". A call whose
// envelope does not hash to its digest, or does not parse as one, is an
// *queue.IntegrityError: nothing of it is shown.
func (c *Console) callView(call *queue.Call, v *viewer, now time.Time) (templates.CallView, error) {
	cv, err := c.callContent(call)
	if err != nil {
		return templates.CallView{}, err
	}
	fz, err := c.freezes()
	cv.Page = c.pageWith(v, "Call "+call.ID, "queue", "/ws?call="+call.ID, now, fz, err)
	cv.Status = c.statusViewWith(call, v, now, fz)
	return cv, nil
}

// callContent is what a call's pages show of the call itself, read from
// what its digest covers (see callView); the status and the page around it
// are the caller's.
func (c *Console) callContent(call *queue.Call) (templates.CallView, error) {
	env, err := queue.HashedEnvelope(call)
	if err != nil {
		return templates.CallView{}, err
	}
	cv := templates.CallView{
		ID: call.ID, Actor: reveal.Of(env.Actor), Audience: reveal.Of(env.Audience), Tool: reveal.Of(env.Tool),
		Target: reveal.Of(env.Target), Rationale: optText(call.Rationale), CreatedAt: call.CreatedAt,
		DigestGroups: groupsOfFour(call.Digest), MCP: mcpCallInfo(call),
	}
	var tool *tools.Tool
	if reg := c.q.Tools(); reg != nil {
		tool, cv.ToolKnown = reg.Tool(env.Tool)
	}
	if tool != nil && tool.Mirror == nil {
		// A mirrored tool's description is the MCP server's text: its
		// definition page shows it, deceptive characters revealed.
		cv.ToolDescription = tool.Description
	}
	warn := func(where, raw string, t templates.Text) {
		if !t.Deceptive() {
			return
		}
		w := templates.Warning{Where: where, Kinds: t.Warnings}
		if preview, ok := reveal.Rendered(raw, longValue); ok {
			// What a reader would see, beside what the text holds.
			w.Preview, w.Escaped = preview, t
		}
		cv.Warnings = append(cv.Warnings, w)
	}
	warn("tool", env.Tool, cv.Tool)
	warn("target", env.Target, cv.Target)
	warn("actor", env.Actor, cv.Actor)
	warn("audience", env.Audience, cv.Audience)
	stored := call.Args
	if stored == nil {
		stored = canonical.Object{}
	}
	var differ []string
	args, _ := mergeArgs(env.Args, stored, "", &differ).(canonical.Object)
	for _, ptr := range differ {
		cv.Warnings = append(cv.Warnings, templates.Warning{Where: "args " + shownPointer(ptr),
			Kinds: []string{"stored copy differs from what was hashed; shown as hashed"}})
	}
	b := treeBuilder{tool: tool, args: args, bound: env.Args, warn: warn}
	cv.Args = b.node(args, "", nil, -1)
	if obj, err := canonical.NewObject(canonical.Member{Name: "tool", Value: call.Tool},
		canonical.Member{Name: "target", Value: call.Target}, canonical.Member{Name: "args", Value: args}); err == nil {
		if b, err := canonical.Encode(obj); err == nil {
			cv.Canonical = asciiJSON(b)
			actor, audience := "ACTOR", "AUDIENCE" // the ones shown above, hidden characters and all
			if printableASCII(call.Actor) && printableASCII(call.Audience) {
				actor, audience = shellQuote(call.Actor), shellQuote(call.Audience)
			}
			cv.DigestCommand = "console digest --actor " + actor + " --audience " + audience + " --tools TOOLS.yaml call.json"
		}
	}
	if cv.Rationale != nil {
		warn("rationale", call.Rationale, *cv.Rationale)
	}
	return cv, nil
}

// mergeArgs is what the page shows of the arguments: every member of bound
// (what was hashed) as it is there, and the members of stored that bound
// leaves out (the informational ones). Where stored has another value at a
// bound position, bound's is shown and the pointer is added to differ.
func mergeArgs(bound, stored any, ptr string, differ *[]string) any {
	switch b := bound.(type) {
	case canonical.Object:
		s, _ := stored.(canonical.Object)
		if _, ok := stored.(canonical.Object); !ok && ptr != "" {
			*differ = append(*differ, ptr)
		}
		var members []canonical.Member
		for _, m := range b {
			sv, ok := s.Get(m.Name)
			if !ok {
				*differ = append(*differ, canonical.Join(ptr, m.Name))
				members = append(members, m)
				continue
			}
			members = append(members, canonical.Member{Name: m.Name, Value: mergeArgs(m.Value, sv, canonical.Join(ptr, m.Name), differ)})
		}
		for _, m := range s {
			if _, ok := b.Get(m.Name); !ok {
				members = append(members, m)
			}
		}
		out, err := canonical.NewObject(members...)
		if err != nil {
			return b
		}
		return out
	case []any:
		s, ok := stored.([]any)
		if !ok || len(s) != len(b) {
			*differ = append(*differ, ptr)
			return b
		}
		out := make([]any, len(b))
		for i := range b {
			out[i] = mergeArgs(b[i], s[i], canonical.Join(ptr, strconv.Itoa(i)), differ)
		}
		return out
	}
	be, berr := canonical.Encode(bound)
	se, serr := canonical.Encode(stored)
	if berr != nil || serr != nil || string(be) != string(se) {
		*differ = append(*differ, ptr)
	}
	return bound
}

// A string longer than longValue characters as shown, or with longLines
// line breaks or more, is shown collapsed with its length.
const (
	longValue = 300
	longLines = 8
)

// weight orders an object's members on the call page.
func weight(n templates.ArgNode) int {
	switch {
	case n.Long:
		return 2
	case n.Kind == "object" || n.Kind == "array":
		return 1
	}
	return 0
}

// asciiJSON writes every character of canonical JSON outside printable
// ASCII as a \u escape (a surrogate pair above U+FFFF): the same JSON
// value, so it recomputes the same digest, with nothing in it that could
// hide on the page. Outside strings, canonical JSON is ASCII already.
func asciiJSON(b []byte) string {
	var out strings.Builder
	for _, r := range string(b) {
		switch {
		case r >= 0x20 && r < 0x7f:
			out.WriteRune(r)
		case r > 0xffff:
			hi, lo := utf16.EncodeRune(r)
			fmt.Fprintf(&out, "\\u%04x\\u%04x", hi, lo)
		default:
			fmt.Fprintf(&out, "\\u%04x", r)
		}
	}
	return out.String()
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// shellQuote quotes s for a POSIX shell unless it is plain.
func shellQuote(s string) string {
	plain := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(":._-/@", r)) {
			plain = false
			break
		}
	}
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func groupsOfFour(s string) []string {
	out := make([]string, 0, (len(s)+3)/4)
	for len(s) > 4 {
		out = append(out, s[:4])
		s = s[4:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// treeBuilder turns args into the tree the page shows.
type treeBuilder struct {
	tool *tools.Tool
	args canonical.Object
	// bound are the arguments the digest covers, read back from the stored
	// envelope: a member of args missing from them is shown "not bound",
	// whatever the tools file says today.
	bound canonical.Object
	warn  func(where, raw string, t templates.Text)
}

// shownPointer is a pointer as a warning shows it: every deceptive
// character already escaped.
func shownPointer(ptr string) string {
	if ptr == "" {
		return "/"
	}
	var b strings.Builder
	for _, s := range reveal.Of(ptr).Segs {
		b.WriteString(s.S)
	}
	return b.String()
}

func (b treeBuilder) node(v any, ptr string, key *templates.Text, index int) templates.ArgNode {
	n := templates.ArgNode{Key: key, Index: index, Pointer: ptr, Kind: canonical.TypeName(v)}
	if b.bound != nil && ptr != "" {
		_, inDigest := canonical.Lookup(b.bound, ptr)
		n.NotBound = !inDigest
	}
	switch x := v.(type) {
	case canonical.Object:
		n.Kind = "object"
		for _, m := range x {
			k := reveal.Of(m.Name)
			cp := canonical.Join(ptr, m.Name)
			if k.Deceptive() {
				b.warn("args "+shownPointer(cp)+" (name)", m.Name, k)
			}
			n.Children = append(n.Children, b.node(m.Value, cp, &k, -1))
		}
		// Short members first, then objects and arrays, then long strings,
		// each in the call's order: a long value does not push the rest
		// of the call (or the decision) out of sight.
		slices.SortStableFunc(n.Children, func(a, b templates.ArgNode) int { return weight(a) - weight(b) })
	case []any:
		n.Kind = "array"
		for i, e := range x {
			n.Children = append(n.Children, b.node(e, canonical.Join(ptr, strconv.Itoa(i)), nil, i))
		}
	case string:
		n.Kind = "string"
		if x != "" {
			n.Value = reveal.Of(x)
			_, n.Length, n.Long = cutText(n.Value, longValue)
			if !n.Long && strings.Count(x, "\n") >= longLines {
				n.Long, n.Length = true, utf8.RuneCountInString(x)
			}
		}
		b.warn("args "+shownPointer(ptr), x, n.Value)
	case int64:
		n.Kind = "integer"
		n.Value = templates.Plain(strconv.FormatInt(x, 10))
		n.Money = b.money(ptr, x)
	case canonical.Number:
		// A number with a fraction, at a number path of a tool mirrored
		// from an MCP server: shown in its canonical (ECMAScript) form,
		// which is what was hashed.
		n.Kind = "number"
		n.Value = templates.Plain(x.String())
	case bool:
		n.Kind = "boolean"
		n.Value = templates.Plain(strconv.FormatBool(x))
	case nil:
		n.Kind = "null"
		n.Value = templates.Plain("null")
	default:
		// The canonical parser produces nothing else; show it rather than
		// hide it.
		n.Value = reveal.Of(canonical.TypeName(v))
	}
	return n
}

// money formats the integer at ptr when the tool displays it as money and
// the currency member is a string.
func (b treeBuilder) money(ptr string, amount int64) string {
	if b.tool == nil || b.tool.Money == nil || b.tool.Money.Amount != ptr {
		return ""
	}
	cur, ok := canonical.Lookup(b.args, b.tool.Money.Currency)
	if !ok {
		return ""
	}
	code, ok := cur.(string)
	if !ok || !isCurrencyCode(code) {
		return "" // only the raw integer is shown
	}
	return tools.FormatMoney(amount, code)
}

// isCurrencyCode accepts three capital ASCII letters, as ISO 4217 codes
// are: free text beside an amount could make it read as another amount.
func isCurrencyCode(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// delegators lists the people with a delegation to v live at now. It is
// read only for a viewer whose own standing does not let them approve a
// call, so the ordinary page reads nothing more; the decision checks the
// delegation, and the delegator's standing, again.
func (c *Console) delegators(v *viewer, now time.Time) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ds, err := c.q.Delegations(ctx, queue.DelegationFilter{Person: v.user.Name, LiveAt: now, Limit: 2 * queue.MaxDelegationsPerPerson})
	if err != nil {
		c.log.Warn("console: delegations of the viewer", slog.String("user", v.user.Name), slog.Any("error", err))
		return nil
	}
	var out []string
	for _, d := range ds {
		if d.Delegate == v.user.Name && d.LiveAt(now) {
			out = append(out, d.Delegator)
		}
	}
	return out
}

// tierAdds says what an escalation tier adds: "adds role admin, group
// leads; notifies oncall".
func tierAdds(t tools.Tier) string {
	var adds []string
	if len(t.AddRoles) > 0 {
		adds = append(adds, plural("role", len(t.AddRoles))+" "+strings.Join(t.AddRoles, ", "))
	}
	if len(t.AddGroups) > 0 {
		adds = append(adds, plural("group", len(t.AddGroups))+" "+strings.Join(t.AddGroups, ", "))
	}
	var out []string
	if len(adds) > 0 {
		out = append(out, "adds "+strings.Join(adds, ", ")+" to who can approve")
	}
	if len(t.Notify) > 0 {
		out = append(out, "notifies "+strings.Join(t.Notify, ", "))
	}
	return reveal.String(strings.Join(out, "; "))
}

func plural(s string, n int) string {
	if n == 1 {
		return s
	}
	return s + "s"
}

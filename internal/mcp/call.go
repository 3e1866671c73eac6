package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/mcp/catalog"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/tools"
)

// Statuses of the structuredContent of the gateway's own tool results.
const (
	StatusApprovalPending = "approval_pending"
	StatusDenied          = "denied"
	StatusExpired         = "expired"
	StatusCancelled       = "cancelled"
	// StatusCountered: an operator answered the call with an edited one;
	// the result names its arguments, to call instead.
	StatusCountered         = "countered"
	StatusInvalidArguments  = "invalid_arguments"
	StatusUnderReview       = "tool_under_review"
	StatusToolChanged       = "tool_changed"
	StatusFrozen            = "frozen"
	StatusRetryLimit        = "retry_limit"
	StatusAlreadyRun        = "already_run"
	StatusNotSent           = "not_sent"
	StatusOutcomeUnknown    = "outcome_unknown"
	StatusUnavailable       = "unavailable"
	StatusTooManyWaits      = "too_many_waits"
	StatusTooManyPending    = "too_many_pending"
	StatusTokenRevoked      = "token_revoked"
	StatusUpstreamRedirect  = "upstream_redirect"
	StatusServerQuarantined = "server_quarantined"
)

// retryAfterWaits is how long a call refused a hold should wait before it
// is re-issued, in seconds (the API's Retry-After for too_many_waits).
const retryAfterWaits = 5

// upstreamWait is how long an approved call waits for its upstream to
// (re)connect before it is answered as not sent.
const upstreamWait = 5 * time.Second

// call runs one tools/call: parse, submit, wait, redeem, forward, report.
func (g *Gateway) call(ctx context.Context, server string, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	agent, ok := g.agentOf(req)
	if !ok || agent.Audience != server {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "the session has no agent token for this server"}
	}
	name := req.Params.Name
	full := tools.MirroredName(server, name)
	t, ok := g.cfg.Queue.Tools().Tool(full)
	if !ok || t.Mirror == nil {
		return g.notCallable(server, name), nil
	}
	p, perr := parseCall(t, req.Params.Arguments)
	// The gateway is the call's executor: with its upstream connected, a
	// call that a rule or an allowance approves at submission is redeemed
	// in the submission's own transaction (one commit, every check made
	// and audited), then forwarded. Otherwise it is redeemed when it is
	// forwarded, as below.
	var c *queue.Call
	var redeemed *queue.Redemption
	var err error
	// Counted from before the redemption until its outcome is written
	// (forward), so that Drain waits for the forward it may lead to; once
	// Close has begun, nothing is redeemed.
	if g.upstreamConnected(t) && g.pending.add() {
		// The outcomes of the calls answered before this one are written
		// in its transaction: one commit per call while calls follow
		// each other.
		held := g.held.take()
		var wrote bool
		c, _, redeemed, wrote, err = g.cfg.Queue.SubmitAndRedeem(ctx, agent.principal(), p, perr, held)
		g.settleHeld(held, wrote)
		if err != nil || redeemed == nil || !redeemed.Accepted {
			g.pending.done()
		}
	} else {
		c, _, err = g.cfg.Queue.SubmitProposal(ctx, agent.principal(), p, perr)
	}
	if err == nil && c.CounteredFrom != "" && c.AcceptedAt.IsZero() && c.Status == queue.StatusPending {
		// Calling a counter-proposal's arguments is accepting it: its
		// grant is minted once its approvals are complete.
		c, err = g.cfg.Queue.Accept(ctx, agent.principal(), c.ID)
	}
	var ce *queue.CounteredError
	if errors.As(err, &ce) {
		return g.counteredResult(ctx, name, ce.CallID, ce.CounterID), nil
	}
	if err != nil {
		return g.submitError(full, c, err), nil
	}
	log := g.log.With(slog.String("call", c.ID), slog.String("tool", full), slog.String("actor", agent.Actor))
	if redeemed != nil {
		if !redeemed.Accepted {
			return redemptionRefused(t.Mirror.UpstreamName, c, redeemed), nil
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.ForwardTimeout)
		defer cancel()
		return g.forward(ctx, log, agent, t, p, c), nil
	}
	if c.Status == queue.StatusPending {
		release, ok := g.acquireHold(agent.TokenID)
		if !ok {
			log.Info("tools/call not held: the token holds its maximum of requests waiting", slog.Int("max", g.cfg.Waits.Max()))
			return g.tooManyWaits(name, c, g.cfg.Waits.Max()), nil
		}
		c, err = g.hold(ctx, agent, req, c)
		release()
		if err != nil {
			// The client went away (or cancelled): the call stays pending.
			return nil, err
		}
		if c.Status == queue.StatusApproved {
			// The token was checked when the request arrived, up to the
			// hold ago: a token revoked since redeems nothing (over the
			// agent API the redemption is a request of its own).
			if res := g.recheck(ctx, log, agent, c); res != nil {
				return res, nil
			}
		}
	}
	if c.Status == queue.StatusCountered && t.Counter != nil && t.Counter.Forward {
		if res := g.forwardCounter(ctx, log, agent, t, name, c); res != nil {
			return res, nil
		}
	}
	switch c.Status {
	case queue.StatusPending:
		if caps := req.ClientCapabilities(); caps != nil && caps.Elicitation != nil && caps.Elicitation.URL != nil {
			g.follow(c.ID, req.Session)
			return nil, sdk.URLElicitationRequiredError([]*sdk.ElicitParams{{
				Mode: "url", URL: g.statusURL(c.ID), ElicitationID: c.ID,
				Message: fmt.Sprintf("Countersign is holding this call of %s for an operator's approval (digest %s). "+
					"Open the page to follow it; the call runs once it is approved and re-issued, before its grant runs out (%d seconds after the approval).", name, groups(c.Digest), int(c.GrantLife()/time.Second)),
			}})
		}
		return g.pendingResult(name, c), nil
	case queue.StatusApproved:
		return g.redeemAndForward(ctx, log, agent, t, p, c), nil
	}
	return g.decidedResult(ctx, name, c), nil
}

// recheck checks the request's token again before a held call is
// redeemed: nil when it is still valid, else the answer (nothing runs, the
// call stays approved).
func (g *Gateway) recheck(ctx context.Context, log *slog.Logger, agent Agent, c *queue.Call) *sdk.CallToolResult {
	if agent.secret == "" {
		return nil
	}
	_, err := g.cfg.Authenticate(ctx, agent.secret)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrUnauthorized):
		log.Warn("held call approved after its token was revoked: not redeemed")
		return toolError(StatusTokenRevoked, "The call was approved, but this agent's token was revoked while it waited, so it was not run. Ask a person for a new token.",
			map[string]any{"call_id": c.ID})
	}
	log.Error("token check failed", slog.Any("error", err))
	return toolError(StatusUnavailable, "Countersign could not check this agent's token right now; the approved call was not sent. Re-issue the identical call to run it.",
		map[string]any{"call_id": c.ID})
}

// parseCall reads a tools/call's raw arguments with internal/canonical
// under the mirrored tool's number paths, never through encoding/json, and
// makes the proposal: the tool's registered name, its target (fixed, or the
// string at the tool's target pointer) and the arguments. Absent arguments
// are the empty object.
func parseCall(t *tools.Tool, raw json.RawMessage) (canonical.Proposal, error) {
	p := canonical.Proposal{Tool: t.Name}
	if len(raw) == 0 {
		raw = json.RawMessage(`{}`)
	}
	v, err := canonical.ParseWith(raw, canonical.Options{MaxBytes: canonical.MaxBodyBytes, MaxDepth: canonical.MaxArgsDepth,
		Numbers: t.Mirror.ArgsNumbers()})
	if err != nil {
		pr := *err.(*canonical.Problem)
		pr.Path = "/args" + pr.Path
		return p, canonical.Problems{pr}
	}
	args, _ := v.(canonical.Object)
	target, ok := t.TargetFor(args)
	var targetProblem canonical.Problems
	if !ok {
		if args != nil {
			ptr := t.Mirror.TargetPointer
			targetProblem = canonical.Problems{{Code: canonical.CodeMissingField, Path: "/args" + ptr, Offset: -1,
				Message: fmt.Sprintf("%s is required: it is the call's target, a string", ptr)}}
		}
		target = "-" // a stand-in, so that the rest is still checked; the call is refused
	}
	p, problems := canonical.ProposalFrom(canonical.Object{{Name: "args", Value: v}, {Name: "target", Value: target},
		{Name: "tool", Value: t.Name}}, "", false)
	p.Tool = t.Name
	if problems = append(targetProblem, problems...); len(problems) > 0 {
		return p, problems
	}
	return p, nil
}

// acquireHold takes one of the token's places for a held tools/call; ok
// is false when it holds its maximum already.
func (g *Gateway) acquireHold(token string) (release func(), ok bool) {
	if !g.cfg.Waits.Acquire(token) {
		return nil, false
	}
	return func() { g.cfg.Waits.Release(token) }, true
}

// holds is the gateway's own count of held requests per token, when it is
// not given the agent API's.
type holds struct {
	max  int
	mu   sync.Mutex
	open map[string]int
}

func (h *holds) Acquire(token string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open[token] >= h.max {
		return false
	}
	h.open[token]++
	return true
}

func (h *holds) Release(token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open[token]--; h.open[token] <= 0 {
		delete(h.open, token)
	}
}

func (h *holds) Max() int { return h.max }

// hold waits for a decision on c for up to the hold, sending progress
// notifications when the client asked for them, every one of them before
// the answer (they are sent from this goroutine only).
func (g *Gateway) hold(ctx context.Context, agent Agent, req *sdk.CallToolRequest, c *queue.Call) (*queue.Call, error) {
	token := req.Params.GetProgressToken()
	deadline := time.Now().Add(g.cfg.Hold)
	step := 0
	for {
		wait := time.Until(deadline)
		if token != nil {
			wait = min(wait, g.cfg.ProgressEvery)
		}
		got, err := g.cfg.Queue.Wait(ctx, agent.principal(), c.ID, wait)
		if err != nil {
			return nil, err
		}
		if got.Status != queue.StatusPending || !time.Now().Before(deadline) {
			return got, nil
		}
		if token != nil {
			step++
			msg := fmt.Sprintf("waiting for an operator's approval of call %s (%d of %d approvals)", c.ID, len(got.Approvals), got.ApprovalsRequired)
			if err := req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token,
				Progress: float64(step), Message: msg}); err != nil {
				g.log.Debug("progress notification not sent", slog.Any("error", err))
			}
		}
	}
}

// redeemAndForward redeems the grant with the very proposal that was
// submitted and forwards exactly the canonical argument bytes that were
// hashed; the upstream's result goes back without loss, and its outcome is
// reported.
func (g *Gateway) redeemAndForward(ctx context.Context, log *slog.Logger, agent Agent, t *tools.Tool, p canonical.Proposal, c *queue.Call) *sdk.CallToolResult {
	name := t.Mirror.UpstreamName
	u := g.upstreams[t.Mirror.Server]
	// Nothing is redeemed while the upstream is away: the call stays
	// approved, and the same call re-issued within the grant's life runs.
	select {
	case <-u.Connected():
	case <-time.After(upstreamWait):
		return toolError(StatusNotSent, fmt.Sprintf("The upstream %s is not connected, so the approved call was not sent. It stays approved until %s: re-issue the identical call to run it.",
			t.Mirror.Server, c.GrantExpiresAt.UTC().Format(time.RFC3339)), map[string]any{"call_id": c.ID})
	case <-ctx.Done():
		return toolError(StatusNotSent, "The request ended before the approved call was sent; re-issue it to run it.", map[string]any{"call_id": c.ID})
	}
	// From here on the call runs to its end whatever the client does.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.ForwardTimeout)
	defer cancel()
	// Counted from before the redemption until its outcome is written
	// (forward), so that Drain waits for the forward; once Close has
	// begun, nothing is redeemed.
	if !g.pending.add() {
		return toolError(StatusNotSent, fmt.Sprintf("Countersign is shutting down, so the approved call was not sent. It stays approved until %s: re-issue the identical call once Countersign answers again.",
			c.GrantExpiresAt.UTC().Format(time.RFC3339)), map[string]any{"call_id": c.ID})
	}
	r, err := g.cfg.Queue.RedeemCall(ctx, agent.principal(), c.Grant, p)
	if err != nil || !r.Accepted {
		g.pending.done()
	}
	if err != nil {
		var pe *queue.ProposalError
		if errors.As(err, &pe) {
			return invalidResult(pe)
		}
		log.Error("redemption failed", slog.Any("error", err))
		return toolError(StatusUnavailable, "Countersign could not redeem the approval right now; nothing was sent. Re-issue the call later.", map[string]any{"call_id": c.ID})
	}
	if !r.Accepted {
		return redemptionRefused(name, c, r)
	}
	return g.forward(ctx, log, agent, t, p, c)
}

// upstreamConnected reports whether t's upstream is connected now.
func (g *Gateway) upstreamConnected(t *tools.Tool) bool {
	u := g.upstreams[t.Mirror.Server]
	if u == nil {
		return false
	}
	select {
	case <-u.Connected():
		return true
	default:
		return false
	}
}

// forward sends a redeemed call to its upstream with exactly the canonical
// argument bytes that were hashed, returns the upstream's result without
// loss, and reports the outcome. ctx is the forward's own, which the
// client's going away does not end. It is called counted in g.pending
// (from before the redemption) and ends the count once the outcome is
// written: Drain waits for a forward under way, up to ForwardTimeout and
// the outcome's write.
func (g *Gateway) forward(ctx context.Context, log *slog.Logger, agent Agent, t *tools.Tool, p canonical.Proposal, c *queue.Call) *sdk.CallToolResult {
	handed := false
	defer func() {
		if !handed {
			g.pending.done()
		}
	}()
	name := t.Mirror.UpstreamName
	u := g.upstreams[t.Mirror.Server]
	args, err := canonical.Encode(p.Args)
	if err != nil {
		g.outcome(ctx, log, agent, c, "failed", "not sent: the arguments could not be encoded")
		return toolError(StatusNotSent, "The arguments could not be encoded; nothing was sent.", map[string]any{"call_id": c.ID})
	}
	res, err := u.Call(ctx, name, args)
	var rpcErr *RPCError
	var redirect *RedirectError
	switch {
	case errors.Is(err, ErrNotConnected):
		g.outcome(ctx, log, agent, c, "failed", "not sent: the upstream disconnected before the call was forwarded")
		return toolError(StatusNotSent, fmt.Sprintf("The upstream %s disconnected before the call was sent; nothing ran. Re-issue the call to propose it again.", t.Mirror.Server),
			map[string]any{"call_id": c.ID})
	case errors.As(err, &redirect):
		g.outcome(ctx, log, agent, c, "failed", fmt.Sprintf("the upstream answered %d redirecting to %s, which Countersign does not follow", redirect.Status, clip(redirect.Location)))
		return toolError(StatusUpstreamRedirect, fmt.Sprintf("The upstream %s answered the call with a redirect (%d to %s), which Countersign does not follow, so the call did not reach any other address. "+
			"Ask a person to fix the upstream's address in the tools file.", t.Mirror.Server, redirect.Status, redirect.Location),
			map[string]any{"call_id": c.ID, "location": redirect.Location})
	case errors.As(err, &rpcErr):
		g.outcome(ctx, log, agent, c, "failed", fmt.Sprintf("the upstream answered error %d: %s", rpcErr.Code, clip(rpcErr.Message)))
		return toolError("upstream_error", fmt.Sprintf("The upstream refused the call with error %d: %s", rpcErr.Code, rpcErr.Message),
			map[string]any{"call_id": c.ID, "code": rpcErr.Code})
	case err != nil:
		g.outcome(ctx, log, agent, c, "unknown", "the connection broke after the call was sent: "+clip(err.Error()))
		return toolError(StatusOutcomeUnknown, "The connection to the upstream broke after the call was sent: whether it ran is unknown. Do not re-issue it blindly; ask a person to check.",
			map[string]any{"call_id": c.ID})
	}
	out, err := ResultFromRaw(res.Raw)
	if err != nil {
		g.outcome(ctx, log, agent, c, "unknown", "the upstream's result could not be read: "+clip(err.Error()))
		return toolError(StatusOutcomeUnknown, "The call ran, but the upstream's result could not be read; ask a person to check what happened.",
			map[string]any{"call_id": c.ID})
	}
	if res.IsError {
		g.outcome(ctx, log, agent, c, queue.OutcomeFailed, "the upstream answered with isError")
		return out
	}
	// A call that succeeded is answered before its outcome is written: the
	// gateway reports it as any executor does, after holding the result,
	// and the agent does not wait for that commit. The redemption is
	// already durable, so nothing can run twice; a crash before the write
	// leaves the call redeemed without an outcome, which its lease then
	// marks for people to resolve. A failed or unknown outcome is written
	// before the answer, so that whatever the model does next about the
	// failure meets it recorded.
	handed = true
	g.holdOutcome(queue.HeldOutcome{Who: agent.principal(), CallID: c.ID, Status: queue.OutcomeSucceeded, At: g.cfg.Queue.Now()})
	return out
}

// heldOutcomes are the outcomes of calls answered before their outcome was
// written, each still counted in the gateway's pending writes. The next
// call submitted with its redemption writes them in its own transaction;
// what no call took within OutcomeDelay is written in a transaction of its
// own, and Drain writes them at once.
type heldOutcomes struct {
	mu       sync.Mutex
	list     []queue.HeldOutcome
	timer    *time.Timer // set while the list is not empty
	draining int         // Drain calls under way: nothing waits
}

// take empties the list, for a transaction that writes what it held.
func (h *heldOutcomes) take() []queue.HeldOutcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.list
	h.list = nil
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	return out
}

// holdOutcome keeps the outcome of a call that was answered, to be written
// with the next call (or after OutcomeDelay, or by Drain). A call that
// succeeded is answered before its outcome is written: the gateway reports
// it as any executor does, after holding the result, and the agent does
// not wait for that commit. The redemption is already durable, so nothing
// can run twice; a crash before the write leaves the call redeemed without
// an outcome, which its lease then marks for people to resolve.
func (g *Gateway) holdOutcome(o queue.HeldOutcome) {
	g.putHeld([]queue.HeldOutcome{o})
}

// putHeld adds outcomes to the held list and makes sure they are written.
func (g *Gateway) putHeld(os []queue.HeldOutcome) {
	h := &g.held
	h.mu.Lock()
	h.list = append(h.list, os...)
	now := h.draining > 0
	if !now && h.timer == nil {
		h.timer = time.AfterFunc(g.cfg.OutcomeDelay, g.writeHeld)
	}
	h.mu.Unlock()
	if now {
		go g.writeHeld()
	}
}

// settleHeld ends the count of held outcomes a submission wrote, or holds
// them again when it did not.
func (g *Gateway) settleHeld(held []queue.HeldOutcome, wrote bool) {
	if len(held) == 0 {
		return
	}
	if !wrote {
		g.putHeld(held)
		return
	}
	for range held {
		g.pending.done()
	}
}

// writeHeld writes the held outcomes in one transaction of their own.
func (g *Gateway) writeHeld() {
	held := g.held.take()
	if len(held) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), outcomeWriteTimeout)
	defer cancel()
	if err := g.cfg.Queue.ReportOutcomes(ctx, held); err != nil {
		g.log.Error("outcomes not recorded", slog.Int("calls", len(held)), slog.String("call", held[0].CallID), slog.Any("error", err))
	}
	for range held {
		g.pending.done()
	}
}

// outcome records what became of a forwarded call. It has a time of its
// own: the forward's context may have ended (the upstream never answered
// within ForwardTimeout), and that is exactly when an unknown outcome must
// still reach the Unresolved page.
func (g *Gateway) outcome(ctx context.Context, log *slog.Logger, agent Agent, c *queue.Call, status, detail string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outcomeWriteTimeout)
	defer cancel()
	if _, err := g.cfg.Queue.ReportOutcome(ctx, agent.principal(), c.ID, status, detail); err != nil {
		log.Error("outcome not recorded", slog.String("status", status), slog.Any("error", err))
	}
}

// Drain returns once every call redeemed has been forwarded and its outcome
// written, those answered before their outcome included: the console calls
// it after the HTTP server shut down, before the database closes. A
// forward that outlived the shutdown (its upstream slow to answer) is
// waited for, up to ForwardTimeout and the outcome's write.
func (g *Gateway) Drain() {
	g.held.mu.Lock()
	g.held.draining++
	g.held.mu.Unlock()
	defer func() {
		g.held.mu.Lock()
		g.held.draining--
		g.held.mu.Unlock()
	}()
	g.writeHeld()
	g.pending.wait()
}

// Close stops the gateway redeeming calls, then drains it: a request
// still running after the HTTP server's shutdown gave up on it redeems
// nothing (the call stays approved, and the agent is told to re-issue it),
// so no call can run with the database closed under its outcome. The
// console calls it after the HTTP server shut down, before the database
// closes.
func (g *Gateway) Close() {
	g.pending.close()
	g.Drain()
}

// writes counts the calls redeemed whose outcome is not written yet.
type writes struct {
	mu     sync.Mutex
	n      int
	idle   *sync.Cond
	closed bool // no more are counted: add reports false
}

// add counts one more, unless close was called: then it reports false,
// and the caller must not redeem.
func (w *writes) add() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.n++
	return true
}

func (w *writes) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

func (w *writes) done() {
	w.mu.Lock()
	if w.n--; w.n == 0 && w.idle != nil {
		w.idle.Broadcast()
	}
	w.mu.Unlock()
}

func (w *writes) wait() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.idle == nil {
		w.idle = sync.NewCond(&w.mu)
	}
	for w.n > 0 {
		w.idle.Wait()
	}
}

// outcomeWriteTimeout bounds the write of a forwarded call's outcome.
const outcomeWriteTimeout = 30 * time.Second

func clip(s string) string {
	const max = 500
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// statusURL is the page of a call for the agent's own user: the status
// page when the console serves one, else the console's call page.
func (g *Gateway) statusURL(id string) string {
	if g.cfg.StatusURL != nil {
		return g.cfg.StatusURL(id)
	}
	return g.cfg.PublicURL + "/calls/" + id
}

// groups writes a digest in groups of four, as the console shows it.
func groups(d string) string {
	var b strings.Builder
	for i := 0; i < len(d); i += 4 {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(d[i:min(i+4, len(d))])
	}
	return b.String()
}

// toolError is a tool result with isError: text for the model and a
// structuredContent that a program can read. Beside the gateway's status it
// carries code, the agent API's code for the same refusal (fields["code"]
// when the caller names it; else the status, for what only the gateway
// answers and for a call's final state, which the API reads the same).
func toolError(status, text string, fields map[string]any) *sdk.CallToolResult {
	sc := map[string]any{"status": status, "code": status}
	for k, v := range fields {
		sc[k] = v
	}
	b, _ := json.Marshal(sc)
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: text}}, StructuredContent: json.RawMessage(b)}
}

func (g *Gateway) pendingResult(name string, c *queue.Call) *sdk.CallToolResult {
	url := g.statusURL(c.ID)
	return toolError(StatusApprovalPending, fmt.Sprintf("This call of %s is waiting for an operator's approval in Countersign (call %s, %d of %d approvals, decide by %s). "+
		"Nothing has run. Re-issue exactly the same call, with the same arguments, to wait again; it runs once approved. "+
		"Once it is approved, re-issue it before its grant runs out, %d seconds after the approval: after that the approval can no longer be used and the call needs a new one. Its status page: %s",
		name, c.ID, len(c.Approvals), c.ApprovalsRequired, c.DecideBy.UTC().Format(time.RFC3339), int(c.GrantLife()/time.Second), url),
		map[string]any{"call_id": c.ID, "approval_url": url, "decide_by": c.DecideBy.UTC().Format(time.RFC3339), "digest": c.Digest})
}

// tooManyWaits answers a pending call that is not held because its token
// holds as many waiting requests as it may: the call is recorded, and the
// model is told to wait for the others or re-issue it a little later.
func (g *Gateway) tooManyWaits(name string, c *queue.Call, max int) *sdk.CallToolResult {
	url := g.statusURL(c.ID)
	return toolError(StatusTooManyWaits, fmt.Sprintf("Countersign did not hold this call of %s: this agent's token already holds %d requests waiting for decisions, its limit. "+
		"The call is recorded (call %s) and waits for an operator's approval; nothing has run. "+
		"Wait for one of the other requests to return, or re-issue exactly the same call in %d seconds. Status page: %s",
		name, max, c.ID, retryAfterWaits, url),
		map[string]any{"call_id": c.ID, "approval_url": url, "decide_by": c.DecideBy.UTC().Format(time.RFC3339), "digest": c.Digest,
			"retry_after_seconds": retryAfterWaits, "max_waits": max})
}

// decidedResult answers a call that ended without running.
func (g *Gateway) decidedResult(ctx context.Context, name string, c *queue.Call) *sdk.CallToolResult {
	fields := map[string]any{"call_id": c.ID, "digest": c.Digest}
	switch c.Status {
	case queue.StatusCountered:
		return g.counteredResult(ctx, name, c.ID, c.CounteredBy)
	case queue.StatusDenied:
		reason, by := "", ""
		if c.Denial != nil {
			reason, by = c.Denial.Reason, g.cfg.PublicNames(ctx)(c.Denial.By)
		}
		fields["reason"], fields["by"] = reason, by
		return toolError(StatusDenied, fmt.Sprintf("The call of %s was denied by %s: %s. It did not run; do not re-issue the same call.", name, by, reason), fields)
	case queue.StatusExpired:
		return toolError(StatusExpired, fmt.Sprintf("Nobody decided on the call of %s in time, so it expired without running. Propose it again (re-issue the call) if it is still needed.", name), fields)
	case queue.StatusCancelled:
		return toolError(StatusCancelled, fmt.Sprintf("The call of %s was cancelled and did not run.", name), fields)
	case queue.StatusRedeemed:
		return toolError(StatusAlreadyRun, fmt.Sprintf("The identical call of %s was already run by another request, which received its result.", name), fields)
	}
	return toolError(string(c.Status), fmt.Sprintf("The call of %s is %s.", name, c.Status), fields)
}

// counteredResult answers a call an operator countered: it did not run,
// and the model is told what the operator changed and the exact
// arguments to call the tool with instead (which accepts the counter).
func (g *Gateway) counteredResult(ctx context.Context, name, origID, counterID string) *sdk.CallToolResult {
	fields := map[string]any{"call_id": origID, "countered_by": counterID, "code": "countered"}
	orig, err1 := g.cfg.Queue.Call(ctx, origID)
	counter, err2 := g.cfg.Queue.Call(ctx, counterID)
	if err1 != nil || err2 != nil {
		return toolError(StatusCountered, fmt.Sprintf("An operator answered this call of %s with an edited one (call %s); it did not run. "+
			"Countersign cannot show the edited call right now; retry later.", name, counterID), fields)
	}
	args, err := counter.Args.MarshalJSON()
	if err != nil {
		args = []byte("{}")
	}
	changed := CounterChanges(orig, counter)
	fields["counter_digest"], fields["counter_args"], fields["changed"] = counter.Digest, json.RawMessage(args), changed
	return toolError(StatusCountered, fmt.Sprintf("An operator did not approve this call of %s as it was and proposed an edited one instead: %s. "+
		"This call did not run and will not. To run the edited call, call %s again with exactly these arguments: %s",
		name, strings.Join(changed, "; "), name, args), fields)
}

// forwardCounter runs the counter-proposal of countered call c itself, for
// a tool whose counter block says forward: it accepts the counter and,
// when its approvals are complete, redeems and forwards it, the result
// starting with what the operator changed. nil when the counter cannot
// run now (it waits for another person): the model is then told of it.
func (g *Gateway) forwardCounter(ctx context.Context, log *slog.Logger, agent Agent, t *tools.Tool, name string, c *queue.Call) *sdk.CallToolResult {
	counter, err := g.cfg.Queue.Accept(ctx, agent.principal(), c.CounteredBy)
	if err != nil || counter.Status != queue.StatusApproved {
		return nil
	}
	res := g.redeemAndForward(ctx, log, agent, t, canonical.Proposal{Tool: counter.Tool, Target: counter.Target, Args: counter.Args}, counter)
	note := fmt.Sprintf("An operator changed this call before approving it: %s. What ran is the edited call (%s), not the one you made.",
		strings.Join(CounterChanges(c, counter), "; "), counter.ID)
	res.Content = append([]sdk.Content{&sdk.TextContent{Text: note}}, res.Content...)
	return res
}

// CounterChanges says, one phrase per member, what the operator changed
// from orig to its counter-proposal: the target and each argument whose
// value differs, added or removed.
func CounterChanges(orig, counter *queue.Call) []string {
	var out []string
	if orig.Target != counter.Target {
		out = append(out, fmt.Sprintf("target %q changed to %q", orig.Target, counter.Target))
	}
	enc := func(v any) string {
		b, err := canonical.Encode(v)
		if err != nil {
			return "?"
		}
		return string(b)
	}
	for _, m := range counter.Args {
		was, ok := orig.Args.Get(m.Name)
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s set to %s", m.Name, enc(m.Value)))
		case enc(was) != enc(m.Value):
			out = append(out, fmt.Sprintf("%s changed from %s to %s", m.Name, enc(was), enc(m.Value)))
		}
	}
	for _, m := range orig.Args {
		if _, ok := counter.Args.Get(m.Name); !ok {
			out = append(out, fmt.Sprintf("%s removed (was %s)", m.Name, enc(m.Value)))
		}
	}
	return out
}

// redemptionRefused answers a grant that could not be redeemed.
func redemptionRefused(name string, c *queue.Call, r *queue.Redemption) *sdk.CallToolResult {
	// The API's redemption answer names the refusal by the same reason.
	fields := map[string]any{"call_id": c.ID, "reason": r.Reason, "code": r.Reason}
	switch r.Reason {
	case grant.ReasonReplayed:
		return toolError(StatusAlreadyRun, fmt.Sprintf("The identical call of %s was already run by another request, which received its result.", name), fields)
	case grant.ReasonToolChanged:
		return toolError(StatusToolChanged, fmt.Sprintf("The definition of %s changed since this call was approved, so it did not run. Re-issue the call to propose it under the new definition.", name), fields)
	case grant.ReasonFrozen:
		msg := fmt.Sprintf("Calls of %s are frozen in Countersign, so the approved call did not run.", name)
		if r.Freeze != nil {
			msg += " Reason: " + r.Freeze.Reason
			fields["freeze_reason"] = r.Freeze.Reason
		}
		return toolError(StatusFrozen, msg+" Ask a person before trying again.", fields)
	case grant.ReasonExpired:
		return toolError(StatusExpired, fmt.Sprintf("The approval of the call of %s expired before it was used, so it did not run. Re-issue the call to propose it again; once it is approved, re-issue it before its new grant runs out, %d seconds after the approval.",
			name, int(c.GrantLife()/time.Second)), fields)
	}
	return toolError("redemption_refused", fmt.Sprintf("Countersign refused to run the call of %s (%s); nothing ran.", name, r.Reason), fields)
}

// notCallable answers a call of a tool that is listed but cannot be called.
func (g *Gateway) notCallable(server, name string) *sdk.CallToolResult {
	if g.cfg.Catalog.Quarantined(server) {
		return toolError(StatusServerQuarantined, fmt.Sprintf("The MCP server %s is quarantined in Countersign until an administrator reviews it; none of its tools can be called now. Ask a person.", server),
			map[string]any{"tool": name})
	}
	for _, e := range g.cfg.Catalog.Entries(server) {
		if e.Pin.Tool != name && ListedName(e) != name {
			continue
		}
		switch e.Status {
		case catalog.Pending:
			return toolError(StatusUnderReview, fmt.Sprintf("The tool %s is awaiting an administrator's review of its definition in Countersign; calls are refused until it is approved. Ask a person.", name),
				map[string]any{"tool": name})
		case catalog.Rejected:
			return toolError("tool_rejected", fmt.Sprintf("An administrator rejected the current definition of %s; it cannot be called.", name), map[string]any{"tool": name})
		}
	}
	return toolError("unknown_tool", fmt.Sprintf("%s is not a tool this server offers now.", name), map[string]any{"tool": name})
}

// submitError answers a submission that was refused.
func (g *Gateway) submitError(tool string, c *queue.Call, err error) *sdk.CallToolResult {
	var pe *queue.ProposalError
	var de *queue.DeniedError
	var pd *queue.PolicyDeniedError
	var fe *queue.FrozenError
	code := problem.Of(err).Code
	switch {
	case errors.As(err, &pe):
		return invalidResult(pe)
	case errors.As(err, &pd):
		return toolError(StatusDenied, fmt.Sprintf("A rule denied this call (rule %s): %s. It did not run; do not re-issue the same call.", pd.Rule, pd.Reason),
			map[string]any{"call_id": pd.CallID, "reason": pd.Reason, "rule": pd.Rule, "code": code})
	case errors.As(err, &de):
		return toolError(StatusDenied, fmt.Sprintf("An operator denied this exact call at %s: %s. Change the call or ask a person before trying again.",
			de.At.UTC().Format(time.RFC3339), de.Reason), map[string]any{"call_id": de.CallID, "reason": de.Reason, "code": code})
	case errors.As(err, &fe):
		return toolError(StatusFrozen, fmt.Sprintf("Calls of this tool are frozen in Countersign since %s: %s. Ask a person before trying again.",
			fe.Freeze.At.UTC().Format(time.RFC3339), fe.Freeze.Reason), map[string]any{"reason": fe.Freeze.Reason, "code": code})
	case errors.Is(err, queue.ErrTooManyPending):
		return toolError(StatusTooManyPending, "Countersign did not record this call: this agent's token already has as many calls waiting for a decision as it may. "+
			"Nothing ran. Wait for some of them to be decided before calling again.", map[string]any{"code": code})
	case errors.Is(err, queue.ErrRetryLimit):
		// The model is handed no command line that acts in an operator's name.
		return toolError(StatusRetryLimit, "Three calls of this tool in a row were refused; stop retrying and ask a person "+
			"(an operator can clear the block in the console).", map[string]any{"code": code})
	}
	g.log.Error("submission failed", slog.String("tool", tool), slog.Any("error", err))
	return toolError(StatusUnavailable, "Countersign cannot record calls right now; nothing ran. Retry later.", map[string]any{"code": code})
}

// invalidResult lists every problem of a refused call, with JSON Pointers
// from the proposal's root: /args is the tool's arguments.
func invalidResult(pe *queue.ProposalError) *sdk.CallToolResult {
	var b strings.Builder
	noun := "problems"
	if len(pe.Problems) == 1 {
		noun = "problem"
	}
	fmt.Fprintf(&b, "Countersign refused the call: %d %s in its arguments. Nothing ran. Fix them and call again:", len(pe.Problems), noun)
	problems := make([]any, len(pe.Problems))
	for i, p := range pe.Problems {
		fmt.Fprintf(&b, "\n- %s at %s: %s", p.Code, p.Path, p.Message)
		problems[i] = map[string]any{"code": p.Code, "path": p.Path, "message": p.Message}
	}
	return toolError(StatusInvalidArguments, b.String(), map[string]any{"problems": problems, "code": problem.Of(pe).Code})
}

// follow remembers that a session was sent to a call's page by URL
// elicitation, so that it is told when the call is decided.
func (g *Gateway) follow(callID string, ss *sdk.ServerSession) {
	if ss == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.watch[callID] == nil {
		g.watch[callID] = map[*sdk.ServerSession]int{}
	}
	g.watch[callID][ss]++
}

// observe tells the sessions that follow a call, by URL elicitation, that
// the call was decided (notifications/elicitation/complete), after the
// decision committed.
func (g *Gateway) observe(ev queue.Event) {
	if ev.Call == nil || ev.Call.Status == queue.StatusPending {
		return
	}
	switch ev.Kind {
	case audit.KindGranted, audit.KindDenied, audit.KindExpired, audit.KindCancelled:
	default:
		return
	}
	g.mu.Lock()
	sessions := g.watch[ev.Call.ID]
	delete(g.watch, ev.Call.ID)
	g.mu.Unlock()
	for ss := range sessions {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := ss.NotifyElicitationComplete(ctx, &sdk.ElicitationCompleteParams{ElicitationID: ev.Call.ID}); err != nil {
				g.log.Debug("elicitation complete not sent", slog.String("call", ev.Call.ID), slog.Any("error", err))
			}
		}()
	}
}

package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/web/templates"
)

// notices are the confirmations a redirect may ask a page to show; only
// these fixed texts are ever shown.
var notices = map[string]string{
	"approved": "You approved this call.",
	"denied":   "You denied this call. The agent receives your reason.",
	"resolved": "You recorded the resolution. The agent sees it on the call.",
	"cleared":  "The block was cleared; the agent may propose again.",
	"revoked":  "You revoked the grant. The agent's redemption is refused, and it receives your reason.",
	"edited":   "You approved this edited call. The call it answers ended as countered; this one runs once the agent accepts it and its approvals are complete.",
}

func (c *Console) queuePage(ec echo.Context) error {
	v := viewerOf(ec)
	qv, err := c.queueView(ec.Request().Context(), v, c.now(), parseQueueQuery(ec.QueryParams()))
	if err != nil {
		return err
	}
	qv.Message = notices[ec.QueryParam("notice")]
	if len(qv.Cards) == 0 {
		qv.Connect = c.connectHelp(ec, v)
	}
	return c.render(ec, http.StatusOK, templates.QueuePage(qv))
}

// connectHelp is the "connect an agent" help for a console with no live
// agent token, or nil.
func (c *Console) connectHelp(ec echo.Context, v *viewer) *templates.ConnectHelp {
	toks, err := c.accounts.Tokens(ec.Request().Context())
	if err != nil {
		return nil // the help is a courtesy; the queue page stands without it
	}
	for _, t := range toks {
		if t.RevokedAt.IsZero() {
			return nil
		}
	}
	base := c.origin
	if base == "" {
		scheme := "http"
		if ec.Request().TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + ec.Request().Host
	}
	h := &templates.ConnectHelp{BaseURL: base, IsAdmin: v.user.Role.CanAdminister()}
	if reg := c.q.Tools(); reg != nil {
		seen := map[string]bool{}
		for _, t := range reg.Tools() {
			if !seen[t.Audience] {
				seen[t.Audience] = true
				h.Audiences = append(h.Audiences, t.Audience)
			}
		}
		sort.Strings(h.Audiences)
	}
	for _, p := range c.cfg.MCPEndpoints {
		h.MCP = append(h.MCP, base+p)
	}
	return h
}

func (c *Console) callPage(ec echo.Context) error {
	ctx, v, id := ec.Request().Context(), viewerOf(ec), ec.Param("id")
	// A person who decides is shown a link to the next pending call, for
	// which the queue's first page is read; a pending call's page takes its
	// call from it (with its approvals, passkeys named, as the page shows
	// them), and reads it only when it is not there.
	var pending []*queue.Call
	var call *queue.Call
	if v.user.Role.CanDecide() {
		if page, err := c.q.PendingPage(ctx, queue.PageKey{}, queuePageSize); err == nil {
			pending = append([]*queue.Call{}, page...) // read, though empty
		}
		for _, p := range pending {
			if p.ID == id {
				call = p
				break
			}
		}
	}
	if call == nil {
		var err error
		if call, err = c.q.Call(ctx, id); err != nil {
			return err
		}
	}
	cv, err := c.callView(call, v, c.now())
	if err != nil {
		return err
	}
	cv.Status.Notice = notices[ec.QueryParam("notice")]
	c.navigation(ctx, &cv, v, call.ID, parseQueueQuery(ec.QueryParams()), pending)
	c.shown.put(call)
	return c.render(ec, http.StatusOK, templates.CallPage(cv))
}

// shownCalls keeps, by call id, the calls that call pages showed last, for
// the approval that usually follows on the page: the approval hands it to
// the queue as what it saw (queue.ApproveInput.Seen), a hint that lets the
// grant be signed before the write lock, where it would otherwise read the
// call again. A hint is never trusted (the decision's transaction checks
// the call as stored), so one that is stale, or missing because another
// replica showed the page, costs at most a signature or a read. Only what
// the hint is read for is kept (not the envelope or the arguments).
type shownCalls struct {
	mu    sync.Mutex
	calls map[string]*queue.Call
}

// maxShownCalls bounds the hints kept; a full set is emptied and filled
// again.
const maxShownCalls = 256

func (s *shownCalls) put(c *queue.Call) {
	hint := *c
	hint.Envelope, hint.Args, hint.Rationale = nil, nil, ""
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil || len(s.calls) >= maxShownCalls {
		s.calls = make(map[string]*queue.Call)
	}
	s.calls[c.ID] = &hint
}

// take returns and forgets the call the last page of id showed, or nil.
func (s *shownCalls) take(id string) *queue.Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls[id]
	delete(s.calls, id)
	return c
}

// navigation links a call page to the queue it was opened from and to the
// next pending call that the viewer may decide: one whose page would
// offer them Approve (queue.Standing, read with the freezes and
// delegations the navigation's counts were last worked out from, which
// the page's own counts just read or refreshed), and that the queue's
// filter lets through. It reads the queue as the queue page does, one
// keyset page by deadline at a time, and stops at the first page that
// holds such a call, the link going to the first of them in the queue's
// order; after maxNavigationPages pages it gives up, so that its read
// does not grow with the queue. first is the queue's first page when the
// caller read it already, nil to read it here.
func (c *Console) navigation(ctx context.Context, cv *templates.CallView, v *viewer, id string, qq queueQuery, first []*queue.Call) {
	cv.QueueURL = withQuery("/", qq.values())
	if !v.user.Role.CanDecide() {
		return
	}
	next := c.nextToDecide(ctx, v, id, qq, first)
	if next == "" {
		return
	}
	cv.NextURL = "/calls/" + url.PathEscape(next)
	if query := qq.values().Encode(); query != "" {
		cv.NextURL += "?" + query
	}
}

// maxNavigationPages bounds the queue pages a call page's navigation
// reads to find the next call to decide: maxQueueCards calls at most.
const maxNavigationPages = maxQueueCards / queuePageSize

// nextToDecide is the id of the call navigation links to, "" for none or
// when the queue cannot be read (the link is a convenience; the page
// stands without it).
func (c *Console) nextToDecide(ctx context.Context, v *viewer, id string, qq queueQuery, first []*queue.Call) string {
	key := queue.PageKey{}
	for i := range maxNavigationPages {
		calls := first
		if i > 0 || calls == nil {
			var err error
			if calls, err = c.q.PendingPage(ctx, key, queuePageSize); err != nil {
				return ""
			}
		}
		if cards := c.decidable(calls, v, id, qq); len(cards) > 0 {
			sortCards(cards, qq.Sort)
			return cards[0].ID
		}
		if len(calls) < queuePageSize {
			return ""
		}
		key = queue.KeyOf(calls[len(calls)-1])
	}
	return ""
}

// decidable is the calls, but id, that v may decide and qq lets through,
// as much of a card as the queue's order reads.
func (c *Console) decidable(calls []*queue.Call, v *viewer, id string, qq queueQuery) []templates.Card {
	now := c.now()
	reg := c.q.Tools()
	read := c.needsNow(now, false)
	delegators := read.delegatorsOf(v.user, now)
	var cards []templates.Card
	for _, call := range calls {
		if call.ID == id || !now.Before(call.DecideBy) ||
			!queue.StandingOf(call, v.user, read.freezes, c.q.ToolChanged(call), delegators).MayApprove() {
			continue
		}
		// Only what the filter and the order read: a whole card (its
		// envelope hashed and parsed, its summary) is built only when the
		// filter asks for calls that warn of deception.
		deceptive := false
		if qq.Warn {
			deceptive = c.cardView(call, true, false, now).Deceptive
		}
		if !qq.matches(call, deceptive, reg) {
			continue
		}
		card := templates.Card{ID: call.ID, RawTool: call.Tool, CreatedAt: call.CreatedAt, DecideBy: call.DecideBy, Group: groupKey(call)}
		card.Risk, _ = riskOf(reg, call.Tool)
		cards = append(cards, card)
	}
	return cards
}

// afterDecision is where a decision sends the browser: the call's page
// with its notice, keeping the queue's filter and sort (the form's q).
func afterDecision(id, notice, q string) string {
	v, _ := url.ParseQuery(q)
	rest := parseQueueQuery(v).values()
	rest.Set("notice", notice)
	return "/calls/" + url.PathEscape(id) + "?" + rest.Encode()
}

// revoke revokes the grant of an approved call that has not been redeemed.
func (c *Console) revoke(ec echo.Context) error {
	v, id := viewerOf(ec), ec.Param("id")
	form := ec.Request().PostForm
	if _, err := c.q.RevokeGrant(ec.Request().Context(), v.user.Name, audit.ChannelWeb, id, form.Get("reason")); err != nil {
		return c.refused(ec, id, err, form)
	}
	return ec.Redirect(http.StatusSeeOther, afterDecision(id, "revoked", form.Get("q")))
}

func (c *Console) approve(ec echo.Context) error {
	v, id := viewerOf(ec), ec.Param("id")
	form := ec.Request().PostForm
	ctx := ec.Request().Context()
	call := c.shown.take(id)
	if call == nil {
		var err error
		if call, err = c.q.Call(ctx, id); err != nil {
			return err
		}
	}
	// What the tool asks to be typed, and the acknowledgement of a
	// deception warning, are checked by the decision's transaction,
	// whatever the page did.
	digest := strings.TrimSpace(form.Get("digest"))
	in := queue.ApproveInput{Operator: v.user.Name, Channel: audit.ChannelWeb, CallID: id, Digest: digest, Comment: form.Get("comment"),
		Confirm: form.Get("confirm"), AcceptWarnings: form.Get("ack_warnings") == "1", Presented: form.Get("presented"), Seen: call,
		For: form.Get("for")}
	if _, err := c.q.ApproveWith(ctx, in); err != nil {
		return c.refused(ec, id, err, form)
	}
	return ec.Redirect(http.StatusSeeOther, afterDecision(id, "approved", form.Get("q")))
}

// confirmation checks early what an approval in the browser must carry
// besides the digest (queue.Confirmation), so that a passkey prompt is not
// opened for an approval that would be refused; the decision's transaction
// checks it again.
func (c *Console) confirmation(call *queue.Call, form url.Values) error {
	return queue.Confirmation(c.q.Tools(), call, form.Get("confirm"), form.Get("ack_warnings") == "1")
}

// shownText is a revealed text as the page shows it, escapes included.
func shownText(t templates.Text) string {
	var b strings.Builder
	for _, s := range t.Segs {
		b.WriteString(s.S)
	}
	return b.String()
}

func (c *Console) deny(ec echo.Context) error {
	v, id := viewerOf(ec), ec.Param("id")
	form := ec.Request().PostForm
	ctx := ec.Request().Context()
	reason := strings.TrimSpace(form.Get("reason"))
	if preset := form.Get("preset"); preset != "" {
		call, err := c.q.Call(ctx, id)
		if err != nil {
			return err
		}
		var offered []string
		if reg := c.q.Tools(); reg != nil {
			if t, ok := reg.Tool(call.Tool); ok {
				offered = t.DenyReasons
			}
		}
		if !slices.Contains(offered, preset) {
			return c.refused(ec, id, problem.New(http.StatusBadRequest, "unknown_reason",
				"choose one of the reasons offered, or write your own"), form)
		}
		if reason == "" {
			reason = preset
		} else {
			reason = preset + ": " + reason
		}
	}
	if _, err := c.q.Deny(ctx, v.user.Name, audit.ChannelWeb, id, reason); err != nil {
		return c.refused(ec, id, err, form)
	}
	return ec.Redirect(http.StatusSeeOther, afterDecision(id, "denied", form.Get("q")))
}

// refused shows the call again with the reason a decision was refused,
// with the status that reason carries (409 for a changed digest or a call
// no longer pending, 403 for one's own call).
func (c *Console) refused(ec echo.Context, id string, err error, form url.Values) error {
	if errors.Is(err, queue.ErrNotFound) {
		return err
	}
	ae := server.ErrorOf(err)
	if ae.Status >= 500 && ae.Code != "frozen" {
		return err
	}
	call, lerr := c.q.Call(ec.Request().Context(), id)
	if lerr != nil {
		return err
	}
	cv, verr := c.callView(call, viewerOf(ec), c.now())
	if verr != nil {
		return verr
	}
	var status int
	cv.Status.Message, cv.Status.Next, status = refusalShown(err, ae, call)
	cv.Status.Refused = ae.Code
	cv.Status.Reason, cv.Status.Comment = form.Get("reason"), form.Get("comment")
	v, _ := url.ParseQuery(form.Get("q"))
	c.navigation(ec.Request().Context(), &cv, viewerOf(ec), id, parseQueueQuery(v), nil)
	return c.render(ec, status, templates.CallPage(cv))
}

func (c *Console) clearBlock(ec echo.Context) error {
	v := viewerOf(ec)
	form := ec.Request().PostForm
	err := c.q.ClearRetry(ec.Request().Context(), v.user.Name, audit.ChannelWeb, form.Get("actor"), form.Get("tool"))
	if err != nil {
		ae := server.ErrorOf(err)
		if ae.Status >= 500 {
			return err
		}
		qv, qerr := c.queueView(ec.Request().Context(), v, c.now(), parseQueueQuery(nil))
		if qerr != nil {
			return err
		}
		qv.Error = ae.Message
		return c.render(ec, ae.Status, templates.QueuePage(qv))
	}
	return ec.Redirect(http.StatusSeeOther, "/?notice=cleared")
}

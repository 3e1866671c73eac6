package console

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/web/templates"
)

// The queue page shows, under their own heading, the calls allowances
// approved as they arrived, so that the people who gave an allowance see
// what it approves: those approved in the last coveredShownFor, at most
// maxCoveredShown, newest first. The page reads them from the history
// (approvals through the allowance channel) when it is rendered and when
// its socket connects, and is sent each one as its grant is minted, and
// again when its status changes (redeemed, revoked …) while it is shown.
const (
	maxCoveredShown = 20
	coveredShownFor = time.Hour
)

// coveredVia is the allowance that approved call, or "" when no allowance
// did.
func coveredVia(call *queue.Call) string {
	for _, a := range call.Approvals {
		if a.Method == queue.MethodAllowance {
			return a.Via
		}
	}
	return ""
}

// coveredCards reads the calls allowances approved in the last
// coveredShownFor that the page's query lets through, newest first.
func (c *Console) coveredCards(ctx context.Context, now time.Time, qq queueQuery) ([]templates.CoveredCard, error) {
	calls, _, err := c.history.History(ctx, queue.HistoryFilter{Channel: queue.ChannelAllowance,
		Since: now.Add(-coveredShownFor), Limit: maxCoveredShown})
	if err != nil {
		return nil, err
	}
	var out []templates.CoveredCard
	seen := map[string]bool{}
	left := map[string]string{}
	for _, call := range calls {
		if seen[call.ID] || coveredVia(call) == "" {
			continue
		}
		seen[call.ID] = true
		card := c.coveredCard(ctx, call, now, left)
		if qq.matches(call, card.Deceptive, c.q.Tools()) {
			out = append(out, card)
		}
	}
	return out, nil
}

// coveredCard is call, which an allowance approved, as the queue page
// shows it. left caches what each allowance has left, for one rendering.
func (c *Console) coveredCard(ctx context.Context, call *queue.Call, now time.Time, left map[string]string) templates.CoveredCard {
	card := c.cardView(call, false, false, now)
	via := coveredVia(call)
	cc := templates.CoveredCard{ID: call.ID, Tool: card.Tool, Target: card.Target, Actor: card.Actor, Summary: card.Summary,
		Integrity: card.Integrity, Deceptive: card.Deceptive, Status: string(call.Shown()), At: call.DecidedAt, Now: now,
		Allowance: via, LeftAt: now}
	if cc.At.IsZero() {
		cc.At = call.CreatedAt
	}
	for _, a := range call.Approvals {
		if a.Method == queue.MethodAllowance {
			cc.By = append(cc.By, reveal.Of(c.shownName(a.Operator)))
		}
	}
	l, ok := left[via]
	if !ok {
		l = c.allowanceLeft(ctx, via, now)
		left[via] = l
	}
	cc.Left = l
	return cc
}

// coveredFragment is what a queue page is sent for a change of call, which
// an allowance approved: its card when its grant is minted, and again when
// the status the card shows changes (redeemed, revoked) while the page
// shows it (approved in the last coveredShownFor). Nothing else is sent:
// the call was never pending, and its lease and outcome are not on the
// card.
func (c *Console) coveredFragment(ev queue.Event, call *queue.Call, now time.Time) (string, func() ([]byte, error)) {
	switch ev.Kind {
	case audit.KindGranted, audit.KindRedeemed, audit.KindRevoked:
	default:
		return "", nil
	}
	if now.Sub(call.DecidedAt) > coveredShownFor {
		return "", nil
	}
	return "covered", func() ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return renderBytes(templates.CoveredUpsert(c.coveredCard(ctx, call, now, map[string]string{})))
	}
}

// allowanceLeft says what the allowance id has left now: "3 of 10 left,
// until 14:30 UTC", or how it ended; "" when it cannot be read.
func (c *Console) allowanceLeft(ctx context.Context, id string, now time.Time) string {
	a, err := c.q.Allowance(ctx, id)
	if err != nil {
		return ""
	}
	switch st := a.State(now); st {
	case "live":
	case "waiting":
		return "waiting for its confirmers"
	default:
		return "ended: " + strings.ReplaceAll(st, "_", " ")
	}
	return fmt.Sprintf("%d of %d left, until %s", a.Left(), a.Uses, a.Until.UTC().Format("15:04 UTC"))
}

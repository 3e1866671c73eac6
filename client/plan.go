package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/countersign/countersign/internal/wire"
)

// PlanStatus is where a plan is in its life.
type PlanStatus = wire.PlanStatus

// Plan statuses: pending until decided; approved (items are minted one by
// one until ValidUntil); halted (an item reported failed or unknown, or
// its lease expired: no further item is minted); denied, cancelled,
// expired.
const (
	PlanPending   = wire.PlanPending
	PlanApproved  = wire.PlanApproved
	PlanHalted    = wire.PlanHalted
	PlanDenied    = wire.PlanDenied
	PlanCancelled = wire.PlanCancelled
	PlanExpired   = wire.PlanExpired
)

// PlanProposal is a list of calls proposed together so that a person
// approves them once (docs/plans.md). Each item follows the rules of
// Proposal; the rationale is every item's.
type PlanProposal struct {
	Items     []CallSpec `json:"items"`
	Rationale string     `json:"rationale"`
	Ordered   bool       `json:"ordered"`
}

// Plan is the API's plan object, with the response body it came in.
type Plan struct {
	wire.Plan
	Raw json.RawMessage `json:"-"`
}

// SubmitPlan proposes a plan. A refused plan is an *Error listing every
// problem of every item, with paths into the plan (/items/3/args/x).
func (c *Client) SubmitPlan(ctx context.Context, p PlanProposal) (*Plan, error) {
	for i := range p.Items {
		if isNil(p.Items[i].Args) {
			p.Items[i].Args = struct{}{}
		}
	}
	body, err := encodeJSON(p)
	if err != nil {
		return nil, fmt.Errorf("countersign: encode plan: %w", err)
	}
	resp, err := c.do(ctx, http.MethodPost, "/api/v1/plans", body, c.requestTimeout, true)
	if err != nil {
		return nil, err
	}
	return resp.plan(http.StatusCreated)
}

// GetPlan reads one of the token's plans with every item.
func (c *Client) GetPlan(ctx context.Context, id string) (*Plan, error) {
	resp, err := c.do(ctx, http.MethodGet, planPath(id), nil, c.requestTimeout, true)
	if err != nil {
		return nil, err
	}
	return resp.plan(http.StatusOK)
}

// CancelPlan withdraws a pending or approved plan: the grants of minted,
// unredeemed items are revoked and the items not yet minted cancelled.
func (c *Client) CancelPlan(ctx context.Context, id string) (*Plan, error) {
	resp, err := c.do(ctx, http.MethodPost, planPath(id)+"/cancel", nil, c.requestTimeout, true)
	if err != nil {
		return nil, err
	}
	return resp.plan(http.StatusOK)
}

// MintItem mints the grant of item n (from 0) of an approved plan and
// returns the item, approved with its grant; redeem it with Redeem and
// item.Spec(). Minting an item already minted returns it as it is.
func (c *Client) MintItem(ctx context.Context, planID string, n int) (*Call, error) {
	resp, err := c.do(ctx, http.MethodPost, planPath(planID)+"/items/"+strconv.Itoa(n)+"/grant", nil, c.requestTimeout, true)
	if err != nil {
		return nil, err
	}
	return resp.call(http.StatusOK)
}

// WaitPlan long-polls the plan until it is no longer pending, and returns
// it. interval is the least time between two reads, for reads answered
// early with the plan still pending (a console draining) or failed while
// the console restarts. When ctx ends first it returns the last state it
// saw with ctx's error.
func (c *Client) WaitPlan(ctx context.Context, id string, interval time.Duration) (*Plan, error) {
	if interval <= 0 {
		interval = time.Second
	}
	var last *Plan
	for {
		wait := c.pollWait
		if dl, ok := ctx.Deadline(); ok {
			wait = max(min(wait, time.Until(dl)-250*time.Millisecond), 0)
		}
		start := time.Now()
		p, err := c.pollPlan(ctx, id, wait)
		if err != nil && (ctx.Err() != nil || !transient(err)) {
			if ctx.Err() != nil {
				return last, ctx.Err()
			}
			return last, err
		}
		if err == nil {
			last = p
			if p.Status != PlanPending {
				return p, nil
			}
		}
		if err := sleep(ctx, interval-time.Since(start)); err != nil {
			return last, err
		}
	}
}

// pollPlan long-polls the plan for up to wait.
func (c *Client) pollPlan(ctx context.Context, id string, wait time.Duration) (*Plan, error) {
	resp, err := c.do(ctx, http.MethodGet, planPath(id)+"?wait="+url.QueryEscape(wait.String()), nil, wait+c.requestTimeout, true)
	if err != nil {
		return nil, err
	}
	return resp.plan(http.StatusOK)
}

// RunItem runs one item of a plan: it returns the outcome's status
// (succeeded, failed or unknown) and detail, or an error, which is
// reported as unknown.
type RunItem func(ctx context.Context, item *Call) (status, detail string, err error)

// RunPlan submits the plan, waits for a person's decision, then for each
// item in order mints its grant, redeems it, runs it and reports its
// outcome. It stops at the first item that does not succeed (the console
// halts the plan on failed or unknown) and returns the plan as it then is,
// with an error saying why it stopped. A plan that is denied or expires is
// returned with an *Error of code plan_not_pending.
func (c *Client) RunPlan(ctx context.Context, p PlanProposal, interval time.Duration, run RunItem) (*Plan, error) {
	plan, err := c.SubmitPlan(ctx, p)
	if err != nil {
		return nil, err
	}
	if plan, err = c.WaitPlan(ctx, plan.ID, interval); err != nil {
		return plan, err
	}
	if plan.Status != PlanApproved {
		return plan, &Error{Status: http.StatusConflict, Code: "plan_not_pending",
			Message: fmt.Sprintf("the plan is %s: %s", plan.Status, plan.Reason)}
	}
	for n := range plan.Items {
		item, err := c.MintItem(ctx, plan.ID, n)
		if err != nil {
			return plan, err
		}
		r, err := c.Redeem(ctx, item.Grant, item.Spec())
		if err != nil {
			return plan, err
		}
		if !r.Accepted {
			return plan, fmt.Errorf("countersign: item %d of plan %s: redemption rejected: %s", n, plan.ID, r.Reason)
		}
		status, detail, runErr := run(ctx, item)
		if runErr != nil {
			status, detail = "unknown", runErr.Error()
		}
		if _, err := c.ReportOutcome(ctx, item.ID, status, detail); err != nil {
			return plan, err
		}
		if status != "succeeded" {
			latest, _ := c.GetPlan(ctx, plan.ID)
			if latest != nil {
				plan = latest
			}
			return plan, fmt.Errorf("countersign: item %d of plan %s reported %s; the plan stops here", n, plan.ID, status)
		}
	}
	return c.GetPlan(ctx, plan.ID)
}

func planPath(id string) string { return "/api/v1/plans/" + url.PathEscape(id) }

func (r *response) plan(ok ...int) (*Plan, error) {
	for _, s := range ok {
		if r.status == s {
			var p Plan
			if err := json.Unmarshal(r.body, &p); err != nil || p.ID == "" {
				return nil, &Error{Status: r.status, Code: CodeUnexpectedResponse,
					Message: "the response is not a plan: " + snippet(r.body), Raw: r.body}
			}
			p.Raw = r.body
			return &p, nil
		}
	}
	return nil, r.error()
}

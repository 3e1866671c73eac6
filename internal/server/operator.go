package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/answer"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/plan"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/tools"
	"github.com/countersign/countersign/internal/wire"
)

// The operator API: a person's operator token reads the queue, shows
// calls and allowances, and, with the decide scope, approves, denies and
// revokes as that person, through the queue's one door. It is served only
// with Config.OperatorAPI. Agent tokens never reach it, and operator
// tokens never reach the agent API (bearer).

const operatorKey = "countersign.operator"

// MaxOperatorQueue bounds one listing of the queue.
const MaxOperatorQueue = 500

// operator is the person a request's operator token acts as.
type operator struct {
	token account.OperatorToken
	user  account.User
}

func (s *Server) routesOperator(e *echo.Echo) {
	if !s.cfg.OperatorAPI {
		off := func(echo.Context) error {
			return problem.New(http.StatusNotFound, "operator_api_off",
				"this console does not serve the operator API; its admin turns it on with console serve --operator-api")
		}
		e.RouteNotFound("/api/v1/operator", off)
		e.RouteNotFound("/api/v1/operator/*", off)
		return
	}
	g := e.Group("/api/v1/operator", s.operatorBearer)
	g.GET("/queue", s.opQueue)
	g.GET("/calls/:id", s.opCall)
	g.POST("/calls/:id/approve", s.opApprove, requireScope(account.ScopeDecide))
	g.POST("/calls/:id/deny", s.opDeny, requireScope(account.ScopeDecide))
	g.POST("/calls/:id/counter", s.opCounter, requireScope(account.ScopeDecide))
	g.GET("/allowances", s.opAllowances)
	g.POST("/allowances/:id/revoke", s.opRevokeAllowance, requireScope(account.ScopeDecide))
	g.GET("/plans", s.opPlans)
	g.POST("/plans/:id/approve", s.opApprovePlan, requireScope(account.ScopeDecide))
	g.POST("/plans/:id/deny", s.opDenyPlan, requireScope(account.ScopeDecide))
	g.GET("/delegations", s.opDelegations)
	g.POST("/delegations/:id/end", s.opEndDelegation, requireScope(account.ScopeDecide))
	if s.cfg.Catalog != nil {
		g.GET("/mcp/definitions", s.opMCPDefinitions, requireAdmin)
		g.GET("/mcp/definition", s.opMCPDefinition)
		g.POST("/mcp/review", s.opMCPReview, requireScope(account.ScopeDecide), requireAdmin)
	}
}

// requireAdmin refuses a request whose token's person is not an admin now:
// the review of MCP definitions is an admin's, as in the console.
func requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !operatorOf(c).user.Role.CanAdminister() {
			return problem.New(http.StatusForbidden, "not_an_admin", "only an enabled admin reviews MCP definitions; ask an admin")
		}
		return next(c)
	}
}

// operatorBearer authenticates a person's operator token: looked up in
// the store at every request (a revocation on any replica holds at the
// next one), live, its account enabled and an operator or admin now.
func (s *Server) operatorBearer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set("Cache-Control", "no-store")
		scheme, secret, _ := strings.Cut(strings.TrimSpace(c.Request().Header.Get("Authorization")), " ")
		secret = strings.TrimSpace(secret)
		if !strings.EqualFold(scheme, "Bearer") || secret == "" {
			return problem.New(http.StatusUnauthorized, "unauthorized", "send Authorization: Bearer <operator token>; make one on your account page in the console")
		}
		if strings.HasPrefix(secret, account.TokenPrefix) {
			return problem.New(http.StatusForbidden, "agent_token_refused",
				"an agent token cannot use the operator API: it acts for an agent, not a person; use your own operator token, made on your account page")
		}
		t, u, err := s.cfg.Accounts.OperatorBySecret(c.Request().Context(), secret)
		if err != nil {
			return err
		}
		if !u.Role.CanDecide() {
			return problem.New(http.StatusForbidden, "not_a_decider", "the operator API is for operators and admins, and your account is not one now; ask an admin")
		}
		c.Set(operatorKey, operator{token: t, user: u})
		return next(c)
	}
}

// requireScope refuses a request whose operator token lacks scope.
func requireScope(scope string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if op := operatorOf(c); op.token.Scope != scope {
				return problem.New(http.StatusForbidden, "insufficient_scope",
					"this operator token's scope is %s; deciding needs a token with the %s scope, made on your account page", op.token.Scope, scope)
			}
			return next(c)
		}
	}
}

func operatorOf(c echo.Context) operator {
	op, _ := c.Get(operatorKey).(operator)
	return op
}

// readOperatorJSON reads a request body into v, refusing unknown members.
func readOperatorJSON(c echo.Context, v any) error {
	body, err := readJSON(c)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return problem.New(http.StatusBadRequest, "malformed_json", "the body does not fit this request: %v", err)
	}
	return nil
}

// operatorCall is c as the operator API shows it to op: the grant left
// out, and while c is pending, its listing token.
func (s *Server) operatorCall(op operator, c *queue.Call) (wire.OperatorCall, error) {
	now := s.now()
	v, err := answer.CallAsStored(c, now)
	if err != nil {
		return wire.OperatorCall{}, err
	}
	v.Grant, v.GrantExpiresAt = "", time.Time{}
	out := wire.OperatorCall{Call: v, Deceptive: queue.Deceptive(c), RequirePasskey: c.RequirePasskey,
		ApproveFrom: []string{tools.ApproveFromWeb, tools.ApproveFromCLI, tools.ApproveFromAPI}}
	if reg := s.cfg.Queue.Tools(); reg != nil {
		if t, ok := reg.Tool(c.Tool); ok && t.ApproveFrom != nil {
			out.ApproveFrom = append([]string(nil), t.ApproveFrom...)
		}
	}
	if c.Status == queue.StatusPending {
		if out.Listing = s.cfg.Queue.ListingToken(op.user.Name, c); out.Listing != "" {
			out.ListingExpiresAt = now.UTC().Add(queue.MaxListingAge)
		}
	}
	return out, nil
}

func (s *Server) opQueue(c echo.Context) error {
	op := operatorOf(c)
	tool := c.QueryParam("tool")
	calls, err := s.cfg.Queue.PendingCallsOf(c.Request().Context(), tool, MaxOperatorQueue+1)
	if err != nil {
		return err
	}
	out := wire.OperatorQueue{Calls: []wire.OperatorCall{}}
	if len(calls) > MaxOperatorQueue {
		calls, out.Truncated = calls[:MaxOperatorQueue], true
	}
	for _, call := range calls {
		v, err := s.operatorCall(op, call)
		if err != nil {
			return err
		}
		out.Calls = append(out.Calls, v)
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) opCall(c echo.Context) error {
	call, err := s.cfg.Queue.Call(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return s.answerOperatorCall(c, call)
}

func (s *Server) answerOperatorCall(c echo.Context, call *queue.Call) error {
	v, err := s.operatorCall(operatorOf(c), call)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// opApprove approves a call as the token's person, through the queue's
// one door: recorded method command, channel api, human unattested. The
// request names the digest and the listing token a listing gave the call.
func (s *Server) opApprove(c echo.Context) error {
	var in wire.OperatorApproval
	if err := readOperatorJSON(c, &in); err != nil {
		return err
	}
	if in.Digest == "" || in.Listing == "" {
		return problem.New(http.StatusBadRequest, "bad_request",
			"send the digest and the listing token the queue listing (GET /api/v1/operator/queue) gave the call")
	}
	call, err := s.cfg.Queue.ApproveWith(c.Request().Context(), queue.ApproveInput{Operator: operatorOf(c).user.Name,
		Channel: audit.ChannelAPI, CallID: c.Param("id"), Digest: in.Digest, Listed: in.Listing, Comment: in.Comment,
		Confirm: in.Confirm, AcceptWarnings: in.AcceptWarnings})
	if err != nil {
		return err
	}
	return s.answerOperatorCall(c, call)
}

// opCounter answers a pending call with an edited one as the token's
// person (docs/counters.md): the counter carries their approval, recorded
// method counter, channel api, human unattested.
func (s *Server) opCounter(c echo.Context) error {
	var in wire.OperatorCounter
	if err := readOperatorJSON(c, &in); err != nil {
		return err
	}
	if in.Digest == "" || in.Listing == "" || len(in.Edits) == 0 {
		return problem.New(http.StatusBadRequest, "bad_request",
			"send the call's digest, the listing token the queue listing (GET /api/v1/operator/queue) gave it, and edits")
	}
	counter, err := s.cfg.Queue.Counter(c.Request().Context(), queue.CounterInput{Operator: operatorOf(c).user.Name,
		Channel: audit.ChannelAPI, CallID: c.Param("id"), Digest: in.Digest, Edits: in.Edits, Listed: in.Listing,
		Confirm: in.Confirm, AcceptWarnings: in.AcceptWarnings})
	if err != nil {
		return err
	}
	return s.answerOperatorCall(c, counter)
}

func (s *Server) opDeny(c echo.Context) error {
	var in wire.OperatorReason
	if err := readOperatorJSON(c, &in); err != nil {
		return err
	}
	call, err := s.cfg.Queue.Deny(c.Request().Context(), operatorOf(c).user.Name, audit.ChannelAPI, c.Param("id"), in.Reason)
	if err != nil {
		return err
	}
	return s.answerOperatorCall(c, call)
}

func (s *Server) opAllowances(c echo.Context) error {
	f := queue.AllowanceFilter{Tool: c.QueryParam("tool"), Live: c.QueryParam("live") == "true"}
	list, err := s.cfg.Queue.Allowances(c.Request().Context(), f)
	if err != nil {
		return err
	}
	out := wire.Allowances{Allowances: []wire.Allowance{}}
	for _, a := range list {
		out.Allowances = append(out.Allowances, answer.Allowance(a, s.now()))
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) opRevokeAllowance(c echo.Context) error {
	var in wire.OperatorReason
	if err := readOperatorJSON(c, &in); err != nil {
		return err
	}
	a, err := s.cfg.Queue.RevokeAllowance(c.Request().Context(), queue.RevokeInput{Operator: operatorOf(c).user.Name,
		Channel: audit.ChannelAPI, AllowanceID: c.Param("id"), Reason: in.Reason})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, answer.Allowance(a, s.now()))
}

// maxPlansListed bounds one listing of pending plans.
const maxPlansListed = 100

// operatorPlan is plan p as the operator API shows it to op: its items
// without grants, and a listing token while it is pending.
func (s *Server) operatorPlan(c echo.Context, op operator, p *queue.Plan, items []*queue.Call) (wire.OperatorPlan, error) {
	now := s.now()
	v, err := answer.Plan(p, items, s.cfg.Accounts.PublicNames(c.Request().Context()), now)
	if err != nil {
		return wire.OperatorPlan{}, err
	}
	for i := range v.Items {
		v.Items[i].Grant, v.Items[i].GrantExpiresAt = "", time.Time{}
	}
	out := wire.OperatorPlan{Plan: v}
	if p.Status == queue.PlanPending {
		if out.Listing = s.cfg.Queue.PlanListingToken(op.user.Name, p, items); out.Listing != "" {
			out.ListingExpiresAt = now.UTC().Add(queue.MaxListingAge)
		}
	}
	return out, nil
}

// opPlans lists the pending plans, by deadline, each with every item and a
// listing token an approval names.
func (s *Server) opPlans(c echo.Context) error {
	ctx := c.Request().Context()
	plans, err := s.cfg.Queue.PendingPlans(ctx, maxPlansListed)
	if err != nil {
		return err
	}
	out := wire.OperatorPlans{Plans: []wire.OperatorPlan{}}
	for _, p := range plans {
		p, items, err := s.cfg.Queue.ReadPlan(ctx, p.ID)
		if err != nil {
			return err
		}
		v, err := s.operatorPlan(c, operatorOf(c), p, items)
		if err != nil {
			return err
		}
		out.Plans = append(out.Plans, v)
	}
	return c.JSON(http.StatusOK, out)
}

// opApprovePlan approves a whole plan as the token's person, recorded
// method command, channel api, human unattested, naming the digest and
// the listing token a listing gave the plan.
func (s *Server) opApprovePlan(c echo.Context) error {
	var in wire.OperatorPlanApproval
	if err := readOperatorJSON(c, &in); err != nil {
		return err
	}
	if in.Digest == "" || in.Listing == "" {
		return problem.New(http.StatusBadRequest, "bad_request",
			"send the plan digest and the listing token the plan listing (GET /api/v1/operator/plans) gave the plan")
	}
	confirm := map[int]string{}
	for k, v := range in.Confirm {
		n, err := strconv.Atoi(k)
		if err != nil || n < 0 || n >= plan.MaxItems {
			return problem.New(http.StatusBadRequest, "bad_request", "confirm is keyed by item index (0 to %d); %q is not one", plan.MaxItems-1, k)
		}
		confirm[n] = v
	}
	ctx := c.Request().Context()
	op := operatorOf(c)
	if _, err := s.cfg.Queue.ApprovePlan(ctx, queue.ApprovePlanInput{Operator: op.user.Name, Channel: audit.ChannelAPI,
		PlanID: c.Param("id"), Digest: in.Digest, Listed: in.Listing, Comment: in.Comment, Confirm: confirm,
		AcceptWarnings: in.AcceptWarnings}); err != nil {
		return err
	}
	return s.answerOperatorPlan(c, op)
}

// opDenyPlan denies a pending plan, every item with the reason.
func (s *Server) opDenyPlan(c echo.Context) error {
	var in wire.OperatorReason
	if err := readOperatorJSON(c, &in); err != nil {
		return err
	}
	op := operatorOf(c)
	if _, err := s.cfg.Queue.DenyPlan(c.Request().Context(), op.user.Name, audit.ChannelAPI, c.Param("id"), in.Reason); err != nil {
		return err
	}
	return s.answerOperatorPlan(c, op)
}

func (s *Server) answerOperatorPlan(c echo.Context, op operator) error {
	p, items, err := s.cfg.Queue.ReadPlan(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	v, err := s.operatorPlan(c, op, p, items)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// maxDelegationsListed bounds one listing of delegations.
const maxDelegationsListed = 100

// opDelegations lists the delegations the token's person gave or
// received, newest first; an admin may name another person.
func (s *Server) opDelegations(c echo.Context) error {
	op := operatorOf(c)
	person := op.user.Name
	if p := c.QueryParam("person"); p != "" && p != person {
		if !op.user.Role.CanAdminister() {
			return problem.New(http.StatusForbidden, "may_not_delegate", "only an admin lists another person's delegations; leave out person for your own")
		}
		person = p
	}
	f := queue.DelegationFilter{Person: person, Limit: maxDelegationsListed}
	if c.QueryParam("live") == "true" {
		f.LiveAt = s.now()
	}
	list, err := s.cfg.Queue.Delegations(c.Request().Context(), f)
	if err != nil {
		return err
	}
	out := wire.Delegations{Delegations: []wire.Delegation{}}
	for _, d := range list {
		out.Delegations = append(out.Delegations, answer.Delegation(d, s.now()))
	}
	return c.JSON(http.StatusOK, out)
}

// opEndDelegation ends a live delegation as the token's person: one of
// its two people, or an admin.
func (s *Server) opEndDelegation(c echo.Context) error {
	d, err := s.cfg.Queue.EndDelegation(c.Request().Context(), operatorOf(c).user.Name, audit.ChannelAPI, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, answer.Delegation(d, s.now()))
}

func (s *Server) opMCPDefinitions(c echo.Context) error {
	return c.JSON(http.StatusOK, answer.MCPDefinitions(s.cfg.Catalog))
}

func (s *Server) opMCPDefinition(c echo.Context) error {
	pin, prev, err := s.cfg.Catalog.Definition(c.Request().Context(), c.QueryParam("server"), c.QueryParam("tool"), c.QueryParam("digest"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, answer.MCPDefinition(pin, prev, true))
}

// opMCPReview approves or rejects a pending definition as the token's
// person, an admin; audited through the api channel.
func (s *Server) opMCPReview(c echo.Context) error {
	var in wire.MCPReview
	if err := readOperatorJSON(c, &in); err != nil {
		return err
	}
	if in.Decision != "approve" && in.Decision != "reject" {
		return problem.New(http.StatusBadRequest, "bad_request", "decision must be approve or reject")
	}
	ctx := c.Request().Context()
	if err := s.cfg.Catalog.ReviewVia(ctx, in.Server, in.Tool, in.Digest, operatorOf(c).user.Name, audit.ChannelAPI, in.Decision == "approve"); err != nil {
		return err
	}
	pin, prev, err := s.cfg.Catalog.Definition(ctx, in.Server, in.Tool, in.Digest)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, answer.MCPDefinition(pin, prev, true))
}

package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/answer"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/wire"
)

const (
	principalKey = "countersign.principal"
	tokenKey     = "countersign.token" // the id of the request's API token
)

func (s *Server) routesAPI(e *echo.Echo) {
	e.GET("/healthz", s.healthz)
	e.GET("/metrics", s.metrics.handler())
	e.GET("/api/v1/keys", s.keys)
	e.GET("/api/v1/openapi.yaml", s.openAPI)
	s.routesAudit(e)

	// The group answers the paths under /api/v1 that no route takes,
	// after the token's check; each route has the check composed once.
	e.Group("/api/v1", s.bearer)
	api := func(method, path string, h echo.HandlerFunc) { e.Add(method, "/api/v1"+path, Chain(h, s.bearer)) }
	api(http.MethodPost, "/calls", s.submit)
	api(http.MethodGet, "/calls/:id", s.getCall)
	api(http.MethodDelete, "/calls/:id", s.cancelCall)
	api(http.MethodPost, "/calls/:id/accept", s.acceptCounter)
	api(http.MethodPost, "/calls/:id/outcome", s.outcome)
	api(http.MethodPost, "/calls/:id/heartbeat", s.heartbeat)
	api(http.MethodPost, "/redeem", s.redeem)
	s.routesOperator(e)
	api(http.MethodPost, "/plans", s.submitPlan)
	api(http.MethodGet, "/plans/:id", s.getPlan)
	api(http.MethodPost, "/plans/:id/cancel", s.cancelPlan)
	api(http.MethodPost, "/plans/:id/items/:n/grant", s.mintPlanItem)
}

// noStore is the Cache-Control of every authenticated API response, one
// slice shared by them all (a response adding to it copies it).
var noStore = []string{"no-store"}

// handleError is the server's one error handler. API and unknown paths get
// the JSON error shape; console pages get an HTML page. Only 5xx is logged
// as an error.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	ae := ErrorOf(err)
	if ae.Refusal() {
		c.Set(refusalKey, true)
	}
	if ae.Status >= 500 && !ae.Refusal() {
		s.log.Error("request failed", slog.String("path", s.logPath(c.Request().URL.Path)), slog.Any("error", err),
			slog.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)))
	}
	if s.pages != nil && s.pages.WantsHTML(c) {
		s.pages.ErrorPage(c, ae.Status, ae.Message)
		return
	}
	if ae.Status == http.StatusUnauthorized {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="countersign"`)
	}
	_ = c.JSON(ae.Status, answer.Error(ae))
}

// bearer authenticates the agent's token and puts its trusted context on
// the request.
func (s *Server) bearer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		// Responses to an authenticated request may carry a grant: nothing
		// on the way may keep them.
		c.Response().Header()["Cache-Control"] = noStore
		scheme, secret, _ := strings.Cut(strings.TrimSpace(c.Request().Header.Get("Authorization")), " ")
		secret = strings.TrimSpace(secret)
		if !strings.EqualFold(scheme, "Bearer") || secret == "" {
			return problem.New(http.StatusUnauthorized, "unauthorized", "send Authorization: Bearer <token>; an admin creates tokens with 'console token create'")
		}
		if strings.HasPrefix(secret, account.OperatorTokenPrefix) {
			return problem.New(http.StatusForbidden, "operator_token_refused",
				"an operator token is a person's: it never submits, reads, cancels, redeems or reports calls; an agent uses an agent token ('console token create')")
		}
		t, err := s.cfg.Accounts.TokenBySecret(c.Request().Context(), secret)
		if errors.Is(err, account.ErrTokenNotFound) {
			return problem.New(http.StatusUnauthorized, "unauthorized", "the token is unknown or revoked")
		}
		if err != nil {
			return err
		}
		c.Set(principalKey, queue.Principal{Actor: t.Actor, Audience: t.Audience, TokenID: t.ID, Owners: t.Owners})
		c.Set(tokenKey, t.ID)
		return next(c)
	}
}

func principal(c echo.Context) queue.Principal {
	p, _ := c.Get(principalKey).(queue.Principal)
	return p
}

// readJSON reads a JSON body of at most MaxBodyBytes.
func readJSON(c echo.Context) ([]byte, error) {
	ct := c.Request().Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return nil, problem.New(http.StatusUnsupportedMediaType, "unsupported_media_type", "send Content-Type: application/json")
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return nil, problem.New(http.StatusUnsupportedMediaType, "unsupported_media_type", "the body must be UTF-8")
	}
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, canonical.MaxBodyBytes+1))
	if err != nil {
		return nil, problem.New(http.StatusBadRequest, "malformed_json", "could not read the body: %v", err)
	}
	if len(body) > canonical.MaxBodyBytes {
		return nil, problem.New(http.StatusRequestEntityTooLarge, "too_large",
			"the body is larger than %d bytes", canonical.MaxBodyBytes)
	}
	return body, nil
}

func (s *Server) healthz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if err := s.cfg.Ping(ctx); err != nil {
		return c.JSON(http.StatusServiceUnavailable, wire.Health{Status: wire.HealthUnavailable})
	}
	if s.cfg.Live != nil && !s.cfg.Live.Connected() {
		return c.JSON(http.StatusServiceUnavailable, wire.Health{Status: wire.HealthDegraded,
			Live: "disconnected: not hearing of other replicas' changes; reconnecting"})
	}
	return c.JSON(http.StatusOK, wire.Health{Status: wire.HealthOK})
}

func (s *Server) keys(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "max-age=30")
	return c.Blob(http.StatusOK, "application/jwk-set+json", s.cfg.Keys.JWKS())
}

func (s *Server) openAPI(c echo.Context) error {
	if len(s.cfg.OpenAPI) == 0 {
		return echo.ErrNotFound
	}
	return c.Blob(http.StatusOK, "application/yaml", s.cfg.OpenAPI)
}

func (s *Server) submit(c echo.Context) error {
	body, err := readJSON(c)
	if err != nil {
		return err
	}
	start := time.Now()
	call, created, err := s.cfg.Queue.Submit(c.Request().Context(), principal(c), body)
	s.metrics.proposal(err, time.Since(start))
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		c.Response().Header().Set("Location", "/api/v1/calls/"+call.ID)
	}
	return s.answerCall(c, status, call)
}

// longPoll reads a request's ?wait= (a duration, cut to queue.MaxWait)
// and, for a wait, takes one of the token's open long-polls: release gives
// it back and records how long the request waited. A read without wait is
// never refused.
func (s *Server) longPoll(c echo.Context) (wait time.Duration, release func(), err error) {
	if w := c.QueryParam("wait"); w != "" {
		d, err := time.ParseDuration(w)
		if err != nil || d < 0 {
			return 0, nil, problem.New(http.StatusBadRequest, "invalid_wait", "wait must be a duration such as 30s (at most 60s)")
		}
		wait = min(d, queue.MaxWait)
	}
	if wait <= 0 {
		return 0, func() {}, nil
	}
	token, _ := c.Get(tokenKey).(string)
	if !s.waits.Acquire(token) {
		c.Response().Header().Set("Retry-After", "5")
		return 0, nil, problem.New(http.StatusTooManyRequests, "too_many_waits",
			"this token already holds %d open long-polls or held MCP calls; wait for one to return, or retry in 5 s", s.waits.Max())
	}
	start := time.Now()
	return wait, func() {
		s.metrics.waitSeconds.Observe(time.Since(start).Seconds())
		s.waits.Release(token)
	}, nil
}

func (s *Server) getCall(c echo.Context) error {
	wait, release, err := s.longPoll(c)
	if err != nil {
		return err
	}
	call, err := s.cfg.Queue.Wait(c.Request().Context(), principal(c), c.Param("id"), wait)
	release()
	if errors.Is(err, context.Canceled) {
		return nil // the agent went away; its waiter is already gone
	}
	if err != nil {
		return err
	}
	return s.answerCall(c, http.StatusOK, call)
}

func (s *Server) cancelCall(c echo.Context) error {
	call, err := s.cfg.Queue.Cancel(c.Request().Context(), principal(c), c.Param("id"))
	if err != nil {
		return err
	}
	return s.answerCall(c, http.StatusOK, call)
}

// acceptCounter is the agent accepting a counter-proposal of one of its
// calls: its grant is minted once its approvals are complete.
func (s *Server) acceptCounter(c echo.Context) error {
	call, err := s.cfg.Queue.Accept(c.Request().Context(), principal(c), c.Param("id"))
	if err != nil {
		return err
	}
	return s.answerCall(c, http.StatusOK, call)
}

func (s *Server) outcome(c echo.Context) error {
	body, err := readJSON(c)
	if err != nil {
		return err
	}
	r, err := queue.ParseOutcome(body)
	if err != nil {
		return err
	}
	call, err := s.cfg.Queue.ReportOutcome(c.Request().Context(), principal(c), c.Param("id"), r.Status, r.Detail)
	if err != nil {
		return err
	}
	return s.answerCall(c, http.StatusOK, call)
}

// heartbeat extends the lease of a redeemed call. The body is optional:
// {"extend_seconds": N} asks for N seconds from now, at most the tool's
// outcome_within (the default).
func (s *Server) heartbeat(c echo.Context) error {
	var body []byte
	if c.Request().ContentLength != 0 {
		var err error
		if body, err = readJSON(c); err != nil {
			return err
		}
	}
	extend, err := queue.ParseHeartbeat(body)
	if err != nil {
		return err
	}
	call, err := s.cfg.Queue.Heartbeat(c.Request().Context(), principal(c), c.Param("id"), extend)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, answer.Lease(call))
}

func (s *Server) redeem(c echo.Context) error {
	body, err := readJSON(c)
	if err != nil {
		return err
	}
	start := time.Now()
	r, err := s.cfg.Queue.Redeem(c.Request().Context(), principal(c), body)
	s.metrics.redeemSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		var pe *queue.ProposalError
		if errors.As(err, &pe) {
			ae := problem.Of(pe)
			ae.Status, ae.Code = http.StatusBadRequest, "malformed"
			ae.Message = "the redemption request must be {\"grant\": \"...\", \"call\": {\"tool\", \"target\", \"args\"}}"
			if pe.Kind == queue.KindInvalidArguments {
				ae.Message = fmt.Sprintf("the call presented does not validate against %s (%s); present exactly the call that was approved, every member valid",
					pe.Tool, problemCount(len(pe.Problems)))
			}
			return ae
		}
		return err
	}
	status := http.StatusOK
	switch {
	case r.Accepted:
	case r.Reason == "replayed":
		status = http.StatusConflict
	case r.Reason == grant.ReasonFrozen:
		status = http.StatusServiceUnavailable
	default:
		status = http.StatusForbidden
	}
	return c.JSON(status, answer.Redemption(r))
}

func problemCount(n int) string {
	if n == 1 {
		return "1 problem"
	}
	return fmt.Sprintf("%d problems", n)
}

// answerCall answers with the agent API's call object: the people it names
// (approvers, the operator who denied, revoked or resolved the call,
// comments' authors, owners) are named as people see them, never by a
// single-sign-on principal (account.PublicNames). The status page follows
// the same rule.
func (s *Server) answerCall(c echo.Context, status int, call *queue.Call) error {
	v, err := answer.Call(call, s.cfg.Accounts.PublicNames(c.Request().Context()), s.now())
	if err != nil {
		return err
	}
	if call.PlanID != "" {
		p, items, err := s.cfg.Queue.ReadPlan(c.Request().Context(), call.PlanID)
		if err != nil {
			return err
		}
		answer.InPlan(&v, p, p.Shown(items), call)
	}
	if call.CounteredBy != "" {
		// The counter shares the original's submitting token: the agent
		// that sees the original sees it.
		counter, err := s.cfg.Queue.Call(c.Request().Context(), call.CounteredBy)
		if err != nil {
			return err
		}
		answer.Countered(&v, counter)
	}
	return c.JSON(status, v)
}

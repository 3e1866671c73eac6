package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/answer"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/queue"
)

// Plans (docs/plans.md): an agent submits a list of calls, a person
// approves it once, and the agent mints and redeems its items one by one.

func (s *Server) submitPlan(c echo.Context) error {
	body, err := readJSON(c)
	if err != nil {
		return err
	}
	p, items, err := s.cfg.Queue.SubmitPlan(c.Request().Context(), principal(c), body)
	if err != nil {
		return err
	}
	return s.answerPlan(c, http.StatusCreated, p, items)
}

func (s *Server) getPlan(c echo.Context) error {
	wait, release, err := s.longPoll(c)
	if err != nil {
		return err
	}
	p, items, err := s.cfg.Queue.WaitPlan(c.Request().Context(), principal(c), c.Param("id"), wait)
	release()
	if errors.Is(err, context.Canceled) {
		return nil // the agent went away; its waiter is already gone
	}
	if err != nil {
		return err
	}
	return s.answerPlan(c, http.StatusOK, p, items)
}

func (s *Server) cancelPlan(c echo.Context) error {
	ctx := c.Request().Context()
	if _, err := s.cfg.Queue.CancelPlan(ctx, principal(c), c.Param("id")); err != nil {
		return err
	}
	p, items, err := s.cfg.Queue.PlanFor(ctx, principal(c), c.Param("id"))
	if err != nil {
		return err
	}
	return s.answerPlan(c, http.StatusOK, p, items)
}

// mintPlanItem mints the grant of one item of an approved plan: a POST,
// never a GET, by the token that submitted the plan.
func (s *Server) mintPlanItem(c echo.Context) error {
	n, err := strconv.Atoi(c.Param("n"))
	if err != nil || n < 0 {
		return problem.New(http.StatusNotFound, "not_found", "no such item: items are numbered from 0 in the plan's order")
	}
	call, err := s.cfg.Queue.MintPlanItem(c.Request().Context(), principal(c), c.Param("id"), n)
	if err != nil {
		return err
	}
	return s.answerCall(c, http.StatusOK, call)
}

func (s *Server) answerPlan(c echo.Context, status int, p *queue.Plan, items []*queue.Call) error {
	v, err := answer.Plan(p, items, s.cfg.Accounts.PublicNames(c.Request().Context()), s.now())
	if err != nil {
		return err
	}
	return c.JSON(status, v)
}

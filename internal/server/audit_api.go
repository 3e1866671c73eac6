package server

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/answer"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/problem"
)

// routesAudit serves the audit trail's newest signed checkpoint. It is
// public: an outside party fetches and keeps checkpoints so that it can
// later prove the log was not rewritten or cut short (docs/audit.md).
func (s *Server) routesAudit(e *echo.Echo) {
	e.GET("/api/v1/audit/checkpoint", s.auditCheckpoint)
}

// auditCheckpoint answers {seq, head, time, kid, public_key, signature}, or
// 404 no_checkpoint before the first checkpoint is signed.
func (s *Server) auditCheckpoint(c echo.Context) error {
	cp, err := s.cfg.Audit.LatestCheckpoint(c.Request().Context())
	if errors.Is(err, audit.ErrNoCheckpoint) {
		return problem.New(http.StatusNotFound, "no_checkpoint", "no audit checkpoint has been signed yet")
	}
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-cache")
	return c.JSON(http.StatusOK, answer.Checkpoint(cp))
}

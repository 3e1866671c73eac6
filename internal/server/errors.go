package server

import (
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/problem"
)

// refusalKey marks a request answered with a refusal, for the access log.
const refusalKey = "countersign.refusal"

// ErrorOf is problem.Of for errors that crossed echo: the router's and
// middleware's own errors (no route, wrong method, a body too large) get
// their codes here, everything else the domain's.
func ErrorOf(err error) *problem.Error {
	var (
		he *echo.HTTPError
		pe *problem.Error
	)
	if errors.As(err, &he) && !errors.As(err, &pe) {
		return httpError(he)
	}
	return problem.Of(err)
}

func httpError(he *echo.HTTPError) *problem.Error {
	switch he.Code {
	case http.StatusNotFound:
		return problem.New(he.Code, "not_found", "no such route")
	case http.StatusMethodNotAllowed:
		return problem.New(he.Code, "method_not_allowed", "method not allowed on this route")
	case http.StatusRequestEntityTooLarge:
		return problem.New(he.Code, "too_large", "the body is larger than %d bytes", canonical.MaxBodyBytes)
	case http.StatusUnauthorized:
		return problem.New(he.Code, "unauthorized", "%v", he.Message)
	case http.StatusForbidden:
		return problem.New(he.Code, "forbidden", "%v", he.Message)
	case http.StatusBadRequest:
		return problem.New(he.Code, "bad_request", "%v", he.Message)
	}
	return problem.New(he.Code, strings.ReplaceAll(strings.ToLower(http.StatusText(he.Code)), " ", "_"), "%v", he.Message)
}

package server

import (
	"sort"

	"github.com/labstack/echo/v4"
)

// Routes lists the server's routes as "METHOD /path", with path parameters
// in the router's form (/api/v1/calls/:id), sorted. The catch-all routes
// that answer 404 for unknown paths are left out.
func (s *Server) Routes() []string {
	var out []string
	for _, r := range s.echo.Routes() {
		if r.Method == echo.RouteNotFound {
			continue
		}
		out = append(out, r.Method+" "+r.Path)
	}
	sort.Strings(out)
	return out
}

package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
)

// StatusTooManySessions is the code in the data of the JSON-RPC error
// that refuses an initialize over a token's MaxSessionsPerToken.
const StatusTooManySessions = "too_many_sessions"

// CodeTooManySessions is the JSON-RPC error code of that refusal (in the
// range JSON-RPC leaves to servers).
const CodeTooManySessions = -32010

// sessions counts the MCP sessions opened over HTTP that each agent token
// has open. A session takes a place when its initialize is answered and
// gives it back when it closes: its client deleted it, it was idle for
// SessionTimeout, or it never finished initializing. Sessions connected in
// this process (Connect) are the program's own and are not counted.
type sessions struct {
	max  int
	mu   sync.Mutex
	open map[string]int                // token id → open sessions
	of   map[*sdk.ServerSession]string // counted session → its token id
}

// take counts ss for token; false when the token has its maximum open
// already. fresh is false when ss was counted before (a repeated
// initialize, which the SDK refuses).
func (s *sessions) take(token string, ss *sdk.ServerSession) (ok, fresh bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, counted := s.of[ss]; counted {
		return true, false
	}
	if s.open[token] >= s.max {
		return false, false
	}
	s.open[token]++
	s.of[ss] = token
	return true, true
}

// give gives back ss's place, once.
func (s *sessions) give(ss *sdk.ServerSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	token, ok := s.of[ss]
	if !ok {
		return
	}
	delete(s.of, ss)
	if s.open[token]--; s.open[token] <= 0 {
		delete(s.open, token)
	}
}

// count is how many sessions token has open.
func (s *sessions) count(token string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open[token]
}

// total is how many sessions every token has open together.
func (s *sessions) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.of)
}

// Collectors are the gateway's Prometheus series, for the registry that
// the server's /metrics serves: countersign_mcp_sessions_open, the MCP
// sessions open over HTTP, and countersign_mcp_streams_open, the event
// streams, each counted as its per-token bound counts them.
func (g *Gateway) Collectors() []prometheus.Collector {
	return []prometheus.Collector{prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "countersign_mcp_sessions_open",
		Help: "MCP sessions open over HTTP: from a session's initialize until its client deletes it or it is idle for the session timeout (30 minutes). Requests of the protocol versions without sessions are not counted."},
		func() float64 { return float64(g.sessions.total()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "countersign_mcp_streams_open",
			Help: "MCP event streams open over HTTP (a session's GET stream, a subscriptions/listen request), counted as the per-token bound counts them."},
			func() float64 { return float64(g.streams.sum()) })}
}

// boundSessions is the servers' receiving middleware that refuses an
// initialize over its token's bound, and gives the place back when the
// session ends.
func (g *Gateway) boundSessions(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if method != "initialize" {
			return next(ctx, method, req)
		}
		ss, ok := req.GetSession().(*sdk.ServerSession)
		extra := req.GetExtra()
		// A session without an id is one the stateless protocol makes for
		// a single request and never keeps: nothing to count.
		if !ok || ss == nil || ss.ID() == "" || extra == nil || extra.TokenInfo == nil {
			return next(ctx, method, req)
		}
		agent, _ := extra.TokenInfo.Extra[agentKey].(Agent)
		ok, fresh := g.sessions.take(agent.TokenID, ss)
		if !ok {
			g.log.Info("MCP initialize refused: the token has its maximum of sessions open",
				slog.String("actor", agent.Actor), slog.String("token", agent.TokenID), slog.Int("max", g.sessions.max))
			return nil, g.tooManySessions()
		}
		res, err := next(ctx, method, req)
		if !fresh {
			return res, err
		}
		if err != nil {
			g.sessions.give(ss)
			return res, err
		}
		go func() {
			_ = ss.Wait()
			g.sessions.give(ss)
		}()
		return res, nil
	}
}

// tooManySessions refuses an initialize: the model is told to reuse a
// session it has, or close one, before it opens another.
func (g *Gateway) tooManySessions() error {
	data, _ := json.Marshal(map[string]any{"code": StatusTooManySessions, "max_sessions": g.sessions.max,
		"session_timeout_seconds": int(g.cfg.SessionTimeout.Seconds())})
	return &jsonrpc.Error{Code: CodeTooManySessions, Data: data, Message: fmt.Sprintf(
		"%s: Countersign did not open another MCP session: this agent's token already has %d sessions open, its limit. "+
			"Reuse an open session (send its Mcp-Session-Id), or close one you no longer use "+
			"(HTTP DELETE with its Mcp-Session-Id) and initialize again; an idle session closes by itself after %s.",
		StatusTooManySessions, g.sessions.max, g.cfg.SessionTimeout)}
}

// Package control is the control socket: it lets `console approve|deny`
// hand a decision to a running server, `console counter` answer a call with
// an edited one ("counter"), `console unblock` lift a retry
// block ("clear") and `console allowance revoke` revoke an allowance
// ("revoke_allowance"), so that waiters and open pages see it at once. It is a
// Unix socket in the data directory that only the owner can open; whoever
// can open it can already write the database file.
// Answers have the API's error shape (problem.Of).
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/answer"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/mcp/catalog"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/scope"
	"github.com/countersign/countersign/internal/tools"
	"github.com/countersign/countersign/internal/wire"
)

// Request is a decision handed over the control socket.
type Request struct {
	Action string `json:"action"` // approve, deny, clear, revoke_allowance, counter, queue, allowances, delegations, end_delegation, mcp_*
	// ID is the call's id, or the allowance's for revoke_allowance.
	ID       string `json:"id,omitempty"`
	Operator string `json:"operator"`
	Digest   string `json:"digest,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Actor    string `json:"actor,omitempty"`
	Tool     string `json:"tool,omitempty"`
	// Confirm is the target or word the call's tool asks to be typed to
	// approve; AcceptWarnings acknowledges a call's deception warning.
	Confirm        string `json:"confirm,omitempty"`
	AcceptWarnings bool   `json:"accept_warnings,omitempty"`
	// Edits is a counter's edit: "target" or a JSON Pointer into args,
	// to its new value as JSON.
	Edits map[string]json.RawMessage `json:"edits,omitempty"`
	// Server names an MCP server and Decision (approve or reject) a review
	// of one of its definitions (Tool, Digest).
	Server   string `json:"server,omitempty"`
	Decision string `json:"decision,omitempty"`
	// All and Giver filter a listing of allowances (with Tool); All and
	// Person a listing of delegations.
	All    bool   `json:"all,omitempty"`
	Giver  string `json:"giver,omitempty"`
	Person string `json:"person,omitempty"`
}

// ActionDelegations lists the delegations Request.Person gave or
// received (everyone's when empty), newest first: those in force now
// unless Request.All.
const ActionDelegations = "delegations"

// ActionEndDelegation ends the live delegation Request.ID in the name of
// Request.Operator, one of its two people or an admin.
const ActionEndDelegation = "end_delegation"

// maxDelegationsListed bounds one listing of delegations.
const maxDelegationsListed = 200

// ActionCounter answers the pending call Request.ID (whose digest the
// operator checked, Request.Digest) with its edit, Request.Edits: the
// counter-proposal is stored with the operator's approval.
const ActionCounter = "counter"

// ActionAllowances lists allowances, newest first: those that have not
// ended unless Request.All, of Request.Tool and Request.Giver when set.
const ActionAllowances = "allowances"

// ActionQueue lists the pending calls (of Request.Tool when it is set),
// newest first, at most MaxQueue of them.
const ActionQueue = "queue"

// MaxQueue bounds one listing of the queue.
const MaxQueue = 500

// Actions on the MCP servers' tool definitions: list the current ones,
// show one (Server, Tool, Digest), review one (with Decision, in the name
// of Operator, an enabled admin).
const (
	ActionMCPList   = "mcp_list"
	ActionMCPShow   = "mcp_show"
	ActionMCPReview = "mcp_review"
)

// ActionRevokeAllowance revokes the allowance Request.ID, with
// Request.Reason, in the name of Request.Operator.
const ActionRevokeAllowance = "revoke_allowance"

// Response is the control socket's answer: the call (its people named as
// stored), the allowance, or an error in the API's shape.
type Response struct {
	Call *wire.Call `json:"call,omitempty"`
	// Calls are the pending calls of a queue listing; Truncated is true
	// when more are pending than it holds.
	Calls     []wire.Call `json:"calls,omitempty"`
	Truncated bool        `json:"truncated,omitempty"`
	// Definitions are the MCP definitions of a listing; Definition the
	// one shown or reviewed.
	Definitions []wire.MCPDefinition `json:"definitions,omitempty"`
	Definition  *wire.MCPDefinition  `json:"definition,omitempty"`
	Allowance   *Allowance           `json:"allowance,omitempty"`
	Allowances  []Allowance          `json:"allowances,omitempty"`
	Delegation  *wire.Delegation     `json:"delegation,omitempty"`
	Delegations []wire.Delegation    `json:"delegations,omitempty"`
	Error       *wire.Error          `json:"error,omitempty"`
}

// Allowance is an allowance as the control socket and the command line
// show it.
type Allowance struct {
	ID               string    `json:"id"`
	State            string    `json:"state"` // waiting, live, or why it ended
	Actor            string    `json:"actor"`
	Audience         string    `json:"audience"`
	Tool             string    `json:"tool"`
	Uses             int       `json:"uses"`
	Used             int       `json:"used"`
	OncePerCall      bool      `json:"once_per_call"`
	Until            time.Time `json:"until"`
	Giver            string    `json:"giver"`
	Confirmers       []string  `json:"confirmers"`
	ConfirmersNeeded int       `json:"confirmers_needed"`
	ScopeDigest      string    `json:"scope_digest"`
	BaseCall         string    `json:"base_call"`
	GivenAt          time.Time `json:"given_at"`
	EndedAt          time.Time `json:"ended_at,omitzero"`
	EndReason        string    `json:"end_reason,omitempty"`
	EndedBy          string    `json:"ended_by,omitempty"`
	// Words say the scope as its giver read it, when the tools file in
	// force defines its tool as it was given.
	Words string `json:"words,omitempty"`
}

// AllowanceOf is a as shown at now.
func AllowanceOf(a *queue.Allowance, now time.Time) Allowance {
	return Allowance{ID: a.ID, State: a.State(now), Actor: a.Actor, Audience: a.Audience, Tool: a.Tool, Uses: a.Uses, Used: a.Used,
		OncePerCall: a.OncePerCall, Until: a.Until, Giver: a.Giver, Confirmers: append([]string{}, a.Confirmers...),
		ConfirmersNeeded: a.ConfirmersNeeded, ScopeDigest: a.ScopeDigest, BaseCall: a.BaseCall, GivenAt: a.GivenAt,
		EndedAt: a.EndedAt, EndReason: a.EndReason, EndedBy: a.EndedBy}
}

// Listen opens the control socket at path, replacing a stale socket file
// left by a server that is gone. It fails when another server is listening
// there. The socket is made owner-only; the process umask (set once in
// main) keeps it so from the start.
func Listen(path string) (net.Listener, error) {
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("control: another console is already serving this data directory (%s answers): stop it first, or give this one a data directory of its own (--data; replicas share a PostgreSQL database, not a data directory)", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("control: remove stale control socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control: control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// Services are what the control socket hands its requests to: the queue,
// and when the console mirrors MCP servers, their catalog and the
// accounts that say who is an admin.
type Services struct {
	Queue    *queue.Service
	Catalog  *catalog.Catalog
	Accounts *account.Service
}

// Serve answers control requests on ln until ctx ends, then waits for the
// requests in flight (at most 5 s) and returns.
func Serve(ctx context.Context, ln net.Listener, q *queue.Service, log *slog.Logger) error {
	return ServeServices(ctx, ln, Services{Queue: q}, log)
}

// ServeServices is Serve with the MCP servers' catalog.
func ServeServices(ctx context.Context, ln net.Listener, svc Services, log *slog.Logger) error {
	q := svc.Queue
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/decide", func(w http.ResponseWriter, r *http.Request) {
		var req Request
		dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			write(w, nil, &problem.Error{Status: http.StatusBadRequest, Code: "malformed_json", Message: err.Error()})
			return
		}
		switch req.Action {
		case ActionMCPList, ActionMCPShow, ActionMCPReview:
			resp, err := MCP(r.Context(), svc, req)
			writeResponse(w, resp, nil, err)
			return
		}
		if req.Action == ActionAllowances {
			resp, err := Allowances(r.Context(), q, req)
			writeResponse(w, resp, nil, err)
			return
		}
		if req.Action == ActionDelegations || req.Action == ActionEndDelegation {
			resp, err := Delegations(r.Context(), q, req)
			writeResponse(w, resp, nil, err)
			return
		}
		if req.Action == ActionQueue {
			resp, err := Queue(r.Context(), q, req)
			writeResponse(w, resp, nil, err)
			return
		}
		if req.Action == ActionRevokeAllowance {
			a, err := RevokeAllowance(r.Context(), q, req)
			writeResponse(w, Response{}, a, err)
			return
		}
		call, err := Decide(r.Context(), q, req)
		write(w, call, err)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Decide applies a command-line decision through the queue, recording the
// cli channel. It is used both behind the control socket and directly on
// the database when no server is running. The queue checks, inside the
// decision's transaction, that the operator is an enabled account allowed
// to decide, as for the browser.
func Decide(ctx context.Context, q *queue.Service, req Request) (*queue.Call, error) {
	switch req.Action {
	case "approve":
		// What the browser asks for besides the digest, the shell asks for
		// too: the decision's transaction checks it.
		return q.ApproveWith(ctx, queue.ApproveInput{Operator: req.Operator, Channel: audit.ChannelCLI, CallID: req.ID,
			Digest: req.Digest, Confirm: req.Confirm, AcceptWarnings: req.AcceptWarnings})
	case "deny":
		return q.Deny(ctx, req.Operator, audit.ChannelCLI, req.ID, req.Reason)
	case "clear":
		return nil, q.ClearRetry(ctx, req.Operator, audit.ChannelCLI, req.Actor, req.Tool)
	case ActionCounter:
		return q.Counter(ctx, queue.CounterInput{Operator: req.Operator, Channel: audit.ChannelCLI, CallID: req.ID,
			Digest: req.Digest, Edits: req.Edits, Confirm: req.Confirm, AcceptWarnings: req.AcceptWarnings})
	}
	return nil, &problem.Error{Status: http.StatusBadRequest, Code: "bad_request", Message: "action must be approve, deny, clear, revoke_allowance, counter, queue, allowances, delegations, end_delegation, mcp_list, mcp_show or mcp_review"}
}

// MCP lists, shows or reviews the MCP servers' tool definitions. A review
// is in the name of req.Operator, who must be an enabled admin now, and is
// audited through the cli channel. It needs the running server: only it
// knows what each MCP server lists now.
func MCP(ctx context.Context, svc Services, req Request) (Response, error) {
	if svc.Catalog == nil {
		return Response{}, &problem.Error{Status: http.StatusNotFound, Code: "no_mcp_servers", Message: "this console mirrors no MCP server (mcp: in the tools file)"}
	}
	switch req.Action {
	case ActionMCPList:
		return Response{Definitions: answer.MCPDefinitions(svc.Catalog).Definitions}, nil
	case ActionMCPReview:
		if req.Decision != "approve" && req.Decision != "reject" {
			return Response{}, &problem.Error{Status: http.StatusBadRequest, Code: "bad_request", Message: "decision must be approve or reject"}
		}
		if svc.Accounts == nil {
			return Response{}, errors.New("control: no accounts to check the reviewer")
		}
		u, err := svc.Accounts.UserByName(ctx, req.Operator)
		if err != nil && !errors.Is(err, account.ErrUserNotFound) {
			return Response{}, err
		}
		if err != nil || u.Disabled() || !u.Role.CanAdminister() {
			return Response{}, &problem.Error{Status: http.StatusForbidden, Code: "not_an_admin",
				Message: fmt.Sprintf("only an enabled admin reviews MCP definitions, and %q is not one; name an admin with --as", req.Operator)}
		}
		if err := svc.Catalog.ReviewVia(ctx, req.Server, req.Tool, req.Digest, u.Name, audit.ChannelCLI, req.Decision == "approve"); err != nil {
			return Response{}, err
		}
	}
	pin, prev, err := svc.Catalog.Definition(ctx, req.Server, req.Tool, req.Digest)
	if err != nil {
		return Response{}, err
	}
	v := answer.MCPDefinition(pin, prev, true)
	return Response{Definition: &v}, nil
}

// Allowances lists allowances as req asks, each with its scope in words
// when q's tools define its tool as it was given. Like Decide, it runs
// behind the control socket and directly on the database.
func Allowances(ctx context.Context, q *queue.Service, req Request) (Response, error) {
	list, err := q.Allowances(ctx, queue.AllowanceFilter{Live: !req.All, Tool: req.Tool, Giver: req.Giver})
	if err != nil {
		return Response{}, err
	}
	now := time.Now()
	out := Response{Allowances: []Allowance{}}
	for _, a := range list {
		v := AllowanceOf(a, now)
		v.Words = AllowanceWords(a, q.Tools())
		out.Allowances = append(out.Allowances, v)
	}
	return out, nil
}

// AllowanceWords says a's scope as its giver read it, or "" when reg does
// not define its tool as it was given.
func AllowanceWords(a *queue.Allowance, reg *tools.Registry) string {
	if reg == nil {
		return ""
	}
	t, ok := reg.Tool(a.Tool)
	if !ok || t.DefinitionDigest != a.ToolDigest {
		return ""
	}
	sc, err := scope.Parse(a.Scope)
	if err != nil || sc.Digest() != a.ScopeDigest {
		return ""
	}
	return scope.Words(sc, t, nil)
}

// Queue lists the pending calls, of req.Tool when it is set, with their
// people named as stored. Like Decide, it runs behind the control socket
// and directly on the database when no server is running.
func Queue(ctx context.Context, q *queue.Service, req Request) (Response, error) {
	calls, err := q.PendingCallsOf(ctx, req.Tool, MaxQueue+1)
	if err != nil {
		return Response{}, err
	}
	out := Response{Calls: []wire.Call{}}
	if len(calls) > MaxQueue {
		calls, out.Truncated = calls[:MaxQueue], true
	}
	now := time.Now()
	for _, c := range calls {
		v, err := answer.CallAsStored(c, now)
		if err != nil {
			return Response{}, err
		}
		out.Calls = append(out.Calls, v)
	}
	return out, nil
}

// RevokeAllowance revokes an allowance in the name of req.Operator, with
// req.Reason, recording the cli channel. Like Decide, it runs behind the
// control socket and directly on the database when no server is running;
// the queue checks who may, inside the revocation's transaction.
func RevokeAllowance(ctx context.Context, q *queue.Service, req Request) (*queue.Allowance, error) {
	return q.RevokeAllowance(ctx, queue.RevokeInput{Operator: req.Operator, Channel: audit.ChannelCLI, AllowanceID: req.ID, Reason: req.Reason})
}

func write(w http.ResponseWriter, call *queue.Call, err error) {
	var resp Response
	if call != nil && err == nil {
		var v wire.Call
		if v, err = answer.CallAsStored(call, time.Now()); err == nil {
			resp.Call = &v
		}
	}
	writeResponse(w, resp, nil, err)
}

// writeResponse writes resp, with the allowance a or the error err.
func writeResponse(w http.ResponseWriter, resp Response, a *queue.Allowance, err error) {
	status := http.StatusOK
	if a != nil && err == nil {
		v := AllowanceOf(a, time.Now())
		resp.Allowance = &v
	}
	if err != nil {
		pe := problem.Of(err)
		e := answer.ErrorOf(pe)
		resp.Error, status = &e, pe.Status
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(resp)
}

// Delegations lists delegations (ActionDelegations) or ends one
// (ActionEndDelegation, audited on the cli channel), behind the control
// socket and directly on the database alike.
func Delegations(ctx context.Context, q *queue.Service, req Request) (Response, error) {
	now := time.Now()
	if req.Action == ActionEndDelegation {
		d, err := q.EndDelegation(ctx, req.Operator, audit.ChannelCLI, req.ID)
		if err != nil {
			return Response{}, err
		}
		v := answer.Delegation(d, now)
		return Response{Delegation: &v}, nil
	}
	f := queue.DelegationFilter{Person: req.Person, Limit: maxDelegationsListed}
	if !req.All {
		f.LiveAt = now
	}
	list, err := q.Delegations(ctx, f)
	if err != nil {
		return Response{}, err
	}
	out := Response{Delegations: []wire.Delegation{}}
	for _, d := range list {
		out.Delegations = append(out.Delegations, answer.Delegation(d, now))
	}
	return out, nil
}

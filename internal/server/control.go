package server

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

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// The control socket lets `console approve|deny|clear` hand a decision to a
// running server, so that waiters and open pages see it at once. It is a
// Unix socket in the data directory that only the owner can open; whoever
// can open it can already write the database file.

// ControlRequest is a decision handed over the control socket.
type ControlRequest struct {
	Action   string `json:"action"` // approve, deny, clear
	ID       string `json:"id,omitempty"`
	Operator string `json:"operator"`
	Digest   string `json:"digest,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Actor    string `json:"actor,omitempty"`
	Tool     string `json:"tool,omitempty"`
}

// ControlResponse is the control socket's answer: the call, or an error in
// the API's shape.
type ControlResponse struct {
	Call  map[string]any `json:"call,omitempty"`
	Error *APIError      `json:"error,omitempty"`
}

// ListenControl opens the control socket at path, replacing a stale socket
// file left by a server that is gone. It fails when another server is
// listening there.
func ListenControl(path string) (net.Listener, error) {
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("server: another console is already serving this data directory (%s answers)", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("server: remove stale control socket: %w", err)
	}
	old := umask(0o177)
	ln, err := net.Listen("unix", path)
	umask(old)
	if err != nil {
		return nil, fmt.Errorf("server: control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// ServeControl answers control requests until ctx ends.
func ServeControl(ctx context.Context, ln net.Listener, q *queue.Service, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/decide", func(w http.ResponseWriter, r *http.Request) {
		var req ControlRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeControl(w, nil, newAPIError(http.StatusBadRequest, "malformed_json", "%v", err))
			return
		}
		call, err := Decide(r.Context(), q, req)
		writeControl(w, call, err)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Decide applies a command-line decision through the queue, recording the
// cli channel. It is used both behind the control socket and directly on
// the database when no server is running. The queue checks, inside the
// decision's transaction, that the operator is an enabled account allowed
// to decide, as for the browser.
func Decide(ctx context.Context, q *queue.Service, req ControlRequest) (*queue.Call, error) {
	switch req.Action {
	case "approve":
		return q.Approve(ctx, req.Operator, audit.ChannelCLI, req.ID, req.Digest)
	case "deny":
		return q.Deny(ctx, req.Operator, audit.ChannelCLI, req.ID, req.Reason)
	case "clear":
		return nil, q.ClearRetry(ctx, req.Operator, audit.ChannelCLI, req.Actor, req.Tool)
	}
	return nil, newAPIError(http.StatusBadRequest, "bad_request", "action must be approve, deny or clear")
}

func writeControl(w http.ResponseWriter, call *queue.Call, err error) {
	var resp ControlResponse
	status := http.StatusOK
	if err != nil {
		resp.Error = DecisionError(err)
		status = resp.Error.Status
	} else if call != nil {
		resp.Call = CallView(call)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(resp)
}

// decisionError maps decision refusals to messages for people.
func DecisionError(err error) *APIError {
	var de *queue.DeciderError
	switch {
	case errors.Is(err, queue.ErrDigestMismatch):
		return newAPIError(http.StatusConflict, "digest_mismatch",
			"the digest you approved is not this call's digest; reload the call, check what it does, and approve the digest shown")
	case errors.Is(err, queue.ErrOwnCall):
		return newAPIError(http.StatusForbidden, "own_call", "you cannot approve a call proposed under your own name; ask another operator")
	case errors.Is(err, queue.ErrAlreadyApproved):
		return newAPIError(http.StatusConflict, "already_approved", "you have already approved this call; it needs another operator's approval")
	case errors.Is(err, queue.ErrReasonRequired):
		return newAPIError(http.StatusBadRequest, "reason_required", "a denial needs a reason (the agent receives it)")
	case errors.Is(err, queue.ErrReasonTooLong):
		return newAPIError(http.StatusBadRequest, "reason_too_long", "the reason is longer than %d bytes; shorten it", queue.MaxReasonBytes)
	case errors.As(err, &de):
		return newAPIError(http.StatusForbidden, "not_a_decider",
			"not an enabled operator or admin: %q; add the account with 'console user add NAME --role operator' or use an enabled operator's name", de.Operator)
	case errors.Is(err, queue.ErrCommentTooLong):
		return newAPIError(http.StatusBadRequest, "comment_too_long", "the comment is longer than %d bytes; shorten it", queue.MaxReasonBytes)
	case errors.Is(err, queue.ErrNotBlocked):
		return newAPIError(http.StatusNotFound, "not_blocked", "that actor and tool are not blocked")
	}
	return toAPIError(err)
}

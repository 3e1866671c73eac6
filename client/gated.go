package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/countersign/countersign/internal/wire"
)

// GateOption adjusts Gated.
type GateOption func(*gateConfig)

type gateConfig struct{ acceptCounter bool }

// AcceptCounter makes Gated run an operator's counter-proposal: when the
// call is countered (or refused as previously_countered), the counter is
// accepted and waited for, and fn runs with the edited call. Without it a
// countered call is a *NotApprovedError carrying the counter, and nothing
// runs.
func AcceptCounter() GateOption { return func(g *gateConfig) { g.acceptCounter = true } }

// NotApprovedError is a call that ended without a grant: denied, expired,
// cancelled, or countered. For a countered call Counter is the edited call
// an operator proposed instead and Changes says, one phrase per member,
// what the operator changed; the call did not run.
type NotApprovedError struct {
	Call    *Call
	Counter *Counter
	Changes []string
}

// Counter is the counter-proposal a countered call names: the edited
// call's id, canonical envelope and digest.
type Counter = wire.Counter

func (e *NotApprovedError) Error() string {
	c := e.Call
	switch {
	case c.Status == StatusDenied && c.Decision != nil:
		return fmt.Sprintf("%s denied %s on %s: %s", c.Decision.By, c.Tool, c.Target, c.Decision.Reason)
	case c.Status == StatusCountered && e.Counter != nil:
		return fmt.Sprintf("an operator did not approve %s on %s as it was and proposed an edited call instead (%s): %s; this call did not run",
			c.Tool, c.Target, e.Counter.ID, strings.Join(e.Changes, "; "))
	}
	return fmt.Sprintf("%s on %s is %s", c.Tool, c.Target, c.Status)
}

// Gated proposes p, waits for its decision, redeems the grant and runs fn
// with exactly the redeemed call, then reports fn's outcome: an error
// reports failed (and is returned), nil succeeded. It returns the call
// that ran. Before fn runs it returns a *NotApprovedError (denied,
// expired, cancelled, countered), the console's *Error for a refused
// proposal or grant, or the error of a request. Proposing exactly a
// counter-proposal's call accepts it (its agent chose those arguments).
// Gated sends no heartbeats: a function that runs longer than the tool's
// outcome_within sends its own (Client.Heartbeat).
func (c *Client) Gated(ctx context.Context, p Proposal, fn func(ctx context.Context, call *Call) error, opts ...GateOption) (*Call, error) {
	var cfg gateConfig
	for _, o := range opts {
		o(&cfg)
	}
	call, err := c.Submit(ctx, p)
	if e, ok := AsError(err); ok && cfg.acceptCounter && e.Code == CodePreviouslyCountered && e.CounteredBy != "" {
		call, err = c.Accept(ctx, e.CounteredBy)
	}
	if err != nil {
		return nil, err
	}
	if call.CounteredFrom != "" && call.AcceptedAt.IsZero() && call.Status == StatusPending {
		if call, err = c.Accept(ctx, call.ID); err != nil {
			return nil, err
		}
	}
	if call.Status == StatusPending {
		if call, err = c.Wait(ctx, call.ID); err != nil {
			return call, err
		}
	}
	if call.Status == StatusCountered && call.CounteredBy != nil && cfg.acceptCounter {
		if call, err = c.Accept(ctx, call.CounteredBy.ID); err != nil {
			return nil, err
		}
		if call.Status == StatusPending {
			if call, err = c.Wait(ctx, call.ID); err != nil {
				return call, err
			}
		}
	}
	if call.Status != StatusApproved {
		ne := &NotApprovedError{Call: call}
		if call.Status == StatusCountered && call.CounteredBy != nil {
			ne.Counter, ne.Changes = call.CounteredBy, CounterChanges(call, call.CounteredBy)
		}
		return call, ne
	}
	red, err := c.Redeem(ctx, call.Grant, call.Spec())
	if err != nil {
		return call, err
	}
	if !red.Accepted {
		return call, fmt.Errorf("client: the grant of %s was refused (%s): the call did not run", call.ID, red.Reason)
	}
	runErr := fn(ctx, call)
	status, detail := "succeeded", ""
	if runErr != nil {
		status, detail = "failed", runErr.Error()
	}
	if _, err := c.ReportOutcome(context.WithoutCancel(ctx), call.ID, status, detail); err != nil && runErr == nil {
		// The function ran: a lost report must not read as its failure
		// (the console records a missing outcome when the lease ends).
		return call, nil
	}
	return call, runErr
}

// CounterChanges says what an operator changed from call to its
// counter-proposal cb, one phrase per member: the target, and each
// top-level argument changed, set or removed (values as JSON).
func CounterChanges(call *Call, cb *Counter) []string {
	var env struct {
		Target string                     `json:"target"`
		Args   map[string]json.RawMessage `json:"args"`
	}
	var was map[string]json.RawMessage
	if json.Unmarshal(cb.Envelope, &env) != nil || json.Unmarshal(call.Args, &was) != nil {
		return []string{"the edited call cannot be read"}
	}
	var out []string
	if env.Target != call.Target {
		out = append(out, fmt.Sprintf("target %q changed to %q", call.Target, env.Target))
	}
	for _, k := range sortedKeys(env.Args) {
		v := env.Args[k]
		w, ok := was[k]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s set to %s", k, compact(v)))
		case compact(w) != compact(v):
			out = append(out, fmt.Sprintf("%s changed from %s to %s", k, compact(w), compact(v)))
		}
	}
	for _, k := range sortedKeys(was) {
		if _, ok := env.Args[k]; !ok {
			out = append(out, fmt.Sprintf("%s removed (was %s)", k, compact(was[k])))
		}
	}
	return out
}

func sortedKeys(m map[string]json.RawMessage) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func compact(v json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return string(v)
	}
	return b.String()
}

// Package client is the Go client of Countersign's agent API (v1): submit a
// proposed tool call, wait for an operator's decision, redeem the grant right
// before executing, and report the outcome.
//
//	c := client.New("http://127.0.0.1:8080", os.Getenv("COUNTERSIGN_TOKEN"))
//	call, err := c.Submit(ctx, client.Proposal{Tool: "payments.refund", Target: "invoice:INV-1042",
//		Args: map[string]any{"amount_minor": 1299, "currency": "USD", "reason_code": "duplicate"}})
//	call, err = c.Wait(ctx, call.ID)
//	if call.Status == client.StatusApproved {
//		res, err := c.Redeem(ctx, call.Grant, call.Spec())
//		if err == nil && res.Accepted {
//			// run the tool, then:
//			c.ReportOutcome(ctx, call.ID, client.OutcomeSucceeded, "refund re-1042 issued")
//		}
//	}
//
// Errors from the console are *Error values carrying the API's code,
// message and every problem found, written so they can be handed back to a
// model. A rejected redemption is not an error: Redeem returns a Redemption
// with Accepted false and the reason.
//
// Only the console's refusal of the call is the model's to hear; anything
// else (a bad token, a 5xx, the console unreachable) is the application's.
// Error.Refusal and Redemption.Refusal tell them apart, as the Python and
// TypeScript clients' refusal does:
//
//	var e *client.Error
//	if errors.As(err, &e) && e.Refusal() {
//		// tell the model: e.Code, e.Message, e.Problems, e.Reason
//	} else if err != nil {
//		return err
//	}
//
// The console refuses numbers with a fraction or an exponent. Send integers
// (money in minor units), and keep them exact: Call.Args is raw JSON text.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Defaults of a Client.
const (
	// DefaultPollWait is how long one long-poll of Wait asks the console to
	// hold the request; the console caps it at 60 s.
	DefaultPollWait = 60 * time.Second
	// DefaultRequestTimeout bounds one request (a long-poll gets its wait on
	// top of it).
	DefaultRequestTimeout = 30 * time.Second
	// DefaultMaxOutage is how long Wait keeps retrying while the console
	// does not answer or answers 502, 503 or 504 (a restart, for instance).
	DefaultMaxOutage = 2 * time.Minute

	maxResponseBytes = 8 << 20
	userAgent        = "countersign-go-client/1"
)

// Client talks to one Countersign console with one agent token. It is safe
// for concurrent use.
type Client struct {
	base           string
	token          string
	http           *http.Client
	pollWait       time.Duration
	requestTimeout time.Duration
	backoffMin     time.Duration
	backoffMax     time.Duration
	maxOutage      time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends requests with h instead of a default http.Client.
// Its Timeout, if set, must exceed the poll wait, or every long-poll fails.
func WithHTTPClient(h *http.Client) Option {
	return func(c *Client) {
		if h != nil {
			c.http = h
		}
	}
}

// WithPollWait sets how long each long-poll of Wait lasts (default 60 s,
// the console's maximum).
func WithPollWait(d time.Duration) Option {
	return func(c *Client) {
		if d >= 0 {
			c.pollWait = d
		}
	}
}

// WithRequestTimeout bounds each request (default 30 s); a long-poll may
// take its wait plus this.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.requestTimeout = d
		}
	}
}

// WithBackoff sets the first and the longest pause between Wait's retries
// while the console is unreachable (default 200 ms doubling up to 5 s).
func WithBackoff(initial, longest time.Duration) Option {
	return func(c *Client) {
		if initial > 0 {
			c.backoffMin = initial
		}
		if longest >= c.backoffMin {
			c.backoffMax = longest
		}
	}
}

// WithMaxOutage sets how long Wait keeps retrying an unreachable or
// unavailable console before it returns the error (default 2 min); zero or
// less retries until ctx ends.
func WithMaxOutage(d time.Duration) Option {
	return func(c *Client) { c.maxOutage = d }
}

// New returns a client for the console at baseURL (such as
// "http://127.0.0.1:8080") that authenticates with the agent token.
func New(baseURL, token string, opts ...Option) *Client {
	c := &Client{
		base:           strings.TrimRight(baseURL, "/"),
		token:          token,
		http:           &http.Client{},
		pollWait:       DefaultPollWait,
		requestTimeout: DefaultRequestTimeout,
		backoffMin:     200 * time.Millisecond,
		backoffMax:     5 * time.Second,
		maxOutage:      DefaultMaxOutage,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Submit proposes a call. It returns the stored call: a new one (Created
// true), or the same actor's identical call that is still pending or
// approved. A refused proposal is an *Error listing every problem.
func (c *Client) Submit(ctx context.Context, p Proposal) (*Call, error) {
	if isNil(p.Args) {
		p.Args = struct{}{}
	}
	body, err := encodeJSON(p)
	if err != nil {
		return nil, fmt.Errorf("countersign: encode proposal: %w", err)
	}
	return c.SubmitJSON(ctx, body)
}

// SubmitJSON proposes a call whose JSON text the caller wrote:
// {"tool","target","args","rationale"?}. The bytes are sent as they are.
func (c *Client) SubmitJSON(ctx context.Context, body []byte) (*Call, error) {
	resp, err := c.do(ctx, http.MethodPost, "/api/v1/calls", body, c.requestTimeout, true)
	if err != nil {
		return nil, err
	}
	call, err := resp.call(http.StatusOK, http.StatusCreated)
	if err != nil {
		return nil, err
	}
	call.Created = resp.status == http.StatusCreated
	return call, nil
}

// Get returns one of the agent's calls. Another actor's call is a 404.
func (c *Client) Get(ctx context.Context, id string) (*Call, error) {
	resp, err := c.do(ctx, http.MethodGet, callPath(id), nil, c.requestTimeout, true)
	if err != nil {
		return nil, err
	}
	return resp.call(http.StatusOK)
}

// poll long-polls the call for up to wait.
func (c *Client) poll(ctx context.Context, id string, wait time.Duration) (*Call, error) {
	path := callPath(id) + "?wait=" + url.QueryEscape(wait.String())
	resp, err := c.do(ctx, http.MethodGet, path, nil, wait+c.requestTimeout, true)
	if err != nil {
		return nil, err
	}
	return resp.call(http.StatusOK)
}

// Wait long-polls the call until its status is no longer pending, and
// returns it: approved with its grant, denied with the operator's reason,
// expired, cancelled or redeemed. While the console restarts (connections
// refused or reset, 502, 503, 504) Wait retries with backoff for up to the
// maximum outage. When ctx ends first, Wait returns the last state it saw
// (nil if none) together with ctx's error.
func (c *Client) Wait(ctx context.Context, id string) (*Call, error) {
	var last *Call
	var outage time.Time
	delay := c.backoffMin
	// A poll that answers early with the call still pending (the console
	// draining, or one approval of several) is followed by a short pause, so
	// Wait never spins.
	minInterval := min(c.pollWait, 500*time.Millisecond)
	for {
		wait := c.pollWait
		if dl, ok := ctx.Deadline(); ok {
			wait = max(min(wait, time.Until(dl)-250*time.Millisecond), 0)
		}
		start := time.Now()
		call, err := c.poll(ctx, id, wait)
		switch {
		case err == nil:
			last, outage, delay = call, time.Time{}, c.backoffMin
			if call.Status.Decided() {
				return call, nil
			}
			if err := sleep(ctx, minInterval-time.Since(start)); err != nil {
				return last, err
			}
		case ctx.Err() != nil:
			return last, ctx.Err()
		case transient(err):
			if outage.IsZero() {
				outage = start
			}
			if c.maxOutage > 0 && time.Since(outage) >= c.maxOutage {
				return last, err
			}
			if err := sleep(ctx, delay/2+rand.N(delay/2+1)); err != nil {
				return last, err
			}
			delay = min(2*delay, c.backoffMax)
		default:
			return last, err
		}
	}
}

// Redeem presents the grant with the call it was issued for, right before
// executing it. Present exactly the approved call: call.Spec() of the call
// Wait returned. A rejection (403, or 409 for a grant already redeemed) is
// returned as a Redemption with Accepted false, not as an error. A
// redemption refused because an operator froze the call's tool or actor is
// an *Error with Code CodeFrozen (Status 503, Reason the freeze's): nothing
// was consumed, and the grant may be redeemed once the freeze is lifted,
// while it lives.
func (c *Client) Redeem(ctx context.Context, grant string, call CallSpec) (*Redemption, error) {
	if isNil(call.Args) {
		call.Args = struct{}{}
	}
	raw, err := encodeJSON(call)
	if err != nil {
		return nil, fmt.Errorf("countersign: encode call: %w", err)
	}
	return c.RedeemJSON(ctx, grant, raw)
}

// RedeemJSON is Redeem with the call given as JSON text
// {"tool","target","args"}, sent as it is.
func (c *Client) RedeemJSON(ctx context.Context, grant string, call json.RawMessage) (*Redemption, error) {
	g, err := encodeJSON(grant)
	if err != nil {
		return nil, fmt.Errorf("countersign: encode grant: %w", err)
	}
	body := make([]byte, 0, len(g)+len(call)+20)
	body = append(body, `{"grant":`...)
	body = append(body, g...)
	body = append(body, `,"call":`...)
	body = append(body, call...)
	body = append(body, '}')
	resp, err := c.do(ctx, http.MethodPost, "/api/v1/redeem", body, c.requestTimeout, true)
	if err != nil {
		return nil, err
	}
	switch resp.status {
	case http.StatusOK, http.StatusForbidden, http.StatusConflict:
		var r Redemption
		if json.Unmarshal(resp.body, &r) == nil && (r.Decision == "accepted" || r.Decision == "rejected") {
			r.Accepted = r.Decision == "accepted" && resp.status == http.StatusOK
			r.StatusCode, r.Raw = resp.status, resp.body
			return &r, nil
		}
	case http.StatusServiceUnavailable:
		if e := frozenError(resp.body); e != nil {
			return nil, e
		}
	}
	return nil, resp.error()
}

// frozenError reads a redemption refused because an operator froze the
// call's tool or actor: a 503 in the redemption's own shape (reason frozen,
// the freeze's reason in freeze), or nil for another answer.
func frozenError(body []byte) *Error {
	var r struct {
		Decision string `json:"decision"`
		CallID   string `json:"call_id"`
		Reason   string `json:"reason"`
		Message  string `json:"message"`
		Freeze   struct {
			Reason string `json:"reason"`
		} `json:"freeze"`
	}
	if json.Unmarshal(body, &r) != nil || r.Decision != "rejected" || r.Reason != CodeFrozen {
		return nil
	}
	if r.Message == "" {
		r.Message = "an operator froze this call's tool or actor"
	}
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeFrozen, Message: r.Message,
		Reason: r.Freeze.Reason, CallID: r.CallID, Raw: body}
}

// ReportOutcome reports what happened when the redeemed call ran: status is
// succeeded, failed or unknown; detail is optional text for the audit trail.
// An outcome can be reported once, after redemption (409 otherwise); a
// report after the lease ran out is accepted and replaces lease_expired.
func (c *Client) ReportOutcome(ctx context.Context, id, status, detail string) (*Call, error) {
	body, err := encodeJSON(struct {
		Status string `json:"status"`
		Detail string `json:"detail,omitempty"`
	}{status, detail})
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, http.MethodPost, callPath(id)+"/outcome", body, c.requestTimeout, true)
	if err != nil {
		return nil, err
	}
	return resp.call(http.StatusOK)
}

// Heartbeat extends the lease of a redeemed call while its executor works:
// to now plus extend (whole seconds; 0 means the tool's outcome_within,
// which is also the most allowed). Only the token that redeemed the call
// may send it. Once the lease has run out it fails with code lease_expired:
// report the outcome instead, which is still accepted.
func (c *Client) Heartbeat(ctx context.Context, id string, extend time.Duration) (*Lease, error) {
	var body []byte
	if extend > 0 {
		var err error
		if body, err = encodeJSON(struct {
			ExtendSeconds int64 `json:"extend_seconds"`
		}{int64((extend + time.Second - 1) / time.Second)}); err != nil {
			return nil, err
		}
	}
	resp, err := c.do(ctx, http.MethodPost, callPath(id)+"/heartbeat", body, c.requestTimeout, true)
	if err != nil {
		return nil, err
	}
	if resp.status != http.StatusOK {
		return nil, resp.error()
	}
	var l Lease
	if err := json.Unmarshal(resp.body, &l); err != nil || l.CallID == "" {
		return nil, &Error{Status: resp.status, Code: CodeUnexpectedResponse, Message: "the heartbeat answer is not a lease", Raw: resp.body}
	}
	return &l, nil
}

// Cancel withdraws a pending call (409 when it is no longer pending).
func (c *Client) Cancel(ctx context.Context, id string) (*Call, error) {
	resp, err := c.do(ctx, http.MethodDelete, callPath(id), nil, c.requestTimeout, true)
	if err != nil {
		return nil, err
	}
	return resp.call(http.StatusOK)
}

// Accept accepts a counter-proposal: a call an operator made by editing
// one of this token's pending calls (that call's Status is
// StatusCountered and its CounteredBy names the counter). The answer is
// the counter, approved with its grant when its approvals are complete;
// else Wait for it. Decline a counter with Cancel.
func (c *Client) Accept(ctx context.Context, id string) (*Call, error) {
	resp, err := c.do(ctx, http.MethodPost, callPath(id)+"/accept", nil, c.requestTimeout, true)
	if err != nil {
		return nil, err
	}
	return resp.call(http.StatusOK)
}

// Keys returns the console's JSON Web Key Set (RFC 7517): the Ed25519 keys
// that may still verify a live grant.
func (c *Client) Keys(ctx context.Context) (json.RawMessage, error) {
	resp, err := c.do(ctx, http.MethodGet, "/api/v1/keys", nil, c.requestTimeout, false)
	if err != nil {
		return nil, err
	}
	if resp.status != http.StatusOK {
		return nil, resp.error()
	}
	if !json.Valid(resp.body) {
		return nil, &Error{Status: resp.status, Code: CodeUnexpectedResponse, Message: "the key set is not JSON", Raw: resp.body}
	}
	return resp.body, nil
}

func callPath(id string) string { return "/api/v1/calls/" + url.PathEscape(id) }

type response struct {
	status int
	body   []byte
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, timeout time.Duration, auth bool) (*response, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("countersign: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("countersign: %s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("countersign: %s %s: read response: %w", method, path, err)
	}
	return &response{status: res.StatusCode, body: data}, nil
}

// call reads a call from a response with one of the success statuses, and
// the error otherwise.
func (r *response) call(ok ...int) (*Call, error) {
	for _, s := range ok {
		if r.status == s {
			var c Call
			if err := json.Unmarshal(r.body, &c); err != nil || c.ID == "" {
				return nil, &Error{Status: r.status, Code: CodeUnexpectedResponse,
					Message: "the response is not a call: " + snippet(r.body), Raw: r.body}
			}
			c.Raw = r.body
			return &c, nil
		}
	}
	return nil, r.error()
}

// error reads the API's error shape, or describes an answer not in it.
func (r *response) error() error {
	var env struct {
		Error *Error `json:"error"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil || env.Error == nil || env.Error.Code == "" {
		return &Error{Status: r.status, Code: CodeUnexpectedResponse,
			Message: fmt.Sprintf("HTTP %d: %s", r.status, snippet(r.body)), Raw: r.body}
	}
	env.Error.Status, env.Error.Raw = r.status, r.body
	return env.Error
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// transient reports whether err looks like a console that is restarting or
// briefly overloaded, so that a read may be retried.
func transient(err error) bool {
	if e, ok := AsError(err); ok {
		switch e.Status {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// encodeJSON encodes v without escaping <, > and &, so the text sent is the
// text an agent would write by hand.
func encodeJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func isNil(v any) bool {
	switch a := v.(type) {
	case nil:
		return true
	case json.RawMessage:
		return len(a) == 0
	}
	return false
}

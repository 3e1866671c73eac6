package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/countersign/countersign/client"
)

// The agent's side of a flow over httpConn: the agent API's submit,
// long-poll and redeem, reading from each answer only the members the flow
// needs. The Go client (package client) does the same with net/http and
// decodes whole calls; loadgen runs thousands of flows a second against a
// console on the same cores, so it keeps its own share small.

const (
	pollWait       = "60s" // the console's maximum
	requestTimeout = client.DefaultRequestTimeout
	pollTimeout    = client.DefaultPollWait + client.DefaultRequestTimeout
	maxOutage      = client.DefaultMaxOutage
)

// apiError is an answer in the API's error shape, or one the flow did not
// expect (code unexpected_response).
type apiError struct {
	status int
	code   string
}

func (e *apiError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.code) }

// answerError reads the API's error shape from body.
func answerError(status int, body []byte) error {
	var env struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &env) != nil || env.Error.Code == "" {
		return &apiError{status: status, code: client.CodeUnexpectedResponse}
	}
	return &apiError{status: status, code: env.Error.Code}
}

// agentConn is one agent's connection to one console.
type agentConn struct {
	h *httpConn
	// path is a reused buffer for request paths.
	path []byte
}

func newAgentConn(ctx context.Context, base, token string) (*agentConn, error) {
	h, err := newHTTPConn(ctx, base, "Authorization: Bearer "+token+"\r\nUser-Agent: countersign-loadgen/1\r\nAccept: application/json\r\n", requestTimeout)
	if err != nil {
		return nil, err
	}
	return &agentConn{h: h}, nil
}

// submitted is what the flow reads from a submission's answer.
type submitted struct {
	ID     string `json:"id"`
	Digest string `json:"digest"`
}

// submit proposes the call whose JSON text is body.
func (a *agentConn) submit(body []byte) (submitted, error) {
	status, ans, err := a.h.do(http.MethodPost, "/api/v1/calls", "application/json", body, "", requestTimeout)
	if err != nil {
		return submitted{}, err
	}
	if status != http.StatusCreated && status != http.StatusOK {
		return submitted{}, answerError(status, ans)
	}
	var s submitted
	if json.Unmarshal(ans, &s) != nil || s.ID == "" || s.Digest == "" {
		return submitted{}, &apiError{status: status, code: client.CodeUnexpectedResponse}
	}
	return s, nil
}

// decided is what the flow reads from a long-poll's answer: the status,
// and for an approved call its grant and the call to present with it.
type decided struct {
	ID     string          `json:"id"`
	Status client.Status   `json:"status"`
	Grant  string          `json:"grant"`
	Tool   string          `json:"tool"`
	Target string          `json:"target"`
	Args   json.RawMessage `json:"args"`
}

// wait long-polls the call until it is no longer pending, as the Go
// client's Wait does: a poll that answers pending early is followed by a
// short pause, and a console that does not answer, or answers 502, 503 or
// 504, is retried with backoff for up to maxOutage.
func (a *agentConn) wait(ctx context.Context, id string) (decided, error) {
	a.path = append(append(append(a.path[:0], "/api/v1/calls/"...), url.PathEscape(id)...), "?wait="+pollWait...)
	path := string(a.path)
	var outage time.Time
	delay := 200 * time.Millisecond
	for {
		start := time.Now()
		status, ans, err := a.h.do(http.MethodGet, path, "", nil, "", pollTimeout)
		if err == nil && status != http.StatusOK {
			err = answerError(status, ans)
		}
		if err == nil {
			var d decided
			if json.Unmarshal(ans, &d) != nil || d.ID != id || d.Status == "" {
				return decided{}, &apiError{status: status, code: client.CodeUnexpectedResponse}
			}
			if d.Status.Decided() {
				return d, nil
			}
			outage, delay = time.Time{}, 200*time.Millisecond
			if err := sleepCtx(ctx, 500*time.Millisecond-time.Since(start)); err != nil {
				return decided{}, err
			}
			continue
		}
		if ctx.Err() != nil {
			return decided{}, ctx.Err()
		}
		var ae *apiError
		if errors.As(err, &ae) && ae.status != http.StatusBadGateway && ae.status != http.StatusServiceUnavailable && ae.status != http.StatusGatewayTimeout {
			return decided{}, err
		}
		if outage.IsZero() {
			outage = start
		}
		if time.Since(outage) >= maxOutage {
			return decided{}, err
		}
		if err := sleepCtx(ctx, delay/2+rand.N(delay/2+1)); err != nil {
			return decided{}, err
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// redeemed is what the flow reads from a redemption's answer.
type redeemed struct {
	Decision      string    `json:"decision"`
	Reason        string    `json:"reason"`
	OutcomeWithin int64     `json:"outcome_within"`
	LeaseUntil    time.Time `json:"lease_until"`
	accepted      bool
}

// redeem presents d's grant with d's call, exactly as the console returned
// it. A rejection (403, 409) is a redeemed with accepted false; a
// redemption refused because the call's tool or actor is frozen is an
// error with code frozen.
func (a *agentConn) redeem(d decided) (redeemed, error) {
	body := make([]byte, 0, 64+len(d.Grant)+len(d.Tool)+len(d.Target)+len(d.Args))
	body = append(body, `{"grant":`...)
	body = appendJSONString(body, d.Grant)
	body = append(body, `,"call":{"tool":`...)
	body = appendJSONString(body, d.Tool)
	body = append(body, `,"target":`...)
	body = appendJSONString(body, d.Target)
	body = append(body, `,"args":`...)
	if len(d.Args) == 0 {
		body = append(body, "{}"...)
	} else {
		body = append(body, d.Args...)
	}
	body = append(body, "}}"...)
	status, ans, err := a.h.do(http.MethodPost, "/api/v1/redeem", "application/json", body, "", requestTimeout)
	if err != nil {
		return redeemed{}, err
	}
	switch status {
	case http.StatusOK, http.StatusForbidden, http.StatusConflict, http.StatusServiceUnavailable:
		var r redeemed
		if json.Unmarshal(ans, &r) == nil && (r.Decision == "accepted" || r.Decision == "rejected") {
			if status == http.StatusServiceUnavailable {
				if r.Reason == client.CodeFrozen {
					return redeemed{}, &apiError{status: status, code: client.CodeFrozen}
				}
				break
			}
			r.accepted = r.Decision == "accepted" && status == http.StatusOK
			return r, nil
		}
	}
	return redeemed{}, answerError(status, ans)
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// submitBody is the JSON text of the flow's proposal for city.
func submitBody(b []byte, city string) []byte {
	b = append(b, `{"tool":"weather.search","target":"weather:forecast","args":{"city":`...)
	b = appendJSONString(b, city)
	return append(b, "}}"...)
}

// approver is one operator's browser session, approving over httpConn: one
// connection per console address.
type approver struct {
	s     *webSession
	conns map[string]*httpConn
	ctx   context.Context
	form  []byte
}

func newApprover(ctx context.Context, s *webSession) *approver {
	return &approver{s: s, conns: map[string]*httpConn{}, ctx: ctx}
}

func (a *approver) conn(base string) (*httpConn, error) {
	if h := a.conns[base]; h != nil {
		return h, nil
	}
	h, err := newHTTPConn(a.ctx, base, "User-Agent: countersign-loadgen/1\r\n", 30*time.Second)
	if err != nil {
		return nil, err
	}
	// The session's cookies, as the browser sends them to this host (they
	// are per host, not per port).
	if u, err := url.Parse(base); err == nil {
		for _, c := range a.s.client.Jar.Cookies(u) {
			h.cookies[c.Name] = c.Value
		}
	}
	a.conns[base] = h
	return h, nil
}

func (a *approver) close() {
	for _, h := range a.conns {
		h.Close()
	}
}

var presentedPrefix = []byte(`name="presented" value="`)

// approve approves as an operator does: the call's page is read, and its
// approve form posted with the page's presentation token.
func (a *approver) approve(base, id, digest string) error {
	h, err := a.conn(base)
	if err != nil {
		return errors.New("transport")
	}
	path := "/calls/" + id
	status, page, err := h.do(http.MethodGet, path, "", nil, "", 0)
	if err != nil || status != http.StatusOK {
		return errors.New("call_page")
	}
	var shown string
	if i := bytes.Index(page, presentedPrefix); i >= 0 {
		rest := page[i+len(presentedPrefix):]
		if j := bytes.IndexByte(rest, '"'); j >= 0 {
			shown = html.UnescapeString(string(rest[:j]))
		}
	}
	f := a.form[:0]
	f = append(f, "csrf="...)
	f = append(f, url.QueryEscape(a.s.csrf)...)
	f = append(f, "&digest="...)
	f = append(f, url.QueryEscape(digest)...)
	f = append(f, "&presented="...)
	f = append(f, url.QueryEscape(shown)...)
	a.form = f
	status, _, err = h.do(http.MethodPost, path+"/approve", "application/x-www-form-urlencoded", f,
		"Origin: "+h.origin+"\r\nSec-Fetch-Site: same-origin\r\n", 0)
	if err != nil {
		return errors.New("transport")
	}
	if status != http.StatusSeeOther {
		return errors.New("status_" + strconv.Itoa(status))
	}
	return nil
}

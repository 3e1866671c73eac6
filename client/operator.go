package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/countersign/countersign/internal/wire"
)

// OperatorCall is a call as the operator API shows it to a person: the
// call (never its grant) and, while it is pending, the listing token an
// approval sends back.
type OperatorCall = wire.OperatorCall

// OperatorQueue is a listing of the pending calls.
type OperatorQueue = wire.OperatorQueue

// Operator is the operator API (served with console serve
// --operator-api) for a person's own operator token (cso_…, made on their
// account page): it reads the queue and decides as that person. Keep the
// token out of any agent's reach (docs/security.md).
type Operator struct{ c *Client }

// NewOperator returns the operator API of the console at baseURL for the
// operator token token.
func NewOperator(baseURL, token string, opts ...Option) *Operator {
	return &Operator{c: New(baseURL, token, opts...)}
}

// Queue lists the pending calls, of tool when it is not "", each with its
// digest and listing token.
func (o *Operator) Queue(ctx context.Context, tool string) (*OperatorQueue, error) {
	path := "/api/v1/operator/queue"
	if tool != "" {
		path += "?tool=" + url.QueryEscape(tool)
	}
	var out OperatorQueue
	return &out, o.get(ctx, path, &out)
}

// Call shows one call, with its listing token while it is pending.
func (o *Operator) Call(ctx context.Context, id string) (*OperatorCall, error) {
	var out OperatorCall
	return &out, o.get(ctx, "/api/v1/operator/calls/"+url.PathEscape(id), &out)
}

// Approve approves call c as the token's person (a decide token), naming
// the digest and the listing token a listing gave it.
func (o *Operator) Approve(ctx context.Context, c *OperatorCall, comment string) (*OperatorCall, error) {
	body, _ := json.Marshal(wire.OperatorApproval{Digest: c.Call.Digest, Listing: c.Listing, Comment: comment})
	var out OperatorCall
	return &out, o.post(ctx, "/api/v1/operator/calls/"+url.PathEscape(c.Call.ID)+"/approve", body, &out)
}

// Deny denies call id as the token's person; the agent receives reason.
func (o *Operator) Deny(ctx context.Context, id, reason string) (*OperatorCall, error) {
	body, _ := json.Marshal(wire.OperatorReason{Reason: reason})
	var out OperatorCall
	return &out, o.post(ctx, "/api/v1/operator/calls/"+url.PathEscape(id)+"/deny", body, &out)
}

func (o *Operator) get(ctx context.Context, path string, v any) error {
	resp, err := o.c.do(ctx, http.MethodGet, path, nil, o.c.requestTimeout, true)
	if err != nil {
		return err
	}
	return resp.into(v)
}

func (o *Operator) post(ctx context.Context, path string, body []byte, v any) error {
	resp, err := o.c.do(ctx, http.MethodPost, path, body, o.c.requestTimeout, true)
	if err != nil {
		return err
	}
	return resp.into(v)
}

// into reads a 200 answer into v, and the error otherwise.
func (r *response) into(v any) error {
	if r.status != http.StatusOK {
		return r.error()
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		return &Error{Status: r.status, Code: CodeUnexpectedResponse, Message: "the response is not what was asked: " + snippet(r.body), Raw: r.body}
	}
	return nil
}

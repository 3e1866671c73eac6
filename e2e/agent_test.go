package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"time"
)

// rawAgent speaks the agent API with plain HTTP, so the tests see exactly
// what goes over the wire.
type rawAgent struct {
	url, token string
	client     *http.Client
}

func newRawAgent(url, token string) *rawAgent {
	return &rawAgent{url: url, token: token, client: &http.Client{Timeout: 90 * time.Second}}
}

type reply struct {
	status int
	body   map[string]any
	raw    []byte
}

func (r reply) str(k string) string { s, _ := r.body[k].(string); return s }

func (r reply) code() string {
	e, _ := r.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func (a *rawAgent) do(ctx context.Context, method, path string, body []byte) (reply, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.url+path, rd)
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := a.client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return reply{}, err
	}
	r := reply{status: res.StatusCode, raw: raw}
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			return r, fmt.Errorf("%s %s: not JSON: %v", method, path, err)
		}
	}
	return r, nil
}

func (a *rawAgent) submit(ctx context.Context, body string) (reply, error) {
	return a.do(ctx, http.MethodPost, "/api/v1/calls", []byte(body))
}

func (a *rawAgent) redeem(ctx context.Context, grant, call string) (reply, error) {
	g, _ := json.Marshal(grant)
	return a.do(ctx, http.MethodPost, "/api/v1/redeem", []byte(`{"grant":`+string(g)+`,"call":`+call+`}`))
}

// controlApprove hands an approval to the server over its control socket,
// as `console approve` does.
func controlApprove(ctx context.Context, data, id, operator, digest string) (reply, error) {
	sock := filepath.Join(data, "control.sock")
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	body, _ := json.Marshal(map[string]string{"action": "approve", "id": id, "operator": operator, "digest": digest})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://control/v1/decide", bytes.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return reply{}, err
	}
	r := reply{status: res.StatusCode, raw: raw}
	err = json.Unmarshal(raw, &r.body)
	return r, err
}

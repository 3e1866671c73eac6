package mcp_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/examples/mcpdemo"
	"github.com/countersign/countersign/internal/mcp"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/tools"
)

// TestAnUpstreamRedirectFailsTheCall: an approved call that its HTTP
// upstream answers with a redirect to another origin is not carried
// there, with or without the tools file's credentials: the call fails
// with upstream_redirect naming the address, and its outcome is failed.
func TestAnUpstreamRedirectFailsTheCall(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		http.Error(w, "nothing here", http.StatusNotFound)
	}))
	t.Cleanup(other.Close)
	demo := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return mcpdemo.NewServer(mcpdemo.Options{}) }, nil)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "missing credentials", http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if strings.Contains(string(body), `"tools/call"`) {
			http.Redirect(w, r, other.URL+"/mcp", http.StatusTemporaryRedirect)
			return
		}
		demo.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	dial := mcp.FromConfig(tools.Upstream{Name: "demo", URL: up.URL + "/mcp", Headers: []tools.Header{{Name: "Authorization", Env: "UP_TOKEN", Prefix: "Bearer "}}},
		func(k string) string { return map[string]string{"UP_TOKEN": "s3cret"}[k] }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	e := newEnv(t, envOptions{trust: true, dial: dial})
	cs := e.client(nil, "2025-11-25")
	go e.approveNext(nil)
	res := callRaw(t, cs, "add", `{"a":1,"b":2}`)
	st := status(t, res)
	if !res.IsError || st["status"] != mcp.StatusUpstreamRedirect || st["code"] != mcp.StatusUpstreamRedirect || st["location"] != other.URL+"/mcp" ||
		!strings.Contains(text(res), other.URL+"/mcp") {
		t.Fatalf("the redirected call: %s %v", text(res), st)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the other origin received %d requests", n)
	}
	c := e.callOf(st["call_id"].(string))
	if c.Outcome == nil || c.Outcome.Status != queue.OutcomeFailed || !strings.Contains(c.Outcome.Detail, "redirect") {
		t.Fatalf("the call's outcome: %+v", c.Outcome)
	}
}

package mcp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/examples/mcpdemo"
	"github.com/countersign/countersign/internal/tools"
)

// serve runs h on 127.0.0.1 until the test ends and returns its origin.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// TestUpstreamRedirectsAreNotFollowed: an HTTP upstream that answers a
// tools/call with a redirect to another origin does not get its
// credentials carried there: the other origin receives nothing, and the
// call fails with an error that names the refused redirect.
func TestUpstreamRedirectsAreNotFollowed(t *testing.T) {
	var elsewhere atomic.Int64
	var leaked atomic.Value
	leaked.Store("")
	other := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		leaked.Store(r.Header.Get("Authorization") + "|" + r.Header.Get("X-Demo-Key"))
		http.Error(w, "nothing here", http.StatusNotFound)
	}))
	demo := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return mcpdemo.NewServer(mcpdemo.Options{}) }, nil)
	first := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" || r.Header.Get("X-Demo-Key") != "k-123" {
			http.Error(w, "missing credentials", http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if strings.Contains(string(body), `"tools/call"`) {
			http.Redirect(w, r, other+"/mcp", http.StatusTemporaryRedirect)
			return
		}
		demo.ServeHTTP(w, r)
	}))
	env := map[string]string{"UP_TOKEN": "s3cret", "UP_KEY": "k-123"}
	dial := FromConfig(tools.Upstream{Name: "demo", URL: first + "/mcp", Headers: []tools.Header{
		{Name: "Authorization", Env: "UP_TOKEN", Prefix: "Bearer "}, {Name: "X-Demo-Key", Env: "UP_KEY"}}},
		func(k string) string { return env[k] }, quietLogger())
	u := NewUpstream("demo", dial, UpstreamOptions{Logger: quietLogger()})
	startUpstream(t, u)
	if len(u.Tools()) == 0 {
		t.Fatal("the upstream listed no tools")
	}

	_, err := u.Call(context.Background(), "echo", []byte(`{"s":"x"}`))
	var re *RedirectError
	if !errors.As(err, &re) {
		t.Errorf("Call = %v, want a *RedirectError", err)
	} else if re.Status != http.StatusTemporaryRedirect || re.Location != other+"/mcp" || re.Upstream != "demo" ||
		!strings.Contains(err.Error(), other+"/mcp") || !strings.Contains(err.Error(), "does not follow") {
		t.Errorf("the error = %+v (%v), want the 307 to %s/mcp named", re, err, other)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the other origin received %d requests (headers %q), want none", n, leaked.Load())
	}
}

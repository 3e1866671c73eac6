package mcp

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/examples/mcpdemo"
	"github.com/countersign/countersign/internal/tools"
)

// TestUpstreamCallsReuseTheirConnection: calls forwarded one after the
// other to an HTTP upstream go over the connections already open, although
// each call's context ends as soon as its result is back (as a forward's
// does): the rest of the answer's stream is still read, so the connection
// goes back to the pool instead of being closed under the SDK's reader.
func TestUpstreamCallsReuseTheirConnection(t *testing.T) {
	const calls = 200
	var opened atomic.Int64
	demo := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return mcpdemo.NewServer(mcpdemo.Options{}) }, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: demo, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	dial := FromConfig(tools.Upstream{Name: "demo", URL: "http://" + ln.Addr().String() + "/mcp"},
		func(string) string { return "" }, quietLogger())
	u := NewUpstream("demo", dial, UpstreamOptions{Logger: quietLogger()})
	startUpstream(t, u)
	before := opened.Load()
	for i := range calls {
		ctx, cancel := context.WithCancel(context.Background())
		res, err := u.Call(ctx, "add", fmt.Appendf(nil, `{"a":%d,"b":1}`, i))
		cancel()
		if err != nil || res.IsError {
			t.Fatalf("call %d: %+v, %v", i, res, err)
		}
	}
	// The connections open carry the calls, and a few more when a call
	// finds the last one still being read (0–3 here; 22–39 when each
	// call's stream was cut when its context ended).
	n := opened.Load() - before
	t.Logf("%d calls opened %d new connections", calls, n)
	if n > 8 {
		t.Errorf("%d calls opened %d new connections to the upstream, want at most 8", calls, n)
	}
}

package e2e

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The demo serves the example MCP server at /mcp/demo, with the token it
// prints: an MCP client pasted from its output lists the example's tools,
// trusted at the first start, with their own descriptions.
func TestDemoServesTheMCPGateway(t *testing.T) {
	s := startProcess(t, "", "demo", "--addr", "127.0.0.1:0", "--no-agent")
	var endpoint, token string
	for end := time.Now().Add(30 * time.Second); token == "" && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for _, line := range strings.Split(s.logs.String(), "\n") {
			if i := strings.Index(line, "MCP gateway: the example MCP server's tools at "); i >= 0 {
				endpoint = strings.Fields(line[i+len("MCP gateway: the example MCP server's tools at "):])[0]
			}
			if _, rest, ok := strings.Cut(line, "token (also in "); ok {
				if _, tok, ok := strings.Cut(rest, "): "); ok {
					token = strings.TrimSpace(tok)
				}
			}
		}
	}
	if endpoint != s.url+"/mcp/demo" || !strings.HasPrefix(token, "cst_") {
		t.Fatalf("the demo printed endpoint %q and token %q:\n%s", endpoint, token, s.logs.String())
	}
	tr := &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearerTransport{token}}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "demo-test", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", endpoint, err)
	}
	defer cs.Close()
	var names, held []string
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		names, held = names[:0], held[:0]
		for _, tl := range res.Tools {
			if !strings.Contains(tl.Description, "review") {
				names = append(names, tl.Name)
			} else {
				held = append(held, tl.Name)
			}
		}
		if len(names) == 5 {
			break
		}
	}
	sort.Strings(names)
	if strings.Join(names, " ") != "add big_result echo fail scale" {
		t.Fatalf("the demo's MCP endpoint lists %v, want five of the example's tools approved", names)
	}
	// One tool is left to an admin's review (listed under a name that
	// says so, not its own), and the banner says where.
	if len(held) != 1 || slices.Contains(held, "create_order") {
		t.Errorf("tools awaiting review %v, want one (create_order, under a placeholder name)", held)
	}
	eventually(t, 30*time.Second, "the banner saying where create_order's review is", func() bool {
		return strings.Contains(s.logs.String(), "demo/create_order's definition awaits an admin's review: log in as admin and open "+s.url+"/admin/mcp")
	})
	// /metrics counts the sessions open over HTTP: one opened at a
	// protocol with sessions, until its client closes it (the client
	// above, at the protocol without sessions, keeps none).
	if got := metricValue(s.url, "countersign_mcp_sessions_open"); got != 0 {
		t.Fatalf("countersign_mcp_sessions_open = %v with only a stateless client, want 0", got)
	}
	old, err := sdk.NewClient(&sdk.Implementation{Name: "demo-test", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearerTransport{token}}},
		&sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connect to %s at 2025-11-25: %v", endpoint, err)
	}
	if got := metricValue(s.url, "countersign_mcp_sessions_open"); got != 1 {
		t.Fatalf("countersign_mcp_sessions_open = %v with one session open, want 1", got)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "countersign_mcp_sessions_open back to 0 once the session is closed", func() bool {
		return metricValue(s.url, "countersign_mcp_sessions_open") == 0
	})
	// Another token is refused.
	bad := &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearerTransport{"cst_wrong"}}}
	if _, err := sdk.NewClient(&sdk.Implementation{Name: "demo-test", Version: "1"}, nil).Connect(ctx, bad, nil); err == nil {
		t.Fatal("a wrong token connected to the demo's MCP endpoint")
	}
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

package console

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
)

// HEAD is answered wherever GET is, with the same status and headers and
// no body; the favicon is served.
func TestHeadWhereGet(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("olivia", account.RoleOperator, "correct horse battery")
	b := e.browser()
	b.login("olivia", "correct horse battery")
	for _, path := range []string{"/", "/login", "/history", "/healthz", "/api/v1/keys", "/calls/call_nope"} {
		req, _ := http.NewRequest(http.MethodGet, e.url+path, nil)
		get := b.do(req)
		req, _ = http.NewRequest(http.MethodHead, e.url+path, nil)
		head := b.do(req)
		if head.status != get.status || (head.status >= 400 && path != "/calls/call_nope") {
			t.Errorf("HEAD %s = %d, GET = %d; want the same success", path, head.status, get.status)
		}
		if head.body != "" {
			t.Errorf("HEAD %s sent a body of %d bytes", path, len(head.body))
		}
		if got, want := head.header.Get("Content-Type"), get.header.Get("Content-Type"); got != want {
			t.Errorf("HEAD %s Content-Type %q, GET's %q", path, got, want)
		}
	}
	// A route with no GET answers HEAD as it answers GET.
	req, _ := http.NewRequest(http.MethodHead, e.url+"/calls/x/approve", nil)
	if p := b.do(req); p.status != http.StatusMethodNotAllowed && p.status != http.StatusNotFound {
		t.Errorf("HEAD of a POST-only route = %d, want 405 or 404", p.status)
	}

	p := b.get("/favicon.ico")
	loc := p.header.Get("Location")
	if p.status != http.StatusMovedPermanently || !strings.HasPrefix(loc, "/static/favicon.") {
		t.Fatalf("/favicon.ico = %d to %q, want a permanent redirect to the hashed icon", p.status, loc)
	}
	icon := b.get(loc)
	if icon.status != http.StatusOK || icon.header.Get("Content-Type") != "image/svg+xml" || !strings.Contains(icon.body, "<svg") {
		t.Errorf("GET %s = %d %q", loc, icon.status, icon.header.Get("Content-Type"))
	}
	if href, _ := b.get("/").doc.Find(`link[rel="icon"]`).Attr("href"); href != loc {
		t.Errorf("the page links the icon %q, want %q", href, loc)
	}
}

// An expired call says when it expired, not when it was "decided"; a
// cancelled one when it was cancelled.
func TestEndedCallsSayHowTheyEnded(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("olivia", account.RoleOperator, "correct horse battery")
	b := e.browser()
	b.login("olivia", "correct horse battery")
	expired := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	e.clock.Advance(16 * time.Minute)
	if _, err := e.q.ExpireDue(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := b.get("/calls/" + expired.ID)
	dt := strings.TrimSpace(p.find("decided-at").Prev().Text())
	if dt != "Expired at" {
		t.Errorf("an expired call's label %q, want %q", dt, "Expired at")
	}
	want := e.clock.Now().UTC().Format("2006-01-02 15:04:05 UTC")
	if got := strings.TrimSpace(p.find("decided-at").Text()); got != want {
		t.Errorf("expired at %q, want %q", got, want)
	}
	if dt, ok := p.find("decided-at").Find("time").Attr("datetime"); !ok || dt != e.clock.Now().UTC().Format(time.RFC3339) {
		t.Errorf("the time carries datetime %q, want the RFC 3339 time for the page's script", dt)
	}
	if strings.Contains(p.find("status").Text(), "Decided") {
		t.Error("the expired call's status still says Decided")
	}
}

// A filter that cannot apply offers no export: the links would export
// something other than what the page says.
func TestExportsHiddenForInvalidFilter(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("aude", account.RoleAuditor, "correct horse battery")
	b := e.browser()
	b.login("aude", "correct horse battery")
	if p := b.get("/history?status=approved"); p.find("exports").Length() != 1 {
		t.Fatal("a valid filter shows no export links")
	}
	p := b.get("/history?since=yesterday")
	if p.status != http.StatusBadRequest || p.find("history-error").Length() != 1 {
		t.Fatalf("an invalid filter = %d, want 400 with the error", p.status)
	}
	if n := p.find("exports").Length() + p.find("export-jsonl").Length() + p.find("export-calls-csv").Length(); n != 0 {
		t.Errorf("an invalid filter still offers %d export elements", n)
	}
}

// A console with no live agent token says how to connect an agent; once a
// token exists the help goes.
func TestConnectAnAgentHelp(t *testing.T) {
	e := newConsoleEnvWith(t, nil, func(cc *Config) { cc.MCPEndpoints = []string{"/mcp/github"} })
	e.addUser("olivia", account.RoleOperator, "correct horse battery")
	b := e.browser()
	b.login("olivia", "correct horse battery")
	p := b.get("/")
	help := p.find("connect-agent")
	if help.Length() != 1 {
		t.Fatal("a console without tokens does not say how to connect an agent")
	}
	cmd := p.find("connect-token-command").Text()
	if !strings.HasPrefix(cmd, "console token create --actor agent:NAME --audience ") {
		t.Errorf("token command %q", cmd)
	}
	if got, want := p.find("connect-api").Text(), e.url+"/api/v1/calls"; got != want {
		t.Errorf("API endpoint %q, want %q", got, want)
	}
	if got, want := p.find("connect-mcp").Text(), e.url+"/mcp/github"; got != want {
		t.Errorf("MCP endpoint %q, want %q", got, want)
	}
	if p.find("connect-admin").Length() != 0 {
		t.Error("an operator is sent to the admin page")
	}
	tok, _, err := e.c.accounts.CreateToken(context.Background(), "agent:billing-bot", "payments-host", "", "test", audit.ChannelCLI)
	if err != nil {
		t.Fatal(err)
	}
	if b.get("/").find("connect-agent").Length() != 0 {
		t.Error("the help stays after a token was created")
	}
	if err := e.c.accounts.RevokeToken(context.Background(), tok.ID, "test", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	if b.get("/").find("connect-agent").Length() != 1 {
		t.Error("with every token revoked, the help does not come back")
	}
}

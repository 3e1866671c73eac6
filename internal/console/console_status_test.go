package console

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/mcp/catalog"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/tools"
)

const noteSchema = `{"type":"object","properties":{"value":{"type":"number"},"note":{"type":"string"},"to":{"type":"string"}},` +
	`"required":["value","note","to"],"additionalProperties":false}`

// statusConsole is a console with an MCP upstream, demo, whose tool note
// (a number and two strings) is trusted, and one call of it pending: its
// arguments hold a right-to-left override, a zero-width space and a
// Cyrillic letter inside a Latin word.
func statusConsole(t *testing.T) (*consoleEnv, *queue.Service, *queue.Call) {
	t.Helper()
	reg, err := tools.Parse([]byte("mcp:\n  demo:\n    command: [mcp-demo]\n    tools:\n      note: {target: /to}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var cat *catalog.Catalog
	e := newConsoleEnvTools(t, reg, nil, func(cfg *envConfig) {
		d := cfg.Audit.(*db.DB)
		cat = catalog.New(catalog.Config{Store: d.Catalog(), Registry: reg, TrustFirst: true, Now: cfg.Now})
		cfg.Catalog = cat
	})
	if err := cat.Apply(context.Background(), "demo", []catalog.Listed{{Name: "note", Description: "Writes a note.", InputSchema: []byte(noteSchema)}}); err != nil {
		t.Fatal(err)
	}
	return e, e.q, submitNote(t, e.q, "refund\u202e001\u202c to p\u0430ypal\u200b now", "acct:42")
}

// submitNote proposes a call of demo/note as agent:desk.
func submitNote(t *testing.T, q *queue.Service, note, to string) *queue.Call {
	t.Helper()
	args := canonical.Object{{Name: "note", Value: note}, {Name: "to", Value: to}, {Name: "value", Value: canonical.Number(2.5e-7)}}
	p, problems := canonical.ProposalFrom(canonical.Object{{Name: "args", Value: args}, {Name: "target", Value: to},
		{Name: "tool", Value: "demo/note"}}, "", false)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	c, _, err := q.SubmitProposal(context.Background(), queue.Principal{Actor: "agent:desk", Audience: "demo"}, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStatusPageWithoutLogin: the holder of a call's status link sees the
// call without a console login: tool, target, every bound argument with
// its deceptive characters revealed exactly as the call page reveals them,
// the number in its canonical form, the digest, the state and the
// deadline; the page follows the call (without reloading) while it can change, offers no
// decision, links to no other call, and never shows the grant.
func TestStatusPageWithoutLogin(t *testing.T) {
	e, q, c := statusConsole(t)
	e.addUser("alice", account.RoleOperator, "pw-alice-correct horse")
	anon := e.browser()
	link := e.c.links.Path(c.ID)
	page := anon.get(link)
	if page.status != http.StatusOK {
		t.Fatalf("%s without a login: %d", link, page.status)
	}
	if got := page.find("call-tool").Text(); strings.TrimSpace(got) != "demo/note" {
		t.Errorf("tool %q", got)
	}
	if got := page.find("call-target").Text(); strings.TrimSpace(got) != "acct:42" {
		t.Errorf("target %q", got)
	}
	for _, r := range []rune{'\u202e', '\u202c', '\u200b'} {
		if strings.ContainsRune(page.body, r) {
			t.Errorf("the raw %U reached the status page", r)
		}
	}
	args := page.find("args")
	for _, want := range []string{"[U+202E]", "[U+202C]", "[U+200B]", "2.5e-7"} {
		if !strings.Contains(args.Text(), want) {
			t.Errorf("the arguments %q do not show %s", args.Text(), want)
		}
	}
	if page.find("deception-warning").Length() != 1 || args.Find(`[data-testid="mixed-script"]`).Length() == 0 {
		t.Errorf("no deception warning (%d) or no mixed-script mark", page.find("deception-warning").Length())
	}
	if got := strings.ReplaceAll(page.find("digest").Text(), " ", ""); got != c.Digest {
		t.Errorf("digest %q, want %s", got, c.Digest)
	}
	if got := page.find("status-value").Text(); got != "pending" {
		t.Errorf("status %q", got)
	}
	if dt, _ := page.find("countdown").Attr("datetime"); dt != c.DecideBy.UTC().Format(time.RFC3339) {
		t.Errorf("deadline %q, want %s", dt, c.DecideBy.UTC().Format(time.RFC3339))
	}
	if !strings.Contains(page.body, `name="countersign-follow"`) {
		t.Error("a pending call's status page is not followed")
	}
	if n := page.doc.Find("form, button[type=submit], nav").Length(); n != 0 {
		t.Errorf("the status page has %d forms, submit buttons or navigation", n)
	}
	page.doc.Find("a[href]").Each(func(_ int, a *goquery.Selection) {
		if href, _ := a.Attr("href"); href != e.url+"/calls/"+c.ID {
			t.Errorf("the status page links to %s", href)
		}
	})
	if page.header.Get("Cache-Control") != "no-store" || page.header.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("headers: Cache-Control %q, Referrer-Policy %q", page.header.Get("Cache-Control"), page.header.Get("Referrer-Policy"))
	}

	// The arguments read exactly as on the call page an operator sees.
	op := e.browser()
	op.login("alice", "pw-alice-correct horse")
	callPage := op.get("/calls/" + c.ID)
	got, _ := args.Html()
	want, _ := callPage.find("args").Html()
	if got != want {
		t.Errorf("the status page's arguments differ from the call page's:\n%s\nwant\n%s", got, want)
	}

	// Approved: the state follows, the grant never shows.
	approved, err := q.ApproveWith(context.Background(), queue.ApproveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: c.ID,
		Digest: c.Digest, AcceptWarnings: true, Presented: q.Present(present.PageCall, "alice", c)})
	if err != nil {
		t.Fatal(err)
	}
	page = anon.get(link)
	if page.find("status-value").Text() != "approved" || strings.Contains(page.body, approved.Grant) {
		t.Errorf("after the approval: status %q, grant shown %v", page.find("status-value").Text(), strings.Contains(page.body, approved.Grant))
	}
	if got := strings.TrimSpace(page.find("approval-by").Text()); page.find("approval").Length() != 1 || got != "alice" {
		t.Errorf("approvals shown %d, by %q; want alice's, as the agent's API names her", page.find("approval").Length(), got)
	}
	if !strings.Contains(page.body, `name="countersign-follow"`) {
		t.Error("an approved call's status page is not followed")
	}
}

// TestStatusPageDenied: a denied call's page shows who denied it and why,
// revealed, and is no longer followed.
func TestStatusPageDenied(t *testing.T) {
	e, q, c := statusConsole(t)
	e.addUser("alice", account.RoleOperator, "pw-alice-correct horse")
	if _, err := q.Deny(context.Background(), "alice", audit.ChannelWeb, c.ID, "not to that account\u202e"); err != nil {
		t.Fatal(err)
	}
	page := e.browser().get(e.c.links.Path(c.ID))
	if page.status != http.StatusOK || page.find("status-value").Text() != "denied" {
		t.Fatalf("denied call: %d %q", page.status, page.find("status-value").Text())
	}
	if got := page.find("deny-reason-shown").Text(); !strings.Contains(got, "not to that account[U+202E]") {
		t.Errorf("reason %q", got)
	}
	if strings.Contains(page.body, `name="countersign-follow"`) || page.find("status-decide-where").Length() != 0 {
		t.Error("a denied call's page is still followed or says where to decide it")
	}
}

// TestStatusPageWrongToken: only the call's own token opens its page; a
// wrong, truncated or another call's token, and an unknown call, are the
// same 404 with nothing of any call on it.
func TestStatusPageWrongToken(t *testing.T) {
	e, q, c := statusConsole(t)
	other := submitNote(t, q, "another note", "acct:7")
	good := e.c.links.Path(c.ID)
	token := good[strings.LastIndexByte(good, '/')+1:]
	otherToken := e.c.links.Path(other.ID)[strings.LastIndexByte(e.c.links.Path(other.ID), '/')+1:]
	flipped := []byte(token)
	flipped[0] ^= 1
	b := e.browser()
	for name, path := range map[string]string{
		"another call's token":    "/status/" + c.ID + "/" + otherToken,
		"a token with a bit off":  "/status/" + c.ID + "/" + string(flipped),
		"a truncated token":       "/status/" + c.ID + "/" + token[:len(token)-1],
		"an empty token":          "/status/" + c.ID + "/",
		"the call id as token":    "/status/" + c.ID + "/" + c.ID,
		"an unknown call":         "/status/call_nope/" + token,
		"no token":                "/status/" + c.ID,
		"the token in upper case": "/status/" + c.ID + "/" + strings.ToUpper(token),
	} {
		t.Run(name, func(t *testing.T) {
			page := b.get(path)
			if page.status != http.StatusNotFound {
				t.Fatalf("%s: %d, want 404", path, page.status)
			}
			if strings.Contains(page.body, c.Digest) || strings.Contains(page.body, "acct:42") || strings.Contains(page.body, other.Digest) {
				t.Fatalf("%s: the 404 shows the call", path)
			}
		})
	}
	if page := b.get(good); page.status != http.StatusOK {
		t.Fatalf("the good link: %d", page.status)
	}
	if page := b.get(e.c.links.Path(other.ID)); page.status != http.StatusOK {
		t.Fatalf("the other call's own link: %d", page.status)
	}
}

// TestStatusLinksAreStableAndSecret: a link is the same on every start of
// the console over the same database (the key is kept there), is not the
// link of another console, and its token is left out of the access log.
func TestStatusLinksAreStableAndSecret(t *testing.T) {
	e, _, c := statusConsole(t)
	again, err := NewStatusLinks(context.Background(), e.c.accounts, e.url)
	if err != nil {
		t.Fatal(err)
	}
	if again.URL(c.ID) != e.url+e.c.links.Path(c.ID) {
		t.Fatalf("the link changed: %s, was %s", again.URL(c.ID), e.c.links.Path(c.ID))
	}
	elsewhere, _, _ := statusConsole(t)
	if elsewhere.c.links.Path(c.ID) == e.c.links.Path(c.ID) {
		t.Fatal("two consoles make the same link for one call id")
	}
	if got := redactStatusPath(e.c.links.Path(c.ID)); got != "/status/"+url.PathEscape(c.ID)+"/…" {
		t.Fatalf("logged as %s", got)
	}
}

// lockedLog is a log destination that tests read while the server writes.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStatusTokenNotInTheErrorLog: a status page that fails (500) is logged
// without its token, as the access log leaves it out: the token is a
// credential to the page. The access log records the status the client
// got (it recorded 200 for every error a handler returned).
func TestStatusTokenNotInTheErrorLog(t *testing.T) {
	logs := &lockedLog{}
	e := newConsoleEnvWith(t, func(cfg *envConfig) { cfg.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	c := e.submit("agent:janitor", "files-host", conFilesBody)
	path := e.c.links.Path(c.ID)
	token := path[strings.LastIndexByte(path, '/')+1:]
	// The page cannot read the call.
	if _, err := e.db.SQL().Exec(`ALTER TABLE calls RENAME TO calls_away`); err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(e.url + path)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if _, err := e.db.SQL().Exec(`ALTER TABLE calls_away RENAME TO calls`); err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusInternalServerError {
		t.Fatalf("status page without its table = %d, want 500", res.StatusCode)
	}
	if !strings.Contains(logs.String(), "request failed") {
		t.Fatalf("the failure was not logged:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "msg=request method=GET path=/status/"+c.ID+"/… status=500") {
		t.Errorf("the access log does not record the 500:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), token) {
		t.Errorf("the log holds the status page's token:\n%s", logs.String())
	}
}

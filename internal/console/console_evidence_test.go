package console

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/evidence"
	"github.com/countersign/countersign/internal/queue"
)

// packSource is the test database as an evidence pack's source.
type packSource struct{ *db.DB }

func (s packSource) Call(ctx context.Context, id string) (*queue.Call, error) {
	return s.Store().Call(ctx, id)
}

// TestAdminEvidencePack: the admin page offers an evidence pack of a
// period; the download is a pack that verifies against the console's
// audit key; a period without entries, or a day that is not one, says what
// to do; only an admin may make one.
func TestAdminEvidencePack(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(nil)
	signer := audit.NewSigner(priv)
	e := newConsoleEnvWith(t, func(ec *envConfig) {
		d := ec.Config.Audit.(*db.DB)
		ec.AuditSigner = signer
		ec.Console.EvidencePack = func(ctx context.Context, w io.Writer, since, until time.Time, tool, actor string) error {
			_, err := evidence.Write(ctx, w, packSource{d}, evidence.Options{Since: since, Until: until, Tool: tool, Actor: actor,
				Signer: signer, GrantKeys: []byte(`{"keys":[]}` + "\n"), Now: time.Now()})
			return err
		}
	})
	e.addUser("root", account.RoleAdmin, "pw-root-1")
	e.addUser("ann", account.RoleOperator, "pw-ann-1")
	c := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	if _, err := e.q.Approve(context.Background(), "ann", audit.ChannelCLI, c.ID, c.Digest); err != nil {
		t.Fatal(err)
	}
	admin := e.browser()
	admin.login("root", "pw-root-1")
	page := admin.get("/admin")
	if page.find("evidence-pack-form").Length() != 1 {
		t.Fatalf("the admin page has no evidence pack form:\n%s", page.body)
	}
	day := e.clock.Now().UTC().Format(time.DateOnly)
	form := url.Values{"csrf": {admin.csrf()}, "since": {day}, "until": {day}}
	req, _ := http.NewRequest(http.MethodPost, e.url+"/admin/evidence-pack", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", e.url)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := admin.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-tar" ||
		!strings.Contains(resp.Header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("download = %d %q %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"), body)
	}
	rep, err := evidence.Verify(bytes.NewReader(body), int64(len(body)), evidence.Trust{Fingerprints: []string{evidence.Fingerprint(signer.PublicKey())}})
	if err != nil {
		t.Fatalf("the downloaded pack does not verify: %v", err)
	}
	if rep.Lineage != 1 {
		t.Errorf("the pack holds the lineage of %d calls, want 1", rep.Lineage)
	}

	old := admin.post("/admin/evidence-pack", url.Values{"csrf": {admin.csrf()}, "since": {"2001-01-01"}, "until": {"2001-01-31"}})
	if old.status != http.StatusNotFound || !strings.Contains(old.find("admin-error").Text(), "choose another period") {
		t.Errorf("an empty period = %d %q", old.status, old.find("admin-error").Text())
	}
	bad := admin.post("/admin/evidence-pack", url.Values{"csrf": {admin.csrf()}, "since": {"last month"}, "until": {day}})
	if bad.status != http.StatusBadRequest || !strings.Contains(bad.find("admin-error").Text(), "YYYY-MM-DD") {
		t.Errorf("a day that is not one = %d %q", bad.status, bad.find("admin-error").Text())
	}
	op := e.browser()
	op.login("ann", "pw-ann-1")
	if p := op.post("/admin/evidence-pack", url.Values{"csrf": {op.csrf()}, "since": {day}, "until": {day}}); p.status != http.StatusForbidden {
		t.Errorf("an operator's evidence pack = %d, want 403", p.status)
	}
}

// One evidence pack is made at a time: while one is being made, the same
// admin and another are each told why and what to do, nothing else runs;
// the pack is spooled to a temporary file, removed once it is sent.
func TestEvidencePacksOneAtATime(t *testing.T) {
	spool := t.TempDir()
	t.Setenv("TMPDIR", spool)
	inside, release := make(chan struct{}, 8), make(chan struct{})
	e := newConsoleEnvWith(t, func(ec *envConfig) {
		ec.Console.EvidencePack = func(ctx context.Context, w io.Writer, since, until time.Time, tool, actor string) error {
			inside <- struct{}{}
			<-release
			_, err := w.Write([]byte("a pack"))
			return err
		}
	})
	e.addUser("root", account.RoleAdmin, "pw-root-1")
	e.addUser("rita", account.RoleAdmin, "pw-rita-1")
	root, rita := e.browser(), e.browser()
	root.login("root", "pw-root-1")
	rita.login("rita", "pw-rita-1")
	day := e.clock.Now().UTC().Format(time.DateOnly)
	ask := func(b *consoleBrowser) *htmlPage {
		return b.post("/admin/evidence-pack", url.Values{"csrf": {b.csrf()}, "since": {day}, "until": {day}})
	}
	first := make(chan *htmlPage, 1)
	go func() { first <- ask(root) }()
	<-inside
	for _, tt := range []struct {
		who  *consoleBrowser
		want string
	}{{root, "still being made"}, {rita, "another administrator"}} {
		p := ask(tt.who)
		if p.status != http.StatusTooManyRequests || !strings.Contains(p.find("admin-error").Text(), tt.want) {
			t.Errorf("a pack while one is made = %d %q, want 429 saying %q", p.status, p.find("admin-error").Text(), tt.want)
		}
	}
	if len(inside) != 0 {
		t.Errorf("%d more packs were started while one was being made", len(inside))
	}
	if files, _ := os.ReadDir(spool); len(files) != 1 {
		t.Errorf("the pack being made is spooled to %d files in TMPDIR, want 1", len(files))
	}
	close(release)
	if p := <-first; p.status != http.StatusOK || p.body != "a pack" {
		t.Errorf("the first pack = %d %q", p.status, p.body)
	}
	if files, _ := os.ReadDir(spool); len(files) != 0 {
		t.Errorf("the sent pack's spool is left in TMPDIR: %v", files)
	}
	if p := ask(rita); p.status != http.StatusOK {
		t.Errorf("a pack after the first was sent = %d", p.status)
	}
}

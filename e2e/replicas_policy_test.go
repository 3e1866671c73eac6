package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/pgtest"
)

// webSession is a person's logged-in browser session, usable on every
// replica: sessions live in the database.
type webSession struct {
	t  *testing.T
	hc *http.Client
}

func newWebSession(t *testing.T, base, name string) *webSession {
	t.Helper()
	jar := webLogin(t, base, name)
	return &webSession{t: t, hc: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// get fetches a page from base and returns its status and body.
func (w *webSession) get(base, path string) (int, string) {
	w.t.Helper()
	res, err := w.hc.Get(base + path)
	if err != nil {
		w.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// post sends a form to base with the session's CSRF token, read from the
// page at from.
func (w *webSession) post(base, from, path string, form url.Values) (int, string) {
	w.t.Helper()
	_, page := w.get(base, from)
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		w.t.Fatalf("no CSRF token on %s%s", base, from)
	}
	form.Set("csrf", m[1])
	req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	res, err := w.hc.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// addAdmin adds an admin account on the shared database.
func (r *replicas) addAdmin(name string) {
	r.t.Helper()
	if _, code := runConsole(r.t, "pw-"+name+"-correct horse battery staple\n", "user", "add", name, "--role", "admin",
		"--password-stdin", "--data", r.data[0], "--db", r.db); code != 0 {
		r.t.Fatalf("user add %s exited %d", name, code)
	}
}

// auditEntries exports the shared audit trail.
func (r *replicas) auditEntries() []map[string]any {
	r.t.Helper()
	out, code := runConsole(r.t, "", "audit", "export", "--data", r.data[0], "--db", r.db, "--format", "jsonl")
	if code != 0 {
		r.t.Fatalf("audit export exited %d", code)
	}
	var entries []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			r.t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if _, ok := e["kind"]; ok {
			entries = append(entries, e)
		}
	}
	return entries
}

// freezeCLI runs console freeze (or unfreeze) against the shared database
// from replica i's data directory.
func (r *replicas) freezeCLI(i int, args ...string) {
	r.t.Helper()
	if _, code := runConsole(r.t, "", append(append([]string{}, args...), "--data", r.data[i], "--db", r.db)...); code != 0 {
		r.t.Fatalf("console %v exited %d", args, code)
	}
}

// approvedGrant submits a refund on replica sub, approves it on replica
// dec's control socket, and returns the call and its grant.
func (r *replicas) approvedGrant(agents []*rawAgent, sub, dec, invoice int) (call, id, grant string) {
	r.t.Helper()
	ctx := context.Background()
	call = fmt.Sprintf(replicaRefund, invoice)
	s, err := agents[sub].submit(ctx, call)
	if err != nil || s.status != http.StatusCreated {
		r.t.Fatalf("submit: %d %s %v", s.status, s.raw, err)
	}
	ar, err := controlApprove(ctx, r.data[dec], s.str("id"), "alice", s.str("digest"))
	if err != nil || ar.status != http.StatusOK {
		r.t.Fatalf("approve: %d %s %v", ar.status, ar.raw, err)
	}
	grant, _ = ar.body["call"].(map[string]any)["grant"].(string)
	return call, s.str("id"), grant
}

// TestReplicasFreeze: a freeze made on replica A, from the command line or
// the admin page, refuses approvals, submissions and redemptions on B and C
// as soon as it returns; lifted on another replica, the untouched grant
// redeems.
func TestReplicasFreeze(t *testing.T) {
	requirePostgres(t)
	r := startReplicas(t, pgtest.Database(t), 3)
	r.addAdmin("root")
	token := r.token("agent:billing-bot", "payments-host")
	var agents []*rawAgent
	for _, s := range r.srv {
		agents = append(agents, newRawAgent(s.url, token))
	}
	ctx := context.Background()
	grantBody, _, grant := r.approvedGrant(agents, 2, 0, 5000)
	alice := newWebSession(t, r.srv[2].url, "alice")
	root := newWebSession(t, r.srv[0].url, "root")

	// refusedEverywhere checks B and C right after a freeze returned.
	refusedEverywhere := func(how, reason string, invoice int) {
		t.Helper()
		p, err := agents[1].submit(ctx, fmt.Sprintf(replicaRefund, invoice))
		if err != nil || p.status != http.StatusServiceUnavailable || p.code() != "frozen" {
			t.Fatalf("%s: submission on B: %d %s %v", how, p.status, p.raw, err)
		}
		for i := 1; i < 3; i++ {
			red, err := agents[i].redeem(ctx, grant, grantBody)
			if err != nil || red.status != http.StatusServiceUnavailable || red.str("reason") != "frozen" || !strings.Contains(red.str("message"), reason) {
				t.Fatalf("%s: redemption on replica %d: %d %s %v", how, i, red.status, red.raw, err)
			}
		}
	}

	// A call made before the freeze, approved neither from B's control
	// socket nor from C's call page while frozen.
	sub, err := agents[0].submit(ctx, fmt.Sprintf(replicaRefund, 5001))
	if err != nil || sub.status != http.StatusCreated {
		t.Fatalf("submit: %d %s %v", sub.status, sub.raw, err)
	}
	pendingID, pendingDigest := sub.str("id"), sub.str("digest")
	approveRefused := func(how string) {
		t.Helper()
		ar, err := controlApprove(ctx, r.data[1], pendingID, "bob", pendingDigest)
		if err != nil || ar.status != http.StatusServiceUnavailable || ar.code() != "frozen" {
			t.Fatalf("%s: approval on B's control socket: %d %s %v", how, ar.status, ar.raw, err)
		}
		// The browser is shown the call again with the freeze as the reason.
		if st, page := alice.post(r.srv[2].url, "/calls/"+pendingID, "/calls/"+pendingID+"/approve",
			url.Values{"digest": {pendingDigest}}); st != http.StatusConflict || !strings.Contains(page, `data-code="frozen"`) {
			t.Fatalf("%s: approval on C's call page answered %d, want 409 re-showing the call with the freeze", how, st)
		}
		g, err := agents[2].do(ctx, http.MethodGet, "/api/v1/calls/"+pendingID, nil)
		if err != nil || g.str("status") != "pending" {
			t.Fatalf("%s: the call after refused approvals: %s %v", how, g.raw, err)
		}
		// Every page of every replica shows the banner.
		for i, s := range r.srv {
			if _, page := alice.get(s.url, "/"); !strings.Contains(page, "freeze-banner") {
				t.Errorf("%s: replica %d's queue page has no freeze banner", how, i)
			}
		}
	}

	// From the command line on A.
	r.freezeCLI(0, "freeze", "--tool", "payments.refund", "--reason", "drill from the shell", "--as", "root")
	refusedEverywhere("freeze from A's shell", "drill from the shell", 5002)
	approveRefused("freeze from A's shell")
	r.freezeCLI(0, "unfreeze", "--tool", "payments.refund", "--as", "root")

	// From the admin page on A.
	if st, page := root.post(r.srv[0].url, "/admin", "/admin/freeze", url.Values{"tool": {"payments.refund"}, "reason": {"drill from the page"}}); st != http.StatusOK {
		t.Fatalf("freeze on A's admin page: %d\n%s", st, page)
	}
	refusedEverywhere("freeze from A's admin page", "drill from the page", 5003)
	approveRefused("freeze from A's admin page")
	// Lifted on B's admin page: the grant nobody could redeem redeems on C.
	if st, page := root.post(r.srv[1].url, "/admin", "/admin/unfreeze", url.Values{"tool": {"payments.refund"}}); st != http.StatusOK {
		t.Fatalf("unfreeze on B's admin page: %d\n%s", st, page)
	}
	if red, err := agents[2].redeem(ctx, grant, grantBody); err != nil || red.status != http.StatusOK || red.str("decision") != "accepted" {
		t.Fatalf("redemption on C after the freeze was lifted: %d %s %v", red.status, red.raw, err)
	}
	if ar, err := controlApprove(ctx, r.data[1], pendingID, "bob", pendingDigest); err != nil || ar.status != http.StatusOK {
		t.Fatalf("approval on B after the freeze was lifted: %d %s %v", ar.status, ar.raw, err)
	}
	r.verify()
}

// TestReplicasFreezeRacesRedemption races a redemption on B or C against
// `console freeze` on A, many times: each redemption either committed
// before the freeze (its audit entry comes first) or is refused with 503
// frozen and consumed nothing; once the command returned, B and C refuse.
func TestReplicasFreezeRacesRedemption(t *testing.T) {
	requirePostgres(t)
	r := startReplicas(t, pgtest.Database(t), 3)
	r.addAdmin("root")
	token := r.token("agent:billing-bot", "payments-host")
	var agents []*rawAgent
	for _, s := range r.srv {
		agents = append(agents, newRawAgent(s.url, token))
	}
	ctx := context.Background()
	const rounds = 12
	accepted, refused := 0, 0
	for i := range rounds {
		redeemer, other := 1+i%2, 2-i%2
		call, id, grant := r.approvedGrant(agents, i%3, (i+1)%3, 6000+i)
		var wg sync.WaitGroup
		var red reply
		var redErr error
		// A delay spread over the time the command takes, so that the
		// redemption lands sometimes before the freeze and sometimes after.
		delay := time.Duration(rand.IntN(60)) * time.Millisecond
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(delay)
			red, redErr = agents[redeemer].redeem(ctx, grant, call)
		}()
		reason := fmt.Sprintf("replica drill %d", i)
		r.freezeCLI(0, "freeze", "--tool", "payments.refund", "--reason", reason, "--as", "root")
		// Once the command returned, the other replica refuses at once.
		after, err := agents[other].redeem(ctx, grant, call)
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if redErr != nil {
			t.Fatal(redErr)
		}
		switch {
		case red.status == http.StatusOK && red.str("decision") == "accepted":
			accepted++
			var redeemedSeq, frozenSeq float64
			for _, en := range r.auditEntries() {
				if en["kind"] == "redeemed" && en["call_id"] == id {
					redeemedSeq = en["seq"].(float64)
				}
				if d, _ := en["details"].(map[string]any); en["kind"] == "frozen" && d["reason"] == reason {
					frozenSeq = en["seq"].(float64)
				}
			}
			if redeemedSeq == 0 || frozenSeq == 0 || redeemedSeq > frozenSeq {
				t.Fatalf("round %d: accepted redemption at seq %v, freeze at %v", i, redeemedSeq, frozenSeq)
			}
			// The other replica's redemption after the freeze: refused
			// either way (frozen is checked after the call's status, so a
			// redeemed call reads as replayed).
			if after.status == http.StatusOK {
				t.Fatalf("round %d: a second redemption was accepted: %s", i, after.raw)
			}
		case red.status == http.StatusServiceUnavailable && red.str("reason") == "frozen":
			refused++
			if !strings.Contains(red.str("message"), reason) {
				t.Fatalf("round %d: refusal without the freeze's reason: %s", i, red.raw)
			}
			if after.status != http.StatusServiceUnavailable || after.str("reason") != "frozen" {
				t.Fatalf("round %d: redemption on replica %d after the freeze returned: %d %s", i, other, after.status, after.raw)
			}
		default:
			t.Fatalf("round %d: redemption %d %s; want accepted or 503 frozen", i, red.status, red.raw)
		}
		r.freezeCLI(2, "unfreeze", "--tool", "payments.refund", "--as", "root")
		if red.str("reason") == "frozen" {
			// Nothing was consumed: lifted, the grant redeems.
			again, _ := agents[other].redeem(ctx, grant, call)
			if again.status != http.StatusOK {
				t.Fatalf("round %d: redemption after unfreeze: %d %s", i, again.status, again.raw)
			}
		}
	}
	t.Logf("%d rounds: %d redemptions committed before the freeze, %d refused by it", rounds, accepted, refused)
	r.verify()
}

// otherRefundTools writes a copy of the example tools file where
// payments.refund allows a smaller maximum: another definition of the
// same tool.
func otherRefundTools(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(toolsFile(t))
	if err != nil {
		t.Fatal(err)
	}
	const from = "maximum: 5000000"
	if !strings.Contains(string(b), from) {
		t.Fatalf("the example tools file has no %q to change", from)
	}
	p := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), from, "maximum: 4000000", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReplicasToolDefinitionsDiffer: replicas A and C run the example tools
// file, B one where payments.refund is defined differently. A call made on
// A is refused on B (approval and redemption, tool_changed) and its call
// page on B says why; a call made on B is refused on A. The replicas with
// the call's definition decide and redeem it.
func TestReplicasToolDefinitionsDiffer(t *testing.T) {
	requirePostgres(t)
	other := otherRefundTools(t)
	r := startReplicasWith(t, pgtest.Database(t), 3, func(i int) string {
		if i == 1 {
			return other
		}
		return ""
	})
	token := r.token("agent:billing-bot", "payments-host")
	var agents []*rawAgent
	for _, s := range r.srv {
		agents = append(agents, newRawAgent(s.url, token))
	}
	ctx := context.Background()
	alice := newWebSession(t, r.srv[0].url, "alice")

	call := fmt.Sprintf(replicaRefund, 7000)
	sub, err := agents[0].submit(ctx, call)
	if err != nil || sub.status != http.StatusCreated {
		t.Fatalf("submit on A: %d %s %v", sub.status, sub.raw, err)
	}
	id, digest := sub.str("id"), sub.str("digest")
	// B refuses to approve it, from its control socket and its page.
	if ar, err := controlApprove(ctx, r.data[1], id, "bob", digest); err != nil || ar.status != http.StatusConflict || ar.code() != "tool_changed" {
		t.Fatalf("approval on B's control socket: %d %s %v", ar.status, ar.raw, err)
	}
	st, page := alice.get(r.srv[1].url, "/calls/"+id)
	if st != http.StatusOK || !strings.Contains(page, `data-testid="tool-changed"`) || strings.Contains(page, `data-testid="approve-form"`) {
		t.Fatalf("B's call page: %d, tool-changed notice %v, approve form %v", st,
			strings.Contains(page, `data-testid="tool-changed"`), strings.Contains(page, `data-testid="approve-form"`))
	}
	if !strings.Contains(page, "console replicas run different tools files") || !strings.Contains(page, "this console&#39;s is") {
		t.Errorf("B's call page does not say why:\n%s", page)
	}
	if st, _ := alice.post(r.srv[1].url, "/calls/"+id, "/calls/"+id+"/approve", url.Values{"digest": {digest}}); st != http.StatusConflict {
		t.Errorf("approval on B's call page answered %d, want 409", st)
	}
	// A's page offers the approval; C, with A's file, approves it.
	if _, page := alice.get(r.srv[0].url, "/calls/"+id); strings.Contains(page, `data-testid="tool-changed"`) || !strings.Contains(page, `data-testid="approve-form"`) {
		t.Fatalf("A's call page: tool-changed %v, approve form %v", strings.Contains(page, `data-testid="tool-changed"`), strings.Contains(page, `data-testid="approve-form"`))
	}
	ar, err := controlApprove(ctx, r.data[2], id, "bob", digest)
	if err != nil || ar.status != http.StatusOK {
		t.Fatalf("approval on C: %d %s %v", ar.status, ar.raw, err)
	}
	grant, _ := ar.body["call"].(map[string]any)["grant"].(string)
	// B refuses to redeem it, consuming nothing; A redeems it.
	red, err := agents[1].redeem(ctx, grant, call)
	if err != nil || red.status != http.StatusForbidden || red.str("reason") != "tool_changed" {
		t.Fatalf("redemption on B: %d %s %v", red.status, red.raw, err)
	}
	if red, err := agents[0].redeem(ctx, grant, call); err != nil || red.status != http.StatusOK || red.str("decision") != "accepted" {
		t.Fatalf("redemption on A after B refused: %d %s %v", red.status, red.raw, err)
	}

	// The other way round: made on B, refused on A and C.
	call2 := fmt.Sprintf(replicaRefund, 7001)
	sub2, err := agents[1].submit(ctx, call2)
	if err != nil || sub2.status != http.StatusCreated {
		t.Fatalf("submit on B: %d %s %v", sub2.status, sub2.raw, err)
	}
	for _, i := range []int{0, 2} {
		if ar, err := controlApprove(ctx, r.data[i], sub2.str("id"), "bob", sub2.str("digest")); err != nil || ar.status != http.StatusConflict || ar.code() != "tool_changed" {
			t.Fatalf("approval on replica %d of B's call: %d %s %v", i, ar.status, ar.raw, err)
		}
	}
	if ar, err := controlApprove(ctx, r.data[1], sub2.str("id"), "bob", sub2.str("digest")); err != nil || ar.status != http.StatusOK {
		t.Fatalf("approval on B of its own call: %d %s %v", ar.status, ar.raw, err)
	}

	// Each replica recorded the tools file it runs.
	digests := map[string]bool{}
	for _, en := range r.auditEntries() {
		if d, _ := en["details"].(map[string]any); en["kind"] == "tools_loaded" {
			digests[d["tools_digest"].(string)] = true
		}
	}
	if len(digests) != 2 {
		t.Errorf("tools_loaded entries name %d tools files, want 2", len(digests))
	}
	r.verify()
}

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/countersign/countersign/internal/pgtest"
)

// replicas are console servers sharing one PostgreSQL database, each with
// its own data directory (its keys), and a trust file listing them all.
type replicas struct {
	t     *testing.T
	db    string
	data  []string
	trust string
	srv   []*server
	tools map[string]string // a data directory's tools file, when not the example's
	extra []string          // more serve flags for every replica
}

func startReplicas(t *testing.T, db string, n int) *replicas {
	t.Helper()
	return startReplicasWith(t, db, n, nil)
}

// startReplicasWith is startReplicas where replica i runs the tools file
// tools(i) ("" for the example's; tools may be nil), each with the serve
// flags extra.
func startReplicasWith(t *testing.T, db string, n int, tools func(i int) string, extra ...string) *replicas {
	t.Helper()
	r := &replicas{t: t, db: db, tools: map[string]string{}, extra: extra}
	parts := t.TempDir()
	var files []string
	for i := 0; i < n; i++ {
		d := t.TempDir()
		r.data = append(r.data, d)
		if tools != nil && tools(i) != "" {
			r.tools[d] = tools(i)
		}
		if _, code := runConsole(t, "", "keys", "init", "--data", d); code != 0 {
			t.Fatalf("keys init exited %d", code)
		}
		out, code := runConsole(t, "", "keys", "jwks", "--data", d)
		if code != 0 {
			t.Fatalf("keys jwks exited %d", code)
		}
		f := filepath.Join(parts, fmt.Sprintf("%d.json", i))
		if err := os.WriteFile(f, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	out, code := runConsole(t, "", append([]string{"keys", "trust"}, files...)...)
	if code != 0 {
		t.Fatalf("keys trust exited %d", code)
	}
	r.trust = filepath.Join(parts, "trusted-keys.json")
	if err := os.WriteFile(r.trust, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"alice", "bob", "op0", "op1", "op2", "op3"} {
		if _, code := runConsole(t, "pw-"+name+"-correct horse battery staple\n", "user", "add", name, "--role", "operator",
			"--password-stdin", "--data", r.data[0], "--db", db); code != 0 {
			t.Fatalf("user add %s exited %d", name, code)
		}
	}
	for _, d := range r.data {
		r.srv = append(r.srv, r.start(d))
	}
	return r
}

func (r *replicas) start(data string) *server {
	args := append([]string{"--db", r.db, "--trusted-keys", r.trust}, r.extra...)
	if f := r.tools[data]; f != "" {
		args = append(args, "--tools", f) // the last --tools wins
	}
	return startServer(r.t, data, args...)
}

func (r *replicas) token(actor, audience string) string {
	r.t.Helper()
	out, code := runConsole(r.t, "", "token", "create", "--data", r.data[0], "--db", r.db, "--actor", actor, "--audience", audience)
	if code != 0 {
		r.t.Fatalf("token create exited %d", code)
	}
	return strings.TrimSpace(out)
}

// verify runs console audit verify on the shared database with the trust
// file, from the first replica's data directory.
func (r *replicas) verify() string {
	r.t.Helper()
	out, code := runConsole(r.t, "", "audit", "verify", "--data", r.data[0], "--db", r.db, "--trusted-keys", r.trust)
	if code != 0 {
		r.t.Fatalf("audit verify exited %d:\n%s", code, out)
	}
	return out
}

func requirePostgres(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: several console replicas on PostgreSQL")
	}
}

const replicaRefund = `{"tool":"payments.refund","target":"invoice:INV-%d","args":{"amount_minor":1299,"currency":"EUR","reason_code":"duplicate"}}`

// TestReplicasWholeLoop submits on one replica, long-polls on a second,
// approves on the third, redeems on the first and replays on the second.
func TestReplicasWholeLoop(t *testing.T) {
	requirePostgres(t)
	r := startReplicas(t, pgtest.Database(t), 3)
	token := r.token("agent:billing-bot", "payments-host")
	a, b, c := newRawAgent(r.srv[0].url, token), newRawAgent(r.srv[1].url, token), newRawAgent(r.srv[2].url, token)
	ctx := context.Background()

	call := fmt.Sprintf(replicaRefund, 1042)
	sub, err := a.submit(ctx, call)
	if err != nil || sub.status != http.StatusCreated {
		t.Fatalf("submit on A: %d %s %v", sub.status, sub.raw, err)
	}
	id, digest := sub.str("id"), sub.str("digest")
	waited := make(chan reply, 1)
	go func() {
		w, err := b.do(ctx, http.MethodGet, "/api/v1/calls/"+id+"?wait=45s", nil)
		if err != nil {
			t.Error(err)
		}
		waited <- w
	}()
	eventually(t, 30*time.Second, "B's long-poll", func() bool { return openWaiters(r.srv[1].url) >= 1 })
	if ar, err := controlApprove(ctx, r.data[2], id, "alice", digest); err != nil || ar.status != http.StatusOK {
		t.Fatalf("approve on C: %d %s %v", ar.status, ar.raw, err)
	}
	var w reply
	select {
	case w = <-waited:
	case <-time.After(40 * time.Second):
		t.Fatal("B's long-poll did not return after C approved")
	}
	if w.str("status") != "approved" || w.str("grant") == "" {
		t.Fatalf("B's long-poll: %s", w.raw)
	}
	grant := w.str("grant")
	var hdr struct {
		KID string `json:"kid"`
	}
	if h, err := decodeSegment(strings.Split(grant, ".")[0]); err != nil || json.Unmarshal(h, &hdr) != nil {
		t.Fatalf("grant header: %v", err)
	}
	// Every replica lists the key C signed with.
	for i, s := range []*rawAgent{a, b, c} {
		k, err := s.do(ctx, http.MethodGet, "/api/v1/keys", nil)
		if err != nil || !strings.Contains(string(k.raw), hdr.KID) {
			t.Fatalf("replica %d's /api/v1/keys lacks %s: %s", i, hdr.KID, k.raw)
		}
	}
	if rr, err := a.redeem(ctx, grant, call); err != nil || rr.status != http.StatusOK || rr.str("decision") != "accepted" {
		t.Fatalf("redeem on A of C's grant: %d %s %v", rr.status, rr.raw, err)
	}
	if rr, err := b.redeem(ctx, grant, call); err != nil || rr.status != http.StatusConflict || rr.str("reason") != "replayed" {
		t.Fatalf("redeem again on B: %d %s %v", rr.status, rr.raw, err)
	}
	if o, err := c.do(ctx, http.MethodPost, "/api/v1/calls/"+id+"/outcome", []byte(`{"status":"succeeded"}`)); err != nil || o.status != http.StatusOK {
		t.Fatalf("outcome on C: %d %s %v", o.status, o.raw, err)
	}
	for i, s := range []*rawAgent{a, b, c} {
		g, err := s.do(ctx, http.MethodGet, "/api/v1/calls/"+id, nil)
		if err != nil || g.str("status") != "redeemed" {
			t.Fatalf("replica %d reads %s", i, g.raw)
		}
		h, err := s.do(ctx, http.MethodGet, "/healthz", nil)
		if err != nil || h.status != http.StatusOK {
			t.Fatalf("replica %d /healthz: %d %s", i, h.status, h.raw)
		}
	}
	r.verify()
}

// Test64RedemptionsAcrossReplicas races 64 redemptions of one grant spread
// over three replicas, several rounds: exactly one is accepted every time.
func Test64RedemptionsAcrossReplicas(t *testing.T) {
	requirePostgres(t)
	r := startReplicas(t, pgtest.Database(t), 3)
	token := r.token("agent:billing-bot", "payments-host")
	var agents []*rawAgent
	for _, s := range r.srv {
		agents = append(agents, newRawAgent(s.url, token))
	}
	ctx := context.Background()
	for round := 0; round < 5; round++ {
		call := fmt.Sprintf(replicaRefund, 2000+round)
		sub, err := agents[round%3].submit(ctx, call)
		if err != nil || sub.status != http.StatusCreated {
			t.Fatalf("submit: %d %s %v", sub.status, sub.raw, err)
		}
		ar, err := controlApprove(ctx, r.data[(round+1)%3], sub.str("id"), "alice", sub.str("digest"))
		if err != nil || ar.status != http.StatusOK {
			t.Fatalf("approve: %d %s %v", ar.status, ar.raw, err)
		}
		grant, _ := ar.body["call"].(map[string]any)["grant"].(string)
		var accepted, replayed atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := 0; i < 64; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				rr, err := agents[i%3].redeem(ctx, grant, call)
				switch {
				case err != nil:
					t.Errorf("redeem: %v", err)
				case rr.status == http.StatusOK:
					accepted.Add(1)
				case rr.status == http.StatusConflict && rr.str("reason") == "replayed":
					replayed.Add(1)
				default:
					t.Errorf("redeem: %d %s", rr.status, rr.raw)
				}
			}()
		}
		close(start)
		wg.Wait()
		if accepted.Load() != 1 || replayed.Load() != 63 {
			t.Fatalf("round %d: %d accepted, %d replayed; want 1 and 63", round, accepted.Load(), replayed.Load())
		}
	}
	r.verify()
}

// checkLedger reads every acknowledged change back through replica s.
func checkLedger(t *testing.T, a *rawAgent, l *ledger) {
	t.Helper()
	ctx := context.Background()
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.submitted {
		g, err := a.do(ctx, http.MethodGet, "/api/v1/calls/"+id, nil)
		if err != nil || g.status != http.StatusOK {
			t.Errorf("acknowledged call %s: %d %v", id, g.status, err)
			continue
		}
		st := g.str("status")
		if _, ok := l.approved[id]; ok && st != "approved" && st != "redeemed" {
			t.Errorf("acknowledged approval of %s: status %s", id, st)
		}
		if n := l.accepted[id]; n > 1 {
			t.Errorf("call %s accepted %d times", id, n)
		} else if n == 1 && st != "redeemed" {
			t.Errorf("acknowledged redemption of %s: status %s", id, st)
		}
	}
}

// TestReplicaKilledUnderLoad kills one of three replicas with SIGKILL in
// the middle of mixed load on all three: the other two keep serving, and
// nothing any of them acknowledged is lost.
func TestReplicaKilledUnderLoad(t *testing.T) {
	requirePostgres(t)
	r := startReplicas(t, pgtest.Database(t), 3)
	token := r.token("agent:weather", "weather-host")
	l := newLedger()
	var seq atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var afterKill atomic.Int64
	var killed atomic.Bool
	for i, s := range r.srv {
		a := newRawAgent(s.url, token)
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mixedLoad(ctx, a, r.data[i], l, (i*2+w)%4, &seq)
			}()
		}
		if i != 1 {
			wg.Add(1)
			go func() { // counts what the survivors serve once B is dead
				defer wg.Done()
				for ctx.Err() == nil {
					if killed.Load() {
						if h, err := a.do(ctx, http.MethodGet, "/healthz", nil); err == nil && h.status == http.StatusOK {
							afterKill.Add(1)
						}
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
		}
	}
	time.Sleep(time.Duration(1000+rand.IntN(1500)) * time.Millisecond)
	r.srv[1].kill()
	killed.Store(true)
	before := len(l.snapshot())
	// The survivors keep serving: wait until they have, however slow the
	// machine (a fixed while could end before they answer anything).
	eventually(t, 60*time.Second, "health answers and acknowledged calls from the survivors after the kill", func() bool {
		return afterKill.Load() > 0 && len(l.snapshot()) > before
	})
	cancel()
	wg.Wait()
	t.Logf("acknowledged: %d calls (%d before the kill), %d approvals, %d redemptions; %d health answers after the kill",
		len(l.snapshot()), before, len(l.approved), len(l.accepted), afterKill.Load())
	checkLedger(t, newRawAgent(r.srv[0].url, token), l)
	// The killed replica comes back on the same data directory.
	r.srv[1] = r.start(r.data[1])
	checkLedger(t, newRawAgent(r.srv[1].url, token), l)
	r.verify()
}

// TestPostgresRestartUnderLoad restarts PostgreSQL under mixed load on
// three replicas: they reconnect, their listeners catch up, and the chain
// verifies.
func TestPostgresRestartUnderLoad(t *testing.T) {
	requirePostgres(t)
	cl := pgtest.Start(t)
	r := startReplicas(t, cl.Database(t), 3)
	token := r.token("agent:weather", "weather-host")
	l := newLedger()
	var seq atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, s := range r.srv {
		a := newRawAgent(s.url, token)
		wg.Add(1)
		go func() { defer wg.Done(); mixedLoad(ctx, a, r.data[i], l, i, &seq) }()
	}
	// PostgreSQL stops under load: once every replica has acknowledged calls.
	eventually(t, 60*time.Second, "calls acknowledged by the replicas before PostgreSQL stops", func() bool { return len(l.snapshot()) >= 3*len(r.srv) })
	if err := cl.Stop("immediate"); err != nil {
		t.Fatal(err)
	}
	// While it is down, every replica says so.
	for i, s := range r.srv {
		h, err := newRawAgent(s.url, "").do(context.Background(), http.MethodGet, "/healthz", nil)
		if err != nil || h.status != http.StatusServiceUnavailable {
			t.Errorf("replica %d /healthz with PostgreSQL down: %d %s %v", i, h.status, h.raw, err)
		}
	}
	time.Sleep(time.Second)
	if err := cl.Start(); err != nil {
		t.Fatal(err)
	}
	before := len(l.snapshot())
	deadline := time.Now().Add(30 * time.Second)
	for i, s := range r.srv {
		for {
			h, err := newRawAgent(s.url, "").do(context.Background(), http.MethodGet, "/healthz", nil)
			if err == nil && h.status == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %d did not recover after PostgreSQL restarted: %d %s %v", i, h.status, h.raw, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	eventually(t, 60*time.Second, "calls acknowledged after PostgreSQL came back", func() bool { return len(l.snapshot()) > before })
	cancel()
	wg.Wait()
	t.Logf("acknowledged: %d calls (%d before PostgreSQL came back), %d approvals, %d redemptions",
		len(l.snapshot()), before, len(l.approved), len(l.accepted))
	// The listeners work again: a call approved on C wakes a long-poll on B.
	a, b := newRawAgent(r.srv[0].url, token), newRawAgent(r.srv[1].url, token)
	sub, err := a.submit(context.Background(), `{"tool":"weather.search","target":"weather:forecast","args":{"city":"After"}}`)
	if err != nil || sub.status != http.StatusCreated {
		t.Fatalf("submit after the restart: %d %s %v", sub.status, sub.raw, err)
	}
	waited := make(chan reply, 1)
	go func() {
		w, _ := b.do(context.Background(), http.MethodGet, "/api/v1/calls/"+sub.str("id")+"?wait=30s", nil)
		waited <- w
	}()
	eventually(t, 30*time.Second, "B's long-poll", func() bool { return openWaiters(r.srv[1].url) >= 1 })
	if ar, err := controlApprove(context.Background(), r.data[2], sub.str("id"), "op1", sub.str("digest")); err != nil || ar.status != http.StatusOK {
		t.Fatalf("approve after the restart: %d %s %v", ar.status, ar.raw, err)
	}
	select {
	case w := <-waited:
		if w.str("status") != "approved" {
			t.Fatalf("B's long-poll after the restart: %s", w.raw)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("B's long-poll did not wake after the restart")
	}
	checkLedger(t, a, l)
	r.verify()
}

// snapshot copies the ids of the acknowledged submissions.
func (l *ledger) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.submitted))
	for id := range l.submitted {
		out = append(out, id)
	}
	return out
}

func decodeSegment(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// webLogin logs an operator in on base through the login form and returns
// the cookie jar of the session.
func webLogin(t *testing.T, base, name string) *cookiejar.Jar {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := hc.Get(base + "/login")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	m := csrfField.FindSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the login page:\n%s", page)
	}
	form := url.Values{"csrf": {string(m[1])}, "name": {name}, "password": {"pw-" + name + "-correct horse battery staple"}}
	req, _ := http.NewRequest(http.MethodPost, base+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	res, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("login on %s answered %d", base, res.StatusCode)
	}
	return jar
}

// TestReplicasLivePages opens an operator's queue socket on one replica and
// sees calls submitted and decided on the others appear and leave it.
func TestReplicasLivePages(t *testing.T) {
	requirePostgres(t)
	r := startReplicas(t, pgtest.Database(t), 3)
	token := r.token("agent:billing-bot", "payments-host")
	// The session is made on A and used on B: sessions live in the database.
	jar := webLogin(t, r.srv[0].url, "bob")
	b, _ := url.Parse(r.srv[1].url)
	h := http.Header{}
	h.Set("Origin", r.srv[1].url)
	for _, c := range jar.Cookies(b) {
		h.Add("Cookie", c.Name+"="+c.Value)
	}
	conn, _, err := websocket.DefaultDialer.Dial("ws://"+b.Host+"/ws", h)
	if err != nil {
		t.Fatalf("queue socket on B with A's session: %v", err)
	}
	defer conn.Close()
	msgs := make(chan string, 100)
	go func() {
		defer close(msgs)
		for {
			_, m, err := conn.ReadMessage()
			if err != nil {
				return
			}
			msgs <- string(m)
		}
	}()
	await := func(what string, ok func(string) bool) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case m, open := <-msgs:
				if !open {
					t.Fatalf("B's socket closed before %s", what)
				}
				if ok(m) {
					return
				}
			case <-deadline:
				t.Fatalf("B's page never showed %s", what)
			}
		}
	}
	ctx := context.Background()
	sub, err := newRawAgent(r.srv[0].url, token).submit(ctx, fmt.Sprintf(replicaRefund, 77))
	if err != nil || sub.status != http.StatusCreated {
		t.Fatalf("submit on A: %d %s %v", sub.status, sub.raw, err)
	}
	id := sub.str("id")
	await("the card of the call submitted on A", func(m string) bool { return strings.Contains(m, id) && strings.Contains(m, "INV-77") })
	if ar, err := controlApprove(ctx, r.data[2], id, "alice", sub.str("digest")); err != nil || ar.status != http.StatusOK {
		t.Fatalf("approve on C: %d %s %v", ar.status, ar.raw, err)
	}
	await("the card of the call approved on C leaving", func(m string) bool { return strings.Contains(m, "call-"+id) && !strings.Contains(m, "INV-77") })
}

var viewerAttr = regexp.MustCompile(`data-viewer="([^"]*)"`)

// callPageSocket opens the live socket of a call page on base with jar's
// session; its presence fragments arrive on the returned channel as the
// names they list.
func callPageSocket(t *testing.T, base string, jar *cookiejar.Jar, id string) (*websocket.Conn, <-chan []string) {
	t.Helper()
	u, _ := url.Parse(base)
	h := http.Header{}
	h.Set("Origin", base)
	for _, c := range jar.Cookies(u) {
		h.Add("Cookie", c.Name+"="+c.Value)
	}
	conn, _, err := websocket.DefaultDialer.Dial("ws://"+u.Host+"/ws?call="+id, h)
	if err != nil {
		t.Fatalf("call page socket on %s: %v", base, err)
	}
	t.Cleanup(func() { conn.Close() })
	told := make(chan []string, 100)
	go func() {
		defer close(told)
		for {
			_, m, err := conn.ReadMessage()
			if err != nil {
				return
			}
			s := string(m)
			i := strings.LastIndex(s, `id="presence"`)
			if i < 0 || !strings.Contains(s[i:], "Someone else is viewing") {
				continue // no presence fragment (the call page's own block is empty)
			}
			var names []string
			for _, v := range viewerAttr.FindAllStringSubmatch(s[i:], -1) {
				names = append(names, v[1])
			}
			told <- names
		}
	}()
	return conn, told
}

// awaitViewers waits until a page is told exactly want (sorted).
func awaitViewers(t *testing.T, page string, told <-chan []string, want ...string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	var last []string
	for {
		select {
		case names, open := <-told:
			if !open {
				t.Fatalf("%s: the socket closed before it was told the viewers %v (last %v)", page, want, last)
			}
			if slices.Equal(names, want) {
				return
			}
			last = names
		case <-deadline:
			t.Fatalf("%s was never told the viewers %v (last %v)", page, want, last)
		}
	}
}

// TestReplicasCallPresence: three console processes on one PostgreSQL
// database, an operator on each with the same call page open. Every page
// names all three. A replica stopped (SIGTERM) says goodbye and its viewer
// leaves the others' pages; a replica killed (SIGKILL) says nothing, and
// its viewer leaves once its presence has expired (about 16 s).
func TestReplicasCallPresence(t *testing.T) {
	requirePostgres(t)
	r := startReplicas(t, pgtest.Database(t), 3)
	token := r.token("agent:billing-bot", "payments-host")
	sub, err := newRawAgent(r.srv[0].url, token).submit(context.Background(), fmt.Sprintf(replicaRefund, 17))
	if err != nil || sub.status != http.StatusCreated {
		t.Fatalf("submit on A: %d %s %v", sub.status, sub.raw, err)
	}
	id := sub.str("id")
	names := []string{"alice", "bob", "op0"}
	var told []<-chan []string
	for i, name := range names {
		_, ch := callPageSocket(t, r.srv[i].url, webLogin(t, r.srv[i].url, name), id)
		told = append(told, ch)
	}
	for i, ch := range told {
		awaitViewers(t, names[i]+"'s page on replica "+fmt.Sprint(i), ch, names...)
	}
	r.srv[2].stop()
	awaitViewers(t, "bob's page on B after C stopped", told[1], "alice", "bob")
	awaitViewers(t, "alice's page on A after C stopped", told[0], "alice", "bob")
	r.srv[0].kill()
	awaitViewers(t, "bob's page on B after A was killed", told[1], "bob")
}

package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/testkit/sqlitekit"
)

// apiStack is a real server on 127.0.0.1 over a real SQLite file.
type apiStack struct {
	t      testing.TB
	dir    string
	url    string
	db     *db.DB
	keys   *grant.Keyring
	queue  *queue.Service
	server *Server
	cancel context.CancelFunc
	done   chan error
	clock  *testkit.Clock
}

func startAPIStack(tb testing.TB) *apiStack {
	tb.Helper()
	return startAPIStackIn(tb, tb.TempDir())
}

func startAPIStackIn(tb testing.TB, dir string, adjust ...func(*Config)) *apiStack {
	tb.Helper()
	k := sqlitekit.NewQueue(tb, sqlitekit.WithPath(filepath.Join(dir, "countersign.db")),
		sqlitekit.WithClock(testkit.NewClock(time.Now().UTC().Truncate(time.Second))))
	clock, d, keys, q := k.Clock, k.DB, k.Keys, k.Service
	// The operators the tests decide as; "agent:deployer" is an operator
	// account named like an agent, which must not approve that agent's
	// calls.
	testkit.SeedUsers(tb, d.Accounts(), account.RoleOperator, "alice", "bob", "carol", "agent:deployer")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := Config{Queue: q, Accounts: account.NewService(d.Accounts(), clock.Now), Audit: d, Ping: d.Ping, Keys: keys, Logger: log, Now: clock.Now}
	for _, f := range adjust {
		f(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &apiStack{t: tb, dir: dir, url: "http://" + ln.Addr().String(), db: d, keys: keys, queue: q,
		server: srv, cancel: cancel, done: make(chan error, 1), clock: clock}
	go q.Run(ctx)
	go func() { st.done <- srv.Serve(ctx, ln) }()
	tb.Cleanup(st.stop)
	return st
}

// stop shuts the server down gracefully and closes the database.
func (st *apiStack) stop() {
	if st.cancel == nil {
		return
	}
	st.cancel()
	select {
	case err := <-st.done:
		if err != nil {
			st.t.Errorf("server: %v", err)
		}
	case <-time.After(30 * time.Second):
		st.t.Errorf("server did not shut down within 30s")
	}
	st.db.Close()
	st.cancel = nil
}

func (st *apiStack) token(actor, audience string) string {
	st.t.Helper()
	_, secret, err := accountsOf(st.db).CreateToken(context.Background(), actor, audience, "", "test", audit.ChannelCLI)
	if err != nil {
		st.t.Fatal(err)
	}
	return secret
}

// apiResponse is a decoded response.
type apiResponse struct {
	Status int
	Body   map[string]any
	Raw    []byte
}

func (r apiResponse) errorCode() string {
	e, _ := r.Body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func (r apiResponse) problems() []map[string]any {
	e, _ := r.Body["error"].(map[string]any)
	list, _ := e["problems"].([]any)
	out := make([]map[string]any, 0, len(list))
	for _, p := range list {
		out = append(out, p.(map[string]any))
	}
	return out
}

func (r apiResponse) str(key string) string {
	s, _ := r.Body[key].(string)
	return s
}

func (st *apiStack) do(method, path, token string, body []byte) apiResponse {
	st.t.Helper()
	return st.doType(method, path, token, "application/json", body)
}

func (st *apiStack) doType(method, path, token, contentType string, body []byte) apiResponse {
	st.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, st.url+path, rd)
	if err != nil {
		st.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil && contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		st.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	out := apiResponse{Status: res.StatusCode, Raw: raw}
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &out.Body); err != nil {
			st.t.Fatalf("%s %s: response is not JSON: %v\n%s", method, path, err, raw)
		}
	}
	return out
}

// submit proposes a call and fails the test unless the status is want.
func (st *apiStack) submit(token, body string, want int) apiResponse {
	st.t.Helper()
	r := st.do(http.MethodPost, "/api/v1/calls", token, []byte(body))
	if r.Status != want {
		st.t.Fatalf("submit: status %d, want %d\n%s", r.Status, want, r.Raw)
	}
	return r
}

func (st *apiStack) approve(operator, id, digest string) (*queue.Call, error) {
	return st.queue.Approve(context.Background(), operator, audit.ChannelCLI, id, digest)
}

func mustApprove(tb testing.TB, st *apiStack, operator, id, digest string) *queue.Call {
	tb.Helper()
	c, err := st.approve(operator, id, digest)
	if err != nil {
		tb.Fatalf("approve %s as %s: %v", id, operator, err)
	}
	return c
}

func accountsOf(d *db.DB) *account.Service { return account.NewService(d.Accounts(), nil) }

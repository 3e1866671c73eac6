package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/mcp/catalog"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/scope"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

// opTools: a tool any channel approves, one only the browser approves, one
// that needs a passkey.
const opTools = `tools:
  ops.restart:
    audience: ops-host
    target: '^svc:[a-z]+$'
    args: {type: object, additionalProperties: false, properties: {}}
  ops.drop:
    audience: ops-host
    target: '^svc:[a-z]+$'
    approve_from: [web]
    args: {type: object, additionalProperties: false, properties: {}}
  ops.wipe:
    audience: ops-host
    target: '^svc:[a-z]+$'
    approve_with: passkey
    args: {type: object, additionalProperties: false, properties: {}}
`

// replica is one console process over a shared SQLite file: its own
// connections, queue and HTTP server on 127.0.0.1.
type replica struct {
	url      string
	db       *db.DB
	q        *queue.Service
	accounts *account.Service
}

func startReplica(t *testing.T, dir string, now func() time.Time, operatorAPI bool) *replica {
	t.Helper()
	d, err := db.Open(filepath.Join(dir, "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := grant.OpenKeyring(filepath.Join(dir, "keys"), "countersign", now)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Parse([]byte(opTools))
	if err != nil {
		t.Fatal(err)
	}
	shown, err := present.NewKey([]byte("the replicas' shared present key"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	q := queue.NewService(queue.Config{Store: d.Store(), Tools: pol.Registry(), Policy: pol, Signer: keys, Logger: log, Presentations: shown, Now: now})
	accounts := account.NewService(d.Accounts(), now)
	srv, err := server.New(server.Config{Queue: q, Accounts: accounts, Audit: d, Ping: d.Ping, Keys: keys, Logger: log, Now: now,
		OperatorAPI: operatorAPI})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		q.Shutdown()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		d.Close()
	})
	return &replica{url: "http://" + ln.Addr().String(), db: d, q: q, accounts: accounts}
}

type opAnswer struct {
	status int
	code   string
	json   map[string]any
	body   string
}

func (r *replica) do(t *testing.T, method, path, token, body string) opAnswer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, r.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	out := opAnswer{status: res.StatusCode, body: string(b)}
	_ = json.Unmarshal(b, &out.json)
	if e, ok := out.json["error"].(map[string]any); ok {
		out.code, _ = e["code"].(string)
	}
	return out
}

func (r *replica) operatorToken(t *testing.T, person, scope string, life time.Duration) (account.OperatorToken, string) {
	t.Helper()
	tok, secret, err := r.accounts.CreateOperatorToken(context.Background(), account.OperatorTokenSpec{Person: person, Scope: scope, Life: life}, audit.ChannelWeb)
	if err != nil {
		t.Fatal(err)
	}
	return tok, secret
}

func (r *replica) agentToken(t *testing.T, spec account.TokenSpec) string {
	t.Helper()
	_, secret, err := r.accounts.CreateTokenWith(context.Background(), spec, "admin", audit.ChannelCLI)
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// listed finds a call in a queue listing and returns its listing token.
func listed(t *testing.T, queueAnswer opAnswer, id string) (listing, digest string) {
	t.Helper()
	calls, _ := queueAnswer.json["calls"].([]any)
	for _, c := range calls {
		m := c.(map[string]any)
		call := m["call"].(map[string]any)
		if call["id"] == id {
			if _, ok := call["grant"]; ok {
				t.Errorf("a listing carries the grant: %v", call)
			}
			l, _ := m["listing"].(string)
			return l, call["digest"].(string)
		}
	}
	t.Fatalf("call %s is not in the listing %s", id, queueAnswer.body)
	return "", ""
}

// An agent token never reaches the operator API, and an operator token
// never reaches the agent API: it does not submit, read, cancel, accept,
// redeem or report calls.
func TestOperatorAndAgentTokensNeverCross(t *testing.T) {
	clock := testkit.NewClock(time.Now())
	r := startReplica(t, t.TempDir(), clock.Now, true)
	testkit.SeedUsers(t, r.db.Accounts(), account.RoleOperator, "alice")
	agent := r.agentToken(t, account.TokenSpec{Actor: "agent:ops", Audience: "ops-host"})
	_, op := r.operatorToken(t, "alice", account.ScopeDecide, time.Hour)
	sub := r.do(t, "POST", "/api/v1/calls", agent, `{"tool":"ops.restart","target":"svc:web","args":{}}`)
	id, _ := sub.json["id"].(string)
	if sub.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", sub.status, sub.body)
	}
	for _, rq := range [][3]string{
		{"GET", "/api/v1/operator/queue", ""},
		{"GET", "/api/v1/operator/calls/" + id, ""},
		{"POST", "/api/v1/operator/calls/" + id + "/approve", `{"digest":"x","listing":"y"}`},
		{"POST", "/api/v1/operator/calls/" + id + "/deny", `{"reason":"no"}`},
		{"GET", "/api/v1/operator/allowances", ""},
		{"POST", "/api/v1/operator/allowances/alw_x/revoke", `{"reason":"no"}`},
		{"POST", "/api/v1/operator/calls/call_x/counter", `{"digest":"x","listing":"y","edits":{"target":"\"z\""}}`},
		{"GET", "/api/v1/operator/plans", ""},
		{"POST", "/api/v1/operator/plans/pln_x/approve", `{"digest":"x","listing":"y"}`},
		{"POST", "/api/v1/operator/plans/pln_x/deny", `{"reason":"no"}`},
		{"GET", "/api/v1/operator/delegations", ""},
		{"POST", "/api/v1/operator/delegations/dlg_x/end", ""},
	} {
		if a := r.do(t, rq[0], rq[1], agent, rq[2]); a.status != http.StatusForbidden || a.code != "agent_token_refused" {
			t.Errorf("an agent token on %s %s: %d %s", rq[0], rq[1], a.status, a.body)
		}
	}
	for _, rq := range [][3]string{
		{"POST", "/api/v1/calls", `{"tool":"ops.restart","target":"svc:db","args":{}}`},
		{"GET", "/api/v1/calls/" + id, ""},
		{"DELETE", "/api/v1/calls/" + id, ""},
		{"POST", "/api/v1/calls/" + id + "/accept", ""},
		{"POST", "/api/v1/calls/" + id + "/outcome", `{"status":"succeeded"}`},
		{"POST", "/api/v1/calls/" + id + "/heartbeat", ""},
		{"POST", "/api/v1/redeem", `{"grant":"a.b.c","call":{"tool":"ops.restart","target":"svc:web","args":{}}}`},
	} {
		if a := r.do(t, rq[0], rq[1], op, rq[2]); a.status != http.StatusForbidden || a.code != "operator_token_refused" {
			t.Errorf("an operator token on %s %s: %d %s", rq[0], rq[1], a.status, a.body)
		}
	}
	if c, err := r.q.Call(context.Background(), id); err != nil || c.Status != queue.StatusPending {
		t.Errorf("the call after both doors were tried: %v %v", c, err)
	}
}

// A read token lists and shows; deciding needs the decide scope. An
// approval names the listing token its call had in a listing made for the
// same person, and is recorded command over api, unattested.
func TestOperatorAPIScopesAndListings(t *testing.T) {
	clock := testkit.NewClock(time.Now())
	r := startReplica(t, t.TempDir(), clock.Now, true)
	testkit.SeedUsers(t, r.db.Accounts(), account.RoleOperator, "alice", "bob")
	// A single-sign-on operator whose provider later makes them an auditor.
	aud := account.User{Name: "oidc:idp.example.com/00u-aud", Role: account.RoleOperator, Kind: account.KindOIDC,
		Issuer: "https://idp.example.com", Subject: "00u-aud", ShortName: "audrey", CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	if err := r.db.Accounts().Update(context.Background(), func(tx account.Tx) error { return tx.InsertUser(aud) }); err != nil {
		t.Fatal(err)
	}
	agent := r.agentToken(t, account.TokenSpec{Actor: "agent:ops", Audience: "ops-host"})
	id, _ := r.do(t, "POST", "/api/v1/calls", agent, `{"tool":"ops.restart","target":"svc:web","args":{}}`).json["id"].(string)
	other, _ := r.do(t, "POST", "/api/v1/calls", agent, `{"tool":"ops.drop","target":"svc:db","args":{}}`).json["id"].(string)
	_, read := r.operatorToken(t, "alice", account.ScopeRead, time.Hour)
	_, decide := r.operatorToken(t, "alice", account.ScopeDecide, time.Hour)
	_, bobs := r.operatorToken(t, "bob", account.ScopeDecide, time.Hour)
	_, audrey := r.operatorToken(t, aud.Name, account.ScopeRead, time.Hour)
	aud.Role = account.RoleAuditor
	if err := r.db.Accounts().Update(context.Background(), func(tx account.Tx) error { return tx.UpdateOIDCUser(aud) }); err != nil {
		t.Fatal(err)
	}

	if a := r.do(t, "GET", "/api/v1/operator/queue", audrey, ""); a.status != http.StatusForbidden || a.code != "not_a_decider" {
		t.Errorf("the token of an operator who is now an auditor: %d %s", a.status, a.body)
	}
	q := r.do(t, "GET", "/api/v1/operator/queue", read, "")
	if q.status != http.StatusOK {
		t.Fatalf("queue: %d %s", q.status, q.body)
	}
	listing, digest := listed(t, q, id)
	if filtered := r.do(t, "GET", "/api/v1/operator/queue?tool=ops.drop", read, ""); len(filtered.json["calls"].([]any)) != 1 {
		t.Errorf("the queue of ops.drop: %s", filtered.body)
	}
	if a := r.do(t, "GET", "/api/v1/operator/calls/"+id, read, ""); a.status != http.StatusOK || a.json["listing"] == "" {
		t.Errorf("show: %d %s", a.status, a.body)
	}
	approve := func(token, listing, digest string) opAnswer {
		b, _ := json.Marshal(map[string]string{"digest": digest, "listing": listing})
		return r.do(t, "POST", "/api/v1/operator/calls/"+id+"/approve", token, string(b))
	}
	if a := approve(read, listing, digest); a.status != http.StatusForbidden || a.code != "insufficient_scope" {
		t.Errorf("approve with a read token: %d %s", a.status, a.body)
	}
	if a := r.do(t, "POST", "/api/v1/operator/calls/"+id+"/deny", read, `{"reason":"no"}`); a.status != http.StatusForbidden || a.code != "insufficient_scope" {
		t.Errorf("deny with a read token: %d %s", a.status, a.body)
	}
	if a := approve(decide, "", digest); a.status != http.StatusBadRequest {
		t.Errorf("approve without a listing: %d %s", a.status, a.body)
	}
	if a := approve(bobs, listing, digest); a.status != http.StatusConflict || a.code != "listing_required" {
		t.Errorf("bob approving with alice's listing: %d %s", a.status, a.body)
	}
	otherListing, _ := listed(t, q, other)
	if a := approve(decide, otherListing, digest); a.status != http.StatusConflict || a.code != "listing_required" {
		t.Errorf("approve with another call's listing: %d %s", a.status, a.body)
	}
	if a := r.do(t, "POST", "/api/v1/operator/calls/"+id+"/approve", decide, `{"digest":"`+digest+`","listing":"`+listing+`","grant":"x"}`); a.status != http.StatusBadRequest || a.code != "malformed_json" {
		t.Errorf("an unknown member: %d %s", a.status, a.body)
	}
	clock.Advance(queue.MaxListingAge + time.Second)
	if a := approve(decide, listing, digest); a.status != http.StatusConflict || a.code != "listing_required" {
		t.Errorf("approve with a stale listing: %d %s", a.status, a.body)
	}
	listing, _ = listed(t, r.do(t, "GET", "/api/v1/operator/queue", decide, ""), id)
	a := approve(decide, listing, digest)
	if a.status != http.StatusOK {
		t.Fatalf("approve: %d %s", a.status, a.body)
	}
	call := a.json["call"].(map[string]any)
	given := call["approvals"].(map[string]any)["given"].([]any)[0].(map[string]any)
	if call["status"] != "approved" || given["method"] != "command" || given["channel"] != "api" || given["human"] != "unattested" || given["by"] != "alice" {
		t.Errorf("the approval: %s", a.body)
	}
	if _, ok := call["grant"]; ok {
		t.Errorf("the operator API handed out the grant: %s", a.body)
	}
}

// A tool whose approve_from leaves out api, or that needs a passkey, is
// never approved through the API; the own-call ban and the owners compare
// the token's person with the call's actor and owners.
func TestOperatorAPIRefusals(t *testing.T) {
	clock := testkit.NewClock(time.Now())
	r := startReplica(t, t.TempDir(), clock.Now, true)
	testkit.SeedUsers(t, r.db.Accounts(), account.RoleOperator, "alice", "carol")
	agent := r.agentToken(t, account.TokenSpec{Actor: "agent:ops", Audience: "ops-host", Owners: []string{"carol"}})
	own := r.agentToken(t, account.TokenSpec{Actor: "alice", Audience: "ops-host"})
	_, alice := r.operatorToken(t, "alice", account.ScopeDecide, time.Hour)
	_, carol := r.operatorToken(t, "carol", account.ScopeDecide, time.Hour)
	submit := func(token, tool, target string) string {
		a := r.do(t, "POST", "/api/v1/calls", token, `{"tool":"`+tool+`","target":"`+target+`","args":{}}`)
		if a.status != http.StatusCreated {
			t.Fatalf("submit: %d %s", a.status, a.body)
		}
		return a.json["id"].(string)
	}
	approve := func(token, id string) opAnswer {
		listing, digest := listed(t, r.do(t, "GET", "/api/v1/operator/queue", token, ""), id)
		b, _ := json.Marshal(map[string]string{"digest": digest, "listing": listing})
		return r.do(t, "POST", "/api/v1/operator/calls/"+id+"/approve", token, string(b))
	}
	for _, c := range []struct {
		name, token, id string
		status          int
		code            string
	}{
		{"approve_from: [web]", alice, submit(agent, "ops.drop", "svc:a"), http.StatusForbidden, "not_approvable_from"},
		{"a passkey tool", alice, submit(agent, "ops.wipe", "svc:b"), http.StatusForbidden, "passkey_required"},
		{"an owner of the agent", carol, submit(agent, "ops.restart", "svc:c"), http.StatusForbidden, "owner"},
		{"one's own call", alice, submit(own, "ops.restart", "svc:d"), http.StatusForbidden, "own_call"},
	} {
		if a := approve(c.token, c.id); a.status != c.status || a.code != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, a.status, a.body, c.status, c.code)
		}
	}
	q := r.do(t, "GET", "/api/v1/operator/queue?tool=ops.drop", alice, "")
	first := q.json["calls"].([]any)[0].(map[string]any)
	if from, _ := json.Marshal(first["approve_from"]); string(from) != `["web"]` {
		t.Errorf("approve_from of ops.drop: %s", from)
	}
}

// A revoked token is refused at its next request on every replica, an
// expired one and a disabled account's at once; nothing is cached.
func TestOperatorTokenRevokedOnEveryReplica(t *testing.T) {
	dir := t.TempDir()
	clock := testkit.NewClock(time.Now())
	a := startReplica(t, dir, clock.Now, true)
	b := startReplica(t, dir, clock.Now, true)
	testkit.SeedUsers(t, a.db.Accounts(), account.RoleOperator, "alice", "bob")
	tok, secret := a.operatorToken(t, "alice", account.ScopeRead, 2*time.Hour)
	_, short := a.operatorToken(t, "alice", account.ScopeRead, time.Hour)
	_, bobs := a.operatorToken(t, "bob", account.ScopeRead, 2*time.Hour)
	for _, r := range []*replica{a, b} {
		for _, s := range []string{secret, short, bobs} {
			if got := r.do(t, "GET", "/api/v1/operator/queue", s, ""); got.status != http.StatusOK {
				t.Fatalf("a live token: %d %s", got.status, got.body)
			}
		}
	}
	if err := b.accounts.RevokeOperatorToken(context.Background(), "alice", tok.ID, audit.ChannelWeb); err != nil {
		t.Fatal(err)
	}
	if err := a.accounts.DisableUser(context.Background(), "bob", "admin", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	for _, r := range []*replica{a, b} {
		for name, s := range map[string]string{"revoked": secret, "expired": short, "disabled account's": bobs} {
			if got := r.do(t, "GET", "/api/v1/operator/queue", s, ""); got.status != http.StatusUnauthorized {
				t.Errorf("a %s token: %d %s", name, got.status, got.body)
			}
		}
	}
}

// Without --operator-api nothing of the operator API is served.
func TestOperatorAPIOff(t *testing.T) {
	clock := testkit.NewClock(time.Now())
	r := startReplica(t, t.TempDir(), clock.Now, false)
	testkit.SeedUsers(t, r.db.Accounts(), account.RoleOperator, "alice")
	_, secret := r.operatorToken(t, "alice", account.ScopeDecide, time.Hour)
	for _, p := range []string{"/api/v1/operator/queue", "/api/v1/operator/allowances"} {
		if a := r.do(t, "GET", p, secret, ""); a.status != http.StatusNotFound || a.code != "operator_api_off" {
			t.Errorf("GET %s with the API off: %d %s", p, a.status, a.body)
		}
	}
}

// operatorFlow exercises every operation of the operator API against the
// description, on the stack of TestOpenAPIDescribesResponses (its tools
// are examples/tools.yaml; alice is an operator there).
func operatorFlow(t *testing.T, st *openAPIStack, check func(docRequest, int) docResponse) {
	t.Helper()
	ctx := context.Background()
	accounts := account.NewService(st.db.Accounts(), nil)
	mint := func(scope string) string {
		_, secret, err := accounts.CreateOperatorToken(ctx, account.OperatorTokenSpec{Person: "alice", Scope: scope, Life: time.Hour}, audit.ChannelWeb)
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	read, decide := mint(account.ScopeRead), mint(account.ScopeDecide)
	agent := st.token(t, "agent:ops-doc", "payments-host")
	submit := func(target string) (string, string) {
		res := check(docRequest{op: "POST /api/v1/calls", path: "/api/v1/calls", token: agent,
			body: `{"tool":"payments.refund","target":"` + target + `","args":{"amount_minor":100,"currency":"USD","reason_code":"duplicate"}}`}, http.StatusCreated)
		return res.json["id"].(string), res.json["digest"].(string)
	}
	id, digest := submit("invoice:INV-7001")
	denied, _ := submit("invoice:INV-7002")

	const list, show, approve, deny = "GET /api/v1/operator/queue", "GET /api/v1/operator/calls/{id}",
		"POST /api/v1/operator/calls/{id}/approve", "POST /api/v1/operator/calls/{id}/deny"
	check(docRequest{op: list, path: "/api/v1/operator/queue"}, http.StatusUnauthorized)
	check(docRequest{op: list, path: "/api/v1/operator/queue", token: agent}, http.StatusForbidden)
	q := check(docRequest{op: list, path: "/api/v1/operator/queue?tool=payments.refund", token: read}, http.StatusOK)
	var listing string
	for _, c := range q.json["calls"].([]any) {
		if m := c.(map[string]any); m["call"].(map[string]any)["id"] == id {
			listing = m["listing"].(string)
		}
	}
	check(docRequest{op: show, path: "/api/v1/operator/calls/" + id, token: read}, http.StatusOK)
	check(docRequest{op: show, path: "/api/v1/operator/calls/call_aaaaaaaaaaaaaaaaaaaaaaaa", token: read}, http.StatusNotFound)
	check(docRequest{op: approve, path: "/api/v1/operator/calls/" + id + "/approve", token: read,
		body: `{"digest":"` + digest + `","listing":"` + listing + `"}`}, http.StatusForbidden)
	check(docRequest{op: approve, path: "/api/v1/operator/calls/" + id + "/approve", token: decide, body: `{"digest":"` + digest + `"}`}, http.StatusBadRequest)
	check(docRequest{op: approve, path: "/api/v1/operator/calls/" + id + "/approve", token: decide,
		body: `{"digest":"` + digest + `","listing":"p1.listing.1.x"}`}, http.StatusConflict)
	check(docRequest{op: approve, path: "/api/v1/operator/calls/" + id + "/approve", token: decide,
		body: `{"digest":"` + digest + `","listing":"` + listing + `"}`}, http.StatusOK)
	check(docRequest{op: deny, path: "/api/v1/operator/calls/" + denied + "/deny", token: decide, body: `{"reason":""}`}, http.StatusBadRequest)
	check(docRequest{op: deny, path: "/api/v1/operator/calls/" + denied + "/deny", token: decide, body: `{"reason":"not this one"}`}, http.StatusOK)
	check(docRequest{op: deny, path: "/api/v1/operator/calls/" + denied + "/deny", token: decide, body: `{"reason":"again"}`}, http.StatusConflict)

	// A counter-proposal through the API: listed first, then answered with
	// an edit that carries the person's approval, unattested.
	const counter = "POST /api/v1/operator/calls/{id}/counter"
	cid, cdigest := submit("invoice:INV-7010")
	var clisting string
	for _, c := range check(docRequest{op: list, path: "/api/v1/operator/queue", token: read}, http.StatusOK).json["calls"].([]any) {
		if m := c.(map[string]any); m["call"].(map[string]any)["id"] == cid {
			clisting = m["listing"].(string)
		}
	}
	edit := func(listed, edits string) string {
		return `{"digest":"` + cdigest + `","listing":"` + listed + `","edits":` + edits + `}`
	}
	check(docRequest{op: counter, path: "/api/v1/operator/calls/" + cid + "/counter", token: read, body: edit(clisting, `{"/amount_minor":40}`)}, http.StatusForbidden)
	check(docRequest{op: counter, path: "/api/v1/operator/calls/" + cid + "/counter", token: decide, body: edit(clisting, `{}`)}, http.StatusBadRequest)
	check(docRequest{op: counter, path: "/api/v1/operator/calls/" + cid + "/counter", token: decide, body: edit("p1.listing.1.x", `{"/amount_minor":40}`)}, http.StatusConflict)
	check(docRequest{op: counter, path: "/api/v1/operator/calls/" + cid + "/counter", token: decide, body: edit(clisting, `{"/currency":"EUR"}`)}, http.StatusUnprocessableEntity)
	made := check(docRequest{op: counter, path: "/api/v1/operator/calls/" + cid + "/counter", token: decide, body: edit(clisting, `{"/amount_minor":40}`)}, http.StatusOK)
	mc := mapAt(t, made.json, "call")
	given, _ := mapAt(t, mc, "approvals")["given"].([]any)
	if mc["countered_from"] != cid || mapAt(t, mc, "args")["amount_minor"] != 40.0 || len(given) != 1 ||
		given[0].(map[string]any)["method"] != "counter" || given[0].(map[string]any)["human"] != "unattested" {
		t.Errorf("a counter through the operator API: %s", made.body)
	}
	check(docRequest{op: counter, path: "/api/v1/operator/calls/" + cid + "/counter", token: decide, body: edit(clisting, `{"/amount_minor":41}`)}, http.StatusConflict)

	// A freeze on the call's tool and actor refuses its approval (503
	// frozen), nothing recorded.
	coldTok := st.token(t, "agent:ops-cold", "payments-host")
	cold := check(docRequest{op: "POST /api/v1/calls", path: "/api/v1/calls", token: coldTok,
		body: `{"tool":"payments.refund","target":"invoice:INV-7009","args":{"amount_minor":100,"currency":"USD","reason_code":"duplicate"}}`}, http.StatusCreated)
	coldID, coldDigest := cold.json["id"].(string), cold.json["digest"].(string)
	coldListing, _ := listed(t, opAnswer{json: check(docRequest{op: list, path: "/api/v1/operator/queue", token: read}, http.StatusOK).json}, coldID)
	if _, err := st.queue.Freeze(ctx, "alice", audit.ChannelCLI, "payments.refund", "agent:ops-cold", "incident 43"); err != nil {
		t.Fatal(err)
	}
	if r := check(docRequest{op: approve, path: "/api/v1/operator/calls/" + coldID + "/approve", token: decide,
		body: `{"digest":"` + coldDigest + `","listing":"` + coldListing + `"}`}, http.StatusServiceUnavailable); errorCode(r.json) != "frozen" {
		t.Errorf("approving a frozen call: %s", r.body)
	}
	if c, err := st.queue.Call(ctx, coldID); err != nil || c.Status != queue.StatusPending || len(c.Approvals) != 0 {
		t.Errorf("a refused approval changed the call: %+v, %v", c, err)
	}

	// An allowance, given in the browser, listed and revoked through the API.
	baseID, _ := submit("invoice:INV-7003")
	base, err := st.queue.Call(ctx, baseID)
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := st.queue.Tools().Tool("payments.refund")
	ch := scope.Choices{Uses: 3, Until: time.Now().Add(30 * time.Minute), TargetPrefix: "invoice:INV-70"}
	sc, err := scope.Materialise(scope.Call{Actor: base.Actor, Audience: base.Audience, Tool: base.Tool, Target: base.Target,
		ToolDigest: base.ToolDigest, Args: base.Args}, tool, ch, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := st.queue.GiveAllowance(ctx, queue.GiveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: base.ID,
		Digest: base.Digest, ScopeDigest: sc.Digest(), Choices: ch, Presented: st.queue.PresentAllowance("alice", base, sc.Digest())})
	if err != nil {
		t.Fatal(err)
	}
	const allowances, revoke = "GET /api/v1/operator/allowances", "POST /api/v1/operator/allowances/{id}/revoke"
	if l := check(docRequest{op: allowances, path: "/api/v1/operator/allowances?live=true", token: read}, http.StatusOK); len(l.json["allowances"].([]any)) != 1 {
		t.Errorf("live allowances: %s", l.body)
	}
	check(docRequest{op: revoke, path: "/api/v1/operator/allowances/" + a.ID + "/revoke", token: read, body: `{"reason":"done"}`}, http.StatusForbidden)
	check(docRequest{op: revoke, path: "/api/v1/operator/allowances/alw_nothing/revoke", token: decide, body: `{"reason":"done"}`}, http.StatusNotFound)
	check(docRequest{op: revoke, path: "/api/v1/operator/allowances/" + a.ID + "/revoke", token: decide, body: `{"reason":"done"}`}, http.StatusOK)
	check(docRequest{op: revoke, path: "/api/v1/operator/allowances/" + a.ID + "/revoke", token: decide, body: `{"reason":"again"}`}, http.StatusConflict)

	// A delegation alice gave, listed and ended through the API.
	testkit.SeedUsers(t, st.db.Accounts(), account.RoleOperator, "dora")
	d, err := st.queue.GiveDelegation(ctx, queue.DelegationInput{By: "alice", Channel: audit.ChannelWeb, Delegator: "alice",
		Delegate: "dora", Until: time.Now().Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	const delegations, end = "GET /api/v1/operator/delegations", "POST /api/v1/operator/delegations/{id}/end"
	live := func() int {
		return len(check(docRequest{op: delegations, path: "/api/v1/operator/delegations?live=true", token: read}, http.StatusOK).json["delegations"].([]any))
	}
	before, all := live(), check(docRequest{op: delegations, path: "/api/v1/operator/delegations", token: read}, http.StatusOK)
	if !strings.Contains(string(all.body), `"id":"`+d.ID+`"`) {
		t.Errorf("alice's delegations leave out %s: %s", d.ID, all.body)
	}
	check(docRequest{op: delegations, path: "/api/v1/operator/delegations?person=dora", token: read}, http.StatusForbidden)
	check(docRequest{op: end, path: "/api/v1/operator/delegations/" + d.ID + "/end", token: read}, http.StatusForbidden)
	check(docRequest{op: end, path: "/api/v1/operator/delegations/dlg_nothing/end", token: decide}, http.StatusNotFound)
	if e := check(docRequest{op: end, path: "/api/v1/operator/delegations/" + d.ID + "/end", token: decide}, http.StatusOK); e.json["live"] != false || e.json["ended_by"] != "alice" {
		t.Errorf("ended delegation: %s", e.body)
	}
	check(docRequest{op: end, path: "/api/v1/operator/delegations/" + d.ID + "/end", token: decide}, http.StatusConflict)
	if after := live(); after != before-1 {
		t.Errorf("live delegations: %d before the end, %d after", before, after)
	}
}

// mcpReviewFlow exercises the review of MCP definitions through the
// operator API against the description, on a stack whose tools file has an
// MCP upstream: a definition first listed awaits review, an admin's
// decide token approves it, a changed one names the approved one.
func mcpReviewFlow(t *testing.T, checkOn func(*openAPIStack, docRequest, int) docResponse) {
	t.Helper()
	ctx := context.Background()
	st := startOpenAPIStack(t, func(q *queue.Config, _ *server.Config) {
		src, err := os.ReadFile("../../examples/tools.yaml")
		if err != nil {
			t.Fatal(err)
		}
		reg, err := tools.Parse(append(src, "\nmcp:\n  demo:\n    command: [mcp-demo]\n"...))
		if err != nil {
			t.Fatal(err)
		}
		q.Tools = reg
	})
	testkit.SeedUsers(t, st.db.Accounts(), account.RoleAdmin, "root")
	accounts := account.NewService(st.db.Accounts(), nil)
	mint := func(person, scope string) string {
		_, secret, err := accounts.CreateOperatorToken(ctx, account.OperatorTokenSpec{Person: person, Scope: scope, Life: time.Hour}, audit.ChannelWeb)
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	root, rootRead, alice := mint("root", account.ScopeDecide), mint("root", account.ScopeRead), mint("alice", account.ScopeDecide)
	const schema = `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`
	if err := st.cat.Apply(ctx, "demo", []catalog.Listed{{Name: "add", Description: "Adds.", InputSchema: []byte(schema)}}); err != nil {
		t.Fatal(err)
	}
	const list, show, review = "GET /api/v1/operator/mcp/definitions", "GET /api/v1/operator/mcp/definition", "POST /api/v1/operator/mcp/review"
	checkOn(st, docRequest{op: list, path: "/api/v1/operator/mcp/definitions", token: alice}, http.StatusForbidden)
	l := checkOn(st, docRequest{op: list, path: "/api/v1/operator/mcp/definitions", token: rootRead}, http.StatusOK)
	defs, _ := l.json["definitions"].([]any)
	if len(defs) != 1 || defs[0].(map[string]any)["status"] != "pending" {
		t.Fatalf("definitions: %s", l.body)
	}
	digest := defs[0].(map[string]any)["digest"].(string)
	q := "/api/v1/operator/mcp/definition?server=demo&tool=add&digest=" + digest
	checkOn(st, docRequest{op: show, path: q, token: alice}, http.StatusOK)
	checkOn(st, docRequest{op: show, path: "/api/v1/operator/mcp/definition?server=demo&tool=add&digest=" + strings.Repeat("0", 64), token: alice}, http.StatusNotFound)
	body := `{"server":"demo","tool":"add","digest":"` + digest + `","decision":"approve"}`
	checkOn(st, docRequest{op: review, path: "/api/v1/operator/mcp/review", token: rootRead, body: body}, http.StatusForbidden)
	checkOn(st, docRequest{op: review, path: "/api/v1/operator/mcp/review", token: alice, body: body}, http.StatusForbidden)
	checkOn(st, docRequest{op: review, path: "/api/v1/operator/mcp/review", token: root, body: strings.Replace(body, "approve", "maybe", 1)}, http.StatusBadRequest)
	checkOn(st, docRequest{op: review, path: "/api/v1/operator/mcp/review", token: root, body: strings.Replace(body, digest, strings.Repeat("0", 64), 1)}, http.StatusNotFound)
	if r := checkOn(st, docRequest{op: review, path: "/api/v1/operator/mcp/review", token: root, body: body}, http.StatusOK); r.json["status"] != "approved" || r.json["decided_by"] != "root" {
		t.Errorf("the review: %s", r.body)
	}
	checkOn(st, docRequest{op: review, path: "/api/v1/operator/mcp/review", token: root, body: body}, http.StatusConflict)
	if err := st.cat.Apply(ctx, "demo", []catalog.Listed{{Name: "add", Description: "Adds, now twice.", InputSchema: []byte(schema)},
		{Name: "bad", Description: "Not an object.", InputSchema: []byte(`[]`)}}); err != nil {
		t.Fatal(err)
	}
	l = checkOn(st, docRequest{op: list, path: "/api/v1/operator/mcp/definitions", token: root}, http.StatusOK)
	var changed, bad map[string]any
	for _, d := range l.json["definitions"].([]any) {
		switch m := d.(map[string]any); m["tool"] {
		case "add":
			changed = m
		case "bad":
			bad = m
		}
	}
	if changed["changed"] != true || changed["previous_digest"] != digest {
		t.Errorf("a changed definition: %s", l.body)
	}
	if bad["status"] != "quarantined" || bad["reasons"] == nil {
		t.Errorf("a definition that cannot be mirrored: %s", l.body)
	}
	checkOn(st, docRequest{op: show, path: "/api/v1/operator/mcp/definition?server=demo&tool=add&digest=" + changed["digest"].(string), token: root}, http.StatusOK)
	var out bytes.Buffer
	if _, err := st.db.ExportAudit(ctx, &out, audit.ExportOptions{Format: "jsonl"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"channel":"api","details":{"digest":"`+digest) {
		t.Errorf("the review's audit entry does not record the api channel")
	}
}

// errorCode is the code of an error answer, "" for any other.
func errorCode(answer map[string]any) string {
	e, _ := answer["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

// TestOperatorQueueToolFilterReadsPastNewerCalls: a tool's pending call is
// listed under more newer calls of another tool than a listing holds.
func TestOperatorQueueToolFilterReadsPastNewerCalls(t *testing.T) {
	ctx := context.Background()
	r := startReplica(t, t.TempDir(), time.Now, true)
	testkit.SeedUsers(t, r.db.Accounts(), account.RoleOperator, "alice")
	agent := r.agentToken(t, account.TokenSpec{Actor: "agent:ops", Audience: "ops-host"})
	old, _ := r.do(t, "POST", "/api/v1/calls", agent, `{"tool":"ops.drop","target":"svc:db","args":{}}`).json["id"].(string)
	newID, _ := r.do(t, "POST", "/api/v1/calls", agent, `{"tool":"ops.restart","target":"svc:web","args":{}}`).json["id"].(string)
	base, err := r.q.Call(ctx, newID)
	if err != nil {
		t.Fatal(err)
	}
	// Stored directly: as many newer calls of ops.restart as a listing holds.
	if err := r.db.Store().Update(ctx, func(tx queue.Tx) error {
		for i := range server.MaxOperatorQueue {
			c := *base
			c.ID, c.Digest = queue.NewCallID(), fmt.Sprintf("%064x", i+1)
			if err := tx.InsertCall(&c); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, read := r.operatorToken(t, "alice", account.ScopeRead, time.Hour)
	all := r.do(t, "GET", "/api/v1/operator/queue", read, "")
	if all.status != http.StatusOK || all.json["truncated"] != true {
		t.Fatalf("the whole queue: %d, truncated %v", all.status, all.json["truncated"])
	}
	q := r.do(t, "GET", "/api/v1/operator/queue?tool=ops.drop", read, "")
	if q.status != http.StatusOK || len(q.json["calls"].([]any)) != 1 || q.json["truncated"] == true {
		t.Fatalf("the queue of ops.drop: %d %.300s", q.status, q.body)
	}
	listed(t, q, old)
}

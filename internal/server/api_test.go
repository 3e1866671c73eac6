package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
)

const refundBody = `{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"},"rationale":"customer was charged twice"}`

func redeemBody(grant, callJSON string) []byte {
	return []byte(`{"grant":` + jsonString(grant) + `,"call":` + callJSON + `}`)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

const refundCall = `{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}}`

func TestWholeLoopOverHTTP(t *testing.T) {
	st := startAPIStack(t)
	agent := st.token("agent:billing-bot", "payments-host")

	r := st.submit(agent, refundBody, http.StatusCreated)
	id, digest := r.str("id"), r.str("digest")
	if r.str("status") != "pending" || len(digest) != 64 {
		t.Fatalf("submitted call = %s", r.Raw)
	}
	if r.str("actor") != "agent:billing-bot" || r.str("audience") != "payments-host" {
		t.Errorf("actor/audience = %q/%q, want the token's", r.str("actor"), r.str("audience"))
	}

	// The agent long-polls; an operator approves from the command line path.
	waited := make(chan apiResponse, 1)
	go func() { waited <- st.do(http.MethodGet, "/api/v1/calls/"+id+"?wait=30s", agent, nil) }()
	waitForWaiters(t, st, 1)
	mustApprove(t, st, "alice", id, digest)
	w := <-waited
	if w.Status != http.StatusOK || w.str("status") != "approved" || w.str("grant") == "" {
		t.Fatalf("wait = %d %s, want approved with a grant", w.Status, w.Raw)
	}

	red := st.do(http.MethodPost, "/api/v1/redeem", agent, redeemBody(w.str("grant"), refundCall))
	if red.Status != http.StatusOK || red.str("decision") != "accepted" || red.str("call_id") != id {
		t.Fatalf("redeem = %d %s, want 200 accepted", red.Status, red.Raw)
	}
	checks := red.Body["checks"].([]any)
	if len(checks) != 11 {
		t.Fatalf("checks = %v, want 11", checks)
	}
	for _, c := range checks {
		if c.(map[string]any)["ok"] != true {
			t.Errorf("check %v not ok on acceptance", c)
		}
	}

	again := st.do(http.MethodPost, "/api/v1/redeem", agent, redeemBody(w.str("grant"), refundCall))
	if again.Status != http.StatusConflict || again.str("reason") != "replayed" {
		t.Fatalf("second redeem = %d %s, want 409 replayed", again.Status, again.Raw)
	}

	long := st.do(http.MethodPost, "/api/v1/calls/"+id+"/outcome", agent, []byte(`{"status":"succeeded","detail":"`+strings.Repeat("x", 2001)+`"}`))
	if p := long.problems(); long.Status != 422 || len(p) != 1 || p[0]["code"] != "too_long" || p[0]["path"] != "/detail" {
		t.Fatalf("over-long outcome detail = %d %s, want 422 too_long at /detail", long.Status, long.Raw)
	}
	out := st.do(http.MethodPost, "/api/v1/calls/"+id+"/outcome", agent, []byte(`{"status":"succeeded","detail":"refund R-1"}`))
	if out.Status != http.StatusOK {
		t.Fatalf("outcome = %d %s", out.Status, out.Raw)
	}
	dup := st.do(http.MethodPost, "/api/v1/calls/"+id+"/outcome", agent, []byte(`{"status":"failed"}`))
	if dup.Status != http.StatusConflict || dup.errorCode() != "outcome_already_reported" {
		t.Fatalf("second outcome = %d %s, want 409", dup.Status, dup.Raw)
	}
	got := st.do(http.MethodGet, "/api/v1/calls/"+id, agent, nil)
	if got.str("status") != "redeemed" {
		t.Errorf("final status = %q, want redeemed", got.str("status"))
	}
	if _, ok := got.Body["grant"]; ok {
		t.Errorf("a redeemed call still shows its grant")
	}
}

func waitForWaiters(t *testing.T, st *apiStack, n int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for st.queue.Waiting() < n {
		if time.Now().After(deadline) {
			t.Fatalf("waiters = %d, want %d", st.queue.Waiting(), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestDenyReachesWaiterWithReason(t *testing.T) {
	st := startAPIStack(t)
	agent := st.token("agent:billing-bot", "payments-host")
	r := st.submit(agent, refundBody, http.StatusCreated)
	id := r.str("id")
	waited := make(chan apiResponse, 1)
	go func() { waited <- st.do(http.MethodGet, "/api/v1/calls/"+id+"?wait=30s", agent, nil) }()
	waitForWaiters(t, st, 1)
	if _, err := st.queue.Deny(context.Background(), "bob", "cli", id, "refund already issued by hand"); err != nil {
		t.Fatal(err)
	}
	w := <-waited
	dec, _ := w.Body["decision"].(map[string]any)
	if w.str("status") != "denied" || dec["reason"] != "refund already issued by hand" || dec["by"] != "bob" {
		t.Fatalf("wait = %s, want denied with bob's reason", w.Raw)
	}
	// Resubmitting the denied call within ten minutes is refused with the reason.
	again := st.submit(agent, refundBody, http.StatusConflict)
	if again.errorCode() != "previously_denied" || !strings.Contains(string(again.Raw), "refund already issued by hand") {
		t.Errorf("resubmit after deny = %s", again.Raw)
	}
	// After ten minutes it may be proposed again.
	st.clock.Advance(11 * time.Minute)
	st.submit(agent, refundBody, http.StatusCreated)
}

func TestExpiryWakesWaiter(t *testing.T) {
	st := startAPIStack(t)
	agent := st.token("agent:weather", "weather-host")
	r := st.submit(agent, `{"tool":"weather.search","target":"weather:forecast","args":{"city":"Paris"}}`, http.StatusCreated)
	id := r.str("id")
	waited := make(chan apiResponse, 1)
	go func() { waited <- st.do(http.MethodGet, "/api/v1/calls/"+id+"?wait=30s", agent, nil) }()
	waitForWaiters(t, st, 1)
	st.clock.Advance(6 * time.Minute) // weather.search decides within 5m
	if _, err := st.queue.ExpireDue(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-waited:
		if w.str("status") != "expired" {
			t.Fatalf("wait = %s, want expired", w.Raw)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken by expiry")
	}
	// An expired call stays expired: approving it now is refused.
	if _, err := st.approve("alice", id, r.str("digest")); err == nil {
		t.Fatal("approved an expired call")
	}
}

func TestDecisionRules(t *testing.T) {
	st := startAPIStack(t)
	deployer := st.token("agent:deployer", "deploy-host")
	body := `{"tool":"releases.deploy","target":"service:api","args":{"version":"v1.2.3","environment":"production","change_ticket":"CHG-1234"}}`
	r := st.submit(deployer, body, http.StatusCreated)
	id, digest := r.str("id"), r.str("digest")
	if a := r.Body["approvals"].(map[string]any); a["required"] != float64(2) {
		t.Fatalf("approvals = %v, want 2 required", a)
	}

	if _, err := st.approve("alice", id, strings.Repeat("0", 64)); err != queue.ErrDigestMismatch {
		t.Errorf("approve with another digest: %v, want ErrDigestMismatch", err)
	}
	if _, err := st.approve("agent:deployer", id, digest); err != queue.ErrOwnCall {
		t.Errorf("self-approval: %v, want ErrOwnCall", err)
	}
	waited := make(chan apiResponse, 1)
	go func() { waited <- st.do(http.MethodGet, "/api/v1/calls/"+id+"?wait=30s", deployer, nil) }()
	waitForWaiters(t, st, 1)
	c := mustApprove(t, st, "alice", id, digest)
	if c.Status != queue.StatusPending || c.Grant != "" {
		t.Fatalf("after one of two approvals: status %s, grant %q", c.Status, c.Grant)
	}
	select {
	case w := <-waited:
		t.Fatalf("a partial approval released the long-poll: %s", w.Raw)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := st.approve("alice", id, digest); err != queue.ErrAlreadyApproved {
		t.Errorf("second approval by alice: %v, want ErrAlreadyApproved", err)
	}
	pending := st.do(http.MethodGet, "/api/v1/calls/"+id, deployer, nil)
	if pending.str("status") != "pending" || pending.Body["approvals"].(map[string]any)["received"] != float64(1) {
		t.Fatalf("after one approval: %s", pending.Raw)
	}
	c = mustApprove(t, st, "carol", id, digest)
	if c.Status != queue.StatusApproved || c.Grant == "" {
		t.Fatalf("after two approvals: status %s", c.Status)
	}
	if w := <-waited; w.str("status") != "approved" || w.str("grant") != c.Grant {
		t.Fatalf("long-poll after the second approval = %s", w.Raw)
	}
	// Terminal: a deny after approval changes nothing.
	if _, err := st.queue.Deny(context.Background(), "dave", "cli", id, "too late"); err == nil {
		t.Fatal("denied an approved call")
	}
}

func TestValidationCases(t *testing.T) {
	st := startAPIStack(t)
	agent := st.token("agent:weather", "weather-host")
	cases := []struct {
		name   string
		args   string
		status int
		code   string
		probs  []string // code@path
	}{
		{"city only", `{"city":"Paris"}`, 201, "", nil},
		{"city and limit", `{"city":"Paris","limit":5}`, 201, "", nil},
		{"sql smuggled", `{"city":"Paris","sql":"DROP TABLE"}`, 422, "invalid_arguments", []string{"unknown_field@/args/sql"}},
		{"limit without city", `{"limit":5}`, 422, "invalid_arguments", []string{"missing_field@/args/city"}},
		{"blank city", `{"city":"  "}`, 422, "invalid_arguments", []string{"empty_string@/args/city"}},
		{"float limit", `{"city":"Paris","limit":5.0}`, 400, "float_not_allowed", []string{"float_not_allowed@/args/limit"}},
		{"proto", `{"city":"Paris","__proto__":1}`, 422, "invalid_arguments", []string{"unknown_field@/args/__proto__"}},
		{"null city", `{"city":null}`, 422, "invalid_arguments", []string{"wrong_type@/args/city"}},
		{"several", `{"limit":true,"x":1}`, 422, "invalid_arguments", []string{"unknown_field@/args/x", "missing_field@/args/city", "wrong_type@/args/limit"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A distinct token per case keeps the retry cap out of the way.
			tok := st.token(fmt.Sprintf("agent:w%d", i), "weather-host")
			body := `{"tool":"weather.search","target":"weather:forecast","args":` + tc.args + `}`
			r := st.submit(tok, body, tc.status)
			if tc.code == "" {
				return
			}
			if r.errorCode() != tc.code {
				t.Errorf("code = %q, want %q (%s)", r.errorCode(), tc.code, r.Raw)
			}
			var got []string
			for _, p := range r.problems() {
				got = append(got, fmt.Sprintf("%s@%s", p["code"], p["path"]))
			}
			for _, want := range tc.probs {
				if !hasString(got, want) {
					t.Errorf("problems %v lack %s", got, want)
				}
			}
			if len(got) != len(tc.probs) {
				t.Errorf("problems %v, want exactly %v", got, tc.probs)
			}
		})
	}
	_ = agent
	// Nested extra key, in search.query's filter object.
	search := st.token("agent:search", "search-host")
	r := st.submit(search, `{"tool":"search.query","target":"index:tickets","args":{"query":"oom","filter":{"status":"open","extra":true}}}`, 422)
	if p := r.problems(); len(p) != 1 || p[0]["path"] != "/args/filter/extra" || p[0]["code"] != "unknown_field" {
		t.Errorf("nested extra key: %s", r.Raw)
	}
}

func hasString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestStatusAndErrorCodes produces each status and error code of the agent
// API at least once.
func TestStatusAndErrorCodes(t *testing.T) {
	st := startAPIStack(t)
	agent := st.token("agent:billing-bot", "payments-host")
	other := st.token("agent:other", "payments-host")
	wrongHost := st.token("agent:billing-bot", "mail-host")

	r := st.submit(agent, refundBody, http.StatusCreated)
	id := r.str("id")
	dup := st.submit(agent, refundBody, http.StatusOK)
	if dup.str("id") != id {
		t.Errorf("identical resubmission created %s, want existing %s", dup.str("id"), id)
	}
	// A different rationale is the same envelope: still the same call.
	st.submit(agent, strings.Replace(refundBody, "charged twice", "asked nicely", 1), http.StatusOK)

	cases := []struct {
		name        string
		method      string
		path, token string
		contentType string
		body        string
		status      int
		code        string
	}{
		{"no token", "POST", "/api/v1/calls", "", "application/json", refundBody, 401, "unauthorized"},
		{"unknown token", "POST", "/api/v1/calls", "cst_nope", "application/json", refundBody, 401, "unauthorized"},
		{"not json type", "POST", "/api/v1/calls", agent, "text/plain", refundBody, 415, "unsupported_media_type"},
		{"malformed", "POST", "/api/v1/calls", other, "application/json", `{"tool":`, 400, "malformed_json"},
		{"duplicate key", "POST", "/api/v1/calls", other, "application/json", `{"tool":"a","tool":"b"}`, 400, "duplicate_key"},
		{"bad utf8", "POST", "/api/v1/calls", other, "application/json", "{\"tool\":\"\xff\"}", 400, "invalid_utf8"},
		{"big int", "POST", "/api/v1/calls", other, "application/json", `{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":9007199254740992}}`, 400, "out_of_range"},
		{"too deep", "POST", "/api/v1/calls", other, "application/json", `{"tool":"search.query","target":"index:x","args":` + strings.Repeat(`{"a":`, 33) + `1` + strings.Repeat(`}`, 33) + `}`, 400, "too_deep"},
		{"too large", "POST", "/api/v1/calls", other, "application/json", `{"rationale":"` + strings.Repeat("x", 300<<10) + `"}`, 413, "too_large"},
		{"unknown tool", "POST", "/api/v1/calls", st.token("agent:u", "payments-host"), "application/json", `{"tool":"payments.steal","target":"x","args":{}}`, 422, "unknown_tool"},
		{"actor in body", "POST", "/api/v1/calls", st.token("agent:v", "payments-host"), "application/json", `{"actor":"admin","tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":1,"currency":"USD","reason_code":"fraud"}}`, 422, "invalid_arguments"},
		{"invalid tool name", "POST", "/api/v1/calls", st.token("agent:w", "payments-host"), "application/json", `{"tool":"Payments/Refund","target":"x","args":{}}`, 422, "invalid_arguments"},
		{"audience", "POST", "/api/v1/calls", wrongHost, "application/json", refundBody, 403, "audience_not_allowed"},
		{"other actor's call", "GET", "/api/v1/calls/" + id, other, "", "", 404, "not_found"},
		{"missing call", "GET", "/api/v1/calls/call_nope", agent, "", "", 404, "not_found"},
		{"bad wait", "GET", "/api/v1/calls/" + id + "?wait=soon", agent, "", "", 400, "invalid_wait"},
		{"cancel other's", "DELETE", "/api/v1/calls/" + id, other, "", "", 404, "not_found"},
		{"outcome before redeem", "POST", "/api/v1/calls/" + id + "/outcome", agent, "application/json", `{"status":"succeeded"}`, 409, "not_redeemed"},
		{"outcome bad status", "POST", "/api/v1/calls/" + id + "/outcome", agent, "application/json", `{"status":"great"}`, 422, "invalid_outcome"},
		{"redeem malformed", "POST", "/api/v1/redeem", agent, "application/json", `{"grant":"x"}`, 400, "malformed"},
		{"unknown route", "GET", "/api/v1/nothing", agent, "", "", 404, "not_found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			r := st.doType(tc.method, tc.path, tc.token, tc.contentType, body)
			if r.Status != tc.status || r.errorCode() != tc.code {
				t.Errorf("%s %s = %d %q, want %d %q\n%.300s", tc.method, tc.path, r.Status, r.errorCode(), tc.status, tc.code, r.Raw)
			}
			if e, ok := r.Body["error"].(map[string]any); !ok || e["message"] == "" {
				t.Errorf("error body lacks the error shape: %.300s", r.Raw)
			}
		})
	}

	cancel := st.do(http.MethodDelete, "/api/v1/calls/"+id, agent, nil)
	if cancel.Status != 200 || cancel.str("status") != "cancelled" {
		t.Fatalf("cancel = %d %s", cancel.Status, cancel.Raw)
	}
	if again := st.do(http.MethodDelete, "/api/v1/calls/"+id, agent, nil); again.Status != 409 || again.errorCode() != "not_pending" {
		t.Errorf("second cancel = %d %s, want 409 not_pending", again.Status, again.Raw)
	}
	// A cancelled call cannot be approved.
	if _, err := st.approve("alice", id, r.str("digest")); err == nil {
		t.Error("approved a cancelled call")
	}
}

func TestRetryLimit(t *testing.T) {
	st := startAPIStack(t)
	agent := st.token("agent:weather", "weather-host")
	bad := `{"tool":"weather.search","target":"weather:forecast","args":{"city":"Paris","sql":"x"}}`
	for i := 0; i < 3; i++ {
		st.submit(agent, bad, http.StatusUnprocessableEntity)
	}
	r := st.submit(agent, bad, http.StatusTooManyRequests)
	if r.errorCode() != "retry_limit" {
		t.Fatalf("fourth try = %s, want retry_limit", r.Raw)
	}
	// The hint says a person clears the block in the console; the model
	// is handed no command line that acts in an operator's name.
	e, _ := r.Body["error"].(map[string]any)
	if hint, _ := e["hint"].(string); !strings.Contains(hint, "in the console") || strings.Contains(hint, "console unblock") {
		t.Errorf("retry_limit hint = %q, want the console's Clear and no command line", hint)
	}
	// Even a valid proposal for the blocked pair is refused until cleared.
	good := `{"tool":"weather.search","target":"weather:forecast","args":{"city":"Paris"}}`
	st.submit(agent, good, http.StatusTooManyRequests)
	// Other tools are not blocked.
	blocks, err := st.queue.Blocks(context.Background())
	if err != nil || len(blocks) != 1 || blocks[0].Tool != "weather.search" || blocks[0].Actor != "agent:weather" {
		t.Fatalf("blocks = %+v, %v", blocks, err)
	}
	if err := st.queue.ClearRetry(context.Background(), "alice", "cli", "agent:weather", "weather.search"); err != nil {
		t.Fatal(err)
	}
	st.submit(agent, good, http.StatusCreated)
	// A valid proposal resets the count: two more rejections do not block.
	st.submit(agent, bad, 422)
	st.submit(agent, bad, 422)
	st.submit(agent, `{"tool":"weather.search","target":"weather:forecast","args":{"city":"Lyon"}}`, 201)
	st.submit(agent, bad, 422)
	st.submit(agent, bad, 422)
	st.submit(agent, `{"tool":"weather.search","target":"weather:forecast","args":{"city":"Nice"}}`, 201)
}

func TestRedemptionRefusals(t *testing.T) {
	st := startAPIStack(t)
	agent := st.token("agent:billing-bot", "payments-host")
	otherActor := st.token("agent:other", "payments-host")
	r := st.submit(agent, refundBody, http.StatusCreated)
	c := mustApprove(t, st, "alice", r.str("id"), r.str("digest"))

	changed := strings.Replace(refundCall, "1299", "1300", 1)
	cases := []struct {
		name, token, call string
		status            int
		reason            string
	}{
		{"changed argument", agent, changed, 403, "digest_mismatch"},
		{"other actor", otherActor, refundCall, 403, "actor_mismatch"},
		{"other target", agent, strings.Replace(refundCall, "INV-1", "INV-2", 1), 403, "target_mismatch"},
		{"garbage grant", agent, refundCall, 403, "malformed"},
	}
	for _, tc := range cases {
		g := c.Grant
		if tc.reason == "malformed" {
			g = "not.a.grant!"
		}
		res := st.do(http.MethodPost, "/api/v1/redeem", tc.token, redeemBody(g, tc.call))
		if res.Status != tc.status || res.str("reason") != tc.reason || res.str("decision") != "rejected" {
			t.Errorf("%s: %d %s, want %d %s", tc.name, res.Status, res.Raw, tc.status, tc.reason)
		}
	}
	// None of the failures consumed the grant.
	ok := st.do(http.MethodPost, "/api/v1/redeem", agent, redeemBody(c.Grant, refundCall))
	if ok.Status != 200 {
		t.Fatalf("redeem after refusals = %d %s", ok.Status, ok.Raw)
	}
	// An informational member (notes) is not bound: presenting other notes still redeems...
	r2 := st.submit(agent, `{"tool":"payments.refund","target":"invoice:INV-7","args":{"amount_minor":5,"currency":"EUR","reason_code":"fraud","notes":"first"}}`, 201)
	c2 := mustApprove(t, st, "alice", r2.str("id"), r2.str("digest"))
	res := st.do(http.MethodPost, "/api/v1/redeem", agent, redeemBody(c2.Grant,
		`{"tool":"payments.refund","target":"invoice:INV-7","args":{"amount_minor":5,"currency":"EUR","reason_code":"fraud","notes":"other"}}`))
	if res.Status != 200 {
		t.Fatalf("redeem with other informational notes = %d %s", res.Status, res.Raw)
	}
	// ...but an informational member that breaks the schema refuses the
	// redemption with its problem, and consumes nothing.
	r3 := st.submit(agent, `{"tool":"payments.refund","target":"invoice:INV-8","args":{"amount_minor":5,"currency":"EUR","reason_code":"fraud","notes":"n"}}`, 201)
	c3 := mustApprove(t, st, "alice", r3.str("id"), r3.str("digest"))
	bad := st.do(http.MethodPost, "/api/v1/redeem", agent, redeemBody(c3.Grant,
		`{"tool":"payments.refund","target":"invoice:INV-8","args":{"amount_minor":5,"currency":"EUR","reason_code":"fraud","notes":{"amount_minor":999999}}}`))
	if bad.Status != 400 || !strings.Contains(string(bad.Raw), `"code":"malformed"`) ||
		!strings.Contains(string(bad.Raw), `"code":"wrong_type","path":"/call/args/notes"`) {
		t.Fatalf("redeem with an object as notes = %d %s, want 400 malformed with wrong_type at /call/args/notes", bad.Status, bad.Raw)
	}
	if res := st.do(http.MethodPost, "/api/v1/redeem", agent, redeemBody(c3.Grant,
		`{"tool":"payments.refund","target":"invoice:INV-8","args":{"amount_minor":5,"currency":"EUR","reason_code":"fraud","notes":"n"}}`)); res.Status != 200 {
		t.Fatalf("exact redeem after the invalid one = %d %s", res.Status, res.Raw)
	}
}

func TestConcurrentSubmissions(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: heavy race: 200 agents submitting at once")
	}
	st := startAPIStack(t)
	const agents = 200
	tokens := make([]string, agents)
	for i := range tokens {
		tokens[i] = st.token(fmt.Sprintf("agent:a%03d", i), "weather-host")
	}
	var wg sync.WaitGroup
	ids := make([]string, agents)
	errs := make(chan error, agents)
	for i := 0; i < agents; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := st.do(http.MethodPost, "/api/v1/calls", tokens[i],
				[]byte(fmt.Sprintf(`{"tool":"weather.search","target":"weather:forecast","args":{"city":"City %d"}}`, i)))
			if r.Status != http.StatusCreated {
				errs <- fmt.Errorf("agent %d: %d %s", i, r.Status, r.Raw)
				return
			}
			ids[i] = r.str("id")
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var n int
	if err := st.db.SQL().QueryRow(`SELECT COUNT(DISTINCT id) FROM calls`).Scan(&n); err != nil || n != agents {
		t.Fatalf("calls stored = %d (%v), want %d", n, err, agents)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Errorf("call id %s returned twice", id)
		}
		seen[id] = true
	}
}

func TestRacingOperators(t *testing.T) {
	st := startAPIStack(t)
	agent := st.token("agent:weather", "weather-host")
	const calls, operators = 10, 50
	names := make([]string, operators)
	for op := range names {
		names[op] = fmt.Sprintf("op%02d", op)
	}
	testkit.SeedUsers(t, st.db.Accounts(), account.RoleOperator, names...)
	type sub struct{ id, digest string }
	subs := make([]sub, calls)
	for i := range subs {
		r := st.submit(agent, fmt.Sprintf(`{"tool":"weather.search","target":"weather:forecast","args":{"city":"C%d"}}`, i), 201)
		subs[i] = sub{r.str("id"), r.str("digest")}
	}
	type result struct {
		call     int
		operator string
		approve  bool
		err      error
	}
	results := make(chan result, calls*operators)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for op := 0; op < operators; op++ {
		for ci := range subs {
			wg.Add(1)
			go func(op, ci int) {
				defer wg.Done()
				<-start
				name := fmt.Sprintf("op%02d", op)
				var err error
				approve := (op+ci)%2 == 0
				if approve {
					_, err = st.approve(name, subs[ci].id, subs[ci].digest)
				} else {
					_, err = st.queue.Deny(context.Background(), name, "web", subs[ci].id, "no")
				}
				results <- result{ci, name, approve, err}
			}(op, ci)
		}
	}
	close(start)
	wg.Wait()
	close(results)
	winners := make([][]result, calls)
	for r := range results {
		if r.err == nil {
			winners[r.call] = append(winners[r.call], r)
		} else if !strings.Contains(r.err.Error(), "no longer pending") {
			t.Errorf("unexpected refusal: %v", r.err)
		}
	}
	for ci, ws := range winners {
		if len(ws) != 1 {
			t.Errorf("call %d: %d decisions succeeded, want exactly 1", ci, len(ws))
			continue
		}
		c, err := st.queue.Call(context.Background(), subs[ci].id)
		if err != nil {
			t.Fatal(err)
		}
		want := queue.StatusDenied
		if ws[0].approve {
			want = queue.StatusApproved
		}
		if c.Status != want {
			t.Errorf("call %d: status %s, want %s (winner %s)", ci, c.Status, want, ws[0].operator)
		}
		// The audit names the same winner and only one decision.
		var n int
		var who string
		err = st.db.SQL().QueryRow(`SELECT COUNT(*), MAX(principal) FROM audit WHERE call_id = ? AND kind IN ('approved','denied')`, subs[ci].id).Scan(&n, &who)
		if err != nil || n != 1 || who != ws[0].operator {
			t.Errorf("call %d: audit has %d decisions by %q, want 1 by %s", ci, n, who, ws[0].operator)
		}
	}
}

func TestWaiterFreedOnDisconnect(t *testing.T) {
	st := startAPIStack(t)
	agent := st.token("agent:weather", "weather-host")
	r := st.submit(agent, `{"tool":"weather.search","target":"weather:forecast","args":{"city":"Oslo"}}`, 201)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, st.url+"/api/v1/calls/"+r.str("id")+"?wait=60s", nil)
	req.Header.Set("Authorization", "Bearer "+agent)
	go http.DefaultClient.Do(req)
	waitForWaiters(t, st, 1)
	cancel()
	deadline := time.Now().Add(30 * time.Second)
	for st.queue.Waiting() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("waiter still open after the client left: %d", st.queue.Waiting())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRestartKeepsDecisionsAndReleasesWaiters(t *testing.T) {
	dir := t.TempDir()
	st := startAPIStackIn(t, dir)
	agent := st.token("agent:billing-bot", "payments-host")
	r := st.submit(agent, refundBody, 201)
	id := r.str("id")
	other := st.submit(agent, strings.Replace(refundBody, "INV-1", "INV-2", 1), 201)

	// A waiter across a graceful shutdown gets a clean answer, not a hang.
	waited := make(chan apiResponse, 1)
	go func() { waited <- st.do(http.MethodGet, "/api/v1/calls/"+other.str("id")+"?wait=60s", agent, nil) }()
	waitForWaiters(t, st, 1)
	mustApprove(t, st, "alice", id, r.str("digest"))
	stopped := time.Now()
	st.stop()
	select {
	case w := <-waited:
		if w.Status != 200 || w.str("status") != "pending" {
			t.Errorf("waiter across shutdown = %d %s, want 200 pending", w.Status, w.Raw)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("waiter hung across shutdown")
	}
	// A shutdown that held the long-poll would take its 60 s wait; a slow
	// machine adds seconds, not that.
	if d := time.Since(stopped); d >= 30*time.Second {
		t.Errorf("shutdown took %s, half the long-poll's 60 s wait or more", d)
	}

	st2 := startAPIStackIn(t, dir)
	w := st2.do(http.MethodGet, "/api/v1/calls/"+id+"?wait=5s", agent, nil)
	if w.str("status") != "approved" || w.str("grant") == "" {
		t.Fatalf("after restart = %s, want approved with grant", w.Raw)
	}
	red := st2.do(http.MethodPost, "/api/v1/redeem", agent, redeemBody(w.str("grant"), refundCall))
	if red.Status != 200 {
		t.Fatalf("redeem after restart = %d %s", red.Status, red.Raw)
	}
}

func TestPublicEndpoints(t *testing.T) {
	st := startAPIStack(t)
	for _, path := range []string{"/healthz", "/metrics", "/api/v1/keys"} {
		r := st.do(http.MethodGet, path, "", nil)
		if r.Status != 200 {
			t.Errorf("GET %s = %d", path, r.Status)
		}
	}
	keys := st.do(http.MethodGet, "/api/v1/keys", "", nil)
	list, _ := keys.Body["keys"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["kty"] != "OKP" || list[0].(map[string]any)["crv"] != "Ed25519" {
		t.Errorf("JWKS = %s", keys.Raw)
	}
	m := st.do(http.MethodGet, "/metrics", "", nil)
	for _, series := range []string{"countersign_open_waiters", "countersign_submit_seconds", "countersign_redemption_seconds"} {
		if !strings.Contains(string(m.Raw), series) {
			t.Errorf("metrics lack %s", series)
		}
	}
	// Security headers are on errors too.
	res, err := http.Get(st.url + "/nowhere")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.Header.Get("Content-Security-Policy") == "" || res.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("404 lacks security headers: %v", res.Header)
	}
}

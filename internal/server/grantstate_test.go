package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
)

// stepClock is a clock the test moves forward.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestCallGrantState checks the call object's grant_state in each state,
// each answer against the API's description: absent until approved, live
// while the grant can be redeemed, expired once it ran out unredeemed (the
// status staying approved), revoked, and redeemed.
func TestCallGrantState(t *testing.T) {
	doc := loadAPIDoc(t)
	clock := &stepClock{t: time.Now()}
	st := startOpenAPIStack(t, func(q *queue.Config, s *server.Config) { q.Now, s.Now = clock.Now, clock.Now })
	ctx := context.Background()
	token := st.token(t, "agent:billing-bot", "payments-host")
	const get = "GET /api/v1/calls/{id}"
	args := func(amount int) string {
		return fmt.Sprintf(`{"amount_minor":%d,"currency":"USD","reason_code":"duplicate"}`, amount)
	}
	// read answers the call object and checks it against the description.
	read := func(id string) map[string]any {
		t.Helper()
		res := st.do(t, docRequest{op: get, path: "/api/v1/calls/" + id, token: token})
		if res.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", id, res.status, res.body)
		}
		doc.conform(t, get, res.status, res.contentType, res.body)
		return res.json
	}
	want := func(id, status, state string) map[string]any {
		t.Helper()
		v := read(id)
		got, present := v["grant_state"]
		if v["status"] != status || (state == "" && present) || (state != "" && got != state) {
			t.Errorf("call %s: status %v, grant_state %v (present %v); want status %s, grant_state %q", id, v["status"], got, present, status, state)
		}
		return v
	}
	propose := func(amount int) (id, digest string) {
		t.Helper()
		res := st.do(t, docRequest{op: "POST /api/v1/calls", path: "/api/v1/calls", token: token,
			body: `{"tool":"payments.refund","target":"invoice:INV-9","args":` + args(amount) + `}`})
		if res.status != http.StatusCreated {
			t.Fatalf("propose: %d %s", res.status, res.body)
		}
		id, _ = res.json["id"].(string)
		digest, _ = res.json["digest"].(string)
		return id, digest
	}
	approve := func(id, digest string) {
		t.Helper()
		if _, err := st.queue.Approve(ctx, "alice", "cli", id, digest); err != nil {
			t.Fatal(err)
		}
	}

	pending, pendingDigest := propose(11)
	want(pending, "pending", "")

	approve(pending, pendingDigest)
	v := want(pending, "approved", "live")
	grantToken, _ := v["grant"].(string)
	expires, err := time.Parse(time.RFC3339, fmt.Sprint(v["grant_expires_at"]))
	if err != nil {
		t.Fatal(err)
	}

	redeemed, redeemedDigest := propose(12)
	approve(redeemed, redeemedDigest)
	g, _ := json.Marshal(want(redeemed, "approved", "live")["grant"])
	res := st.do(t, docRequest{op: "POST /api/v1/redeem", path: "/api/v1/redeem", token: token,
		body: `{"grant":` + string(g) + `,"call":{"tool":"payments.refund","target":"invoice:INV-9","args":` + args(12) + `}}`})
	if res.status != http.StatusOK {
		t.Fatalf("redeem: %d %s", res.status, res.body)
	}
	want(redeemed, "redeemed", "redeemed")

	revoked, revokedDigest := propose(13)
	approve(revoked, revokedDigest)
	if _, err := st.queue.RevokeGrant(ctx, "alice", "cli", revoked, "wrong invoice"); err != nil {
		t.Fatal(err)
	}
	want(revoked, "revoked", "revoked")

	denied, _ := propose(14)
	if _, err := st.queue.Deny(ctx, "alice", "cli", denied, "no"); err != nil {
		t.Fatal(err)
	}
	want(denied, "denied", "")

	// One second before the grant's expiry it is live; from its expiry on
	// it is expired, as redemption judges it, and the call stays approved
	// with its grant shown.
	clock.Add(expires.Sub(clock.Now()) - time.Second)
	want(pending, "approved", "live")
	clock.Add(time.Second)
	v = want(pending, "approved", "expired")
	if v["grant"] != grantToken {
		t.Errorf("an expired grant's call lost its grant: %v", v["grant"])
	}
	want(redeemed, "redeemed", "redeemed")
	want(revoked, "revoked", "revoked")
	g, _ = json.Marshal(grantToken)
	res = st.do(t, docRequest{op: "POST /api/v1/redeem", path: "/api/v1/redeem", token: token,
		body: `{"grant":` + string(g) + `,"call":{"tool":"payments.refund","target":"invoice:INV-9","args":` + args(11) + `}}`})
	if res.json["reason"] != "expired" {
		t.Errorf("redeeming the expired grant: %d %s, want reason expired", res.status, res.body)
	}
}

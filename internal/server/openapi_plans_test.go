package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

// planToolsYAML is a tool whose calls may be plan items, and one whose
// calls may not.
const planToolsYAML = `tools:
  files.copy:
    audience: payments-host
    target: '^file:.+$'
    approvals: 1
    grant_ttl: 60s
    decide_within: 15m
    outcome_within: 60s
    plan: {max_for: 1h}
    args:
      type: object
      additionalProperties: false
      required: [size]
      properties:
        size: {type: integer, minimum: 1, maximum: 100000}
  files.delete:
    audience: payments-host
    target: '.+'
    args: {type: object, additionalProperties: false}
`

// planBody is a plan of n copies, sizes from first on.
func planBody(ordered bool, first, n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"tool":"files.copy","target":"file:f%d","args":{"size":%d}}`, first+i, first+i)
	}
	return fmt.Sprintf(`{"rationale":"copy the files","ordered":%t,"items":[%s]}`, ordered, strings.Join(items, ","))
}

// checkPlansAgainstDoc runs the plan endpoints through their documented
// answers: submit, refusals, read, mint item by item, redeem, cancel.
func checkPlansAgainstDoc(t *testing.T, checkOn func(*openAPIStack, docRequest, int) docResponse) {
	t.Helper()
	ctx := context.Background()
	st := startOpenAPIStack(t, func(q *queue.Config, _ *server.Config) {
		reg, err := tools.Parse([]byte(planToolsYAML))
		if err != nil {
			t.Fatal(err)
		}
		q.Tools = reg
	})
	testkit.SeedUsers(t, st.db.Accounts(), account.RoleAdmin, "root")
	tok := st.token(t, "agent:planner", "payments-host")
	const submit, get, cancel, mint = "POST /api/v1/plans", "GET /api/v1/plans/{id}", "POST /api/v1/plans/{id}/cancel",
		"POST /api/v1/plans/{id}/items/{n}/grant"

	created := checkOn(st, docRequest{op: submit, path: "/api/v1/plans", token: tok, body: planBody(true, 1, 3)}, http.StatusCreated)
	id, _ := created.json["id"].(string)
	items, _ := created.json["items"].([]any)
	if created.json["status"] != "pending" || len(items) != 3 || mapAt(t, items[2].(map[string]any), "plan")["index"] != 2.0 {
		t.Fatalf("a submitted plan: %s", created.body)
	}
	checkOn(st, docRequest{op: submit, path: "/api/v1/plans", token: tok, body: `{"items":[],"items":[]}`}, http.StatusBadRequest)
	bad := checkOn(st, docRequest{op: submit, path: "/api/v1/plans", token: tok,
		body: `{"rationale":"r","items":[{"tool":"files.copy","target":"file:a","args":{"size":0}},{"tool":"files.delete","target":"x","args":{}}]}`},
		http.StatusUnprocessableEntity)
	if problems, _ := mapAt(t, bad.json, "error")["problems"].([]any); len(problems) != 2 ||
		problems[0].(map[string]any)["path"] != "/items/0/args/size" || problems[1].(map[string]any)["path"] != "/items/1/tool" {
		t.Errorf("an invalid plan's problems: %s", bad.body)
	}
	checkOn(st, docRequest{op: submit, path: "/api/v1/plans", token: tok, body: `{"rationale":"` + strings.Repeat("a", 300<<10) + `"}`}, http.StatusRequestEntityTooLarge)
	checkOn(st, docRequest{op: submit, path: "/api/v1/plans", token: tok, contentType: "text/plain", body: planBody(false, 1, 1)}, http.StatusUnsupportedMediaType)
	checkOn(st, docRequest{op: submit, path: "/api/v1/plans", body: planBody(false, 1, 1)}, http.StatusUnauthorized)
	busy := st.token(t, "agent:busy", "payments-host")
	for i := range queue.MaxPendingPlansPerToken {
		checkOn(st, docRequest{op: submit, path: "/api/v1/plans", token: busy, body: planBody(false, 10*i+100, 1)}, http.StatusCreated)
	}
	checkOn(st, docRequest{op: submit, path: "/api/v1/plans", token: busy, body: planBody(false, 999, 1)}, http.StatusTooManyRequests)

	checkOn(st, docRequest{op: get, path: "/api/v1/plans/" + id, token: tok}, http.StatusOK)
	checkOn(st, docRequest{op: get, path: "/api/v1/plans/" + id, token: busy}, http.StatusNotFound)
	checkOn(st, docRequest{op: mint, path: "/api/v1/plans/" + id + "/items/0/grant", token: tok}, http.StatusConflict)

	// A long-poll: held while the plan is pending, answered as soon as a
	// person approves it.
	checkOn(st, docRequest{op: get, path: "/api/v1/plans/" + id + "?wait=soon", token: tok}, http.StatusBadRequest)
	start := time.Now()
	if held := checkOn(st, docRequest{op: get, path: "/api/v1/plans/" + id + "?wait=300ms", token: tok}, http.StatusOK); held.json["status"] != "pending" ||
		time.Since(start) < 300*time.Millisecond {
		t.Errorf("a long-poll on a pending plan answered after %v: %s", time.Since(start), held.body)
	}
	decided := make(chan error, 1)
	var p *queue.Plan
	go func() {
		time.Sleep(200 * time.Millisecond)
		var err error
		p, err = st.queue.ApprovePlan(ctx, queue.ApprovePlanInput{Operator: "alice", Channel: audit.ChannelCLI, PlanID: id,
			Digest: created.json["digest"].(string)})
		decided <- err
	}()
	start = time.Now()
	approved := checkOn(st, docRequest{op: get, path: "/api/v1/plans/" + id + "?wait=30s", token: tok}, http.StatusOK)
	if err := <-decided; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the long-poll answered %v after the approval, not at once", took)
	}
	if approved.json["status"] != "approved" || approved.json["valid_until"] == nil ||
		mapAt(t, approved.json, "approvals")["received"] != 1.0 {
		t.Errorf("an approved plan: %s", approved.body)
	}
	checkOn(st, docRequest{op: mint, path: "/api/v1/plans/" + id + "/items/1/grant", token: tok}, http.StatusConflict)
	checkOn(st, docRequest{op: mint, path: "/api/v1/plans/" + id + "/items/7/grant", token: tok}, http.StatusNotFound)
	item := checkOn(st, docRequest{op: mint, path: "/api/v1/plans/" + id + "/items/0/grant", token: tok}, http.StatusOK)
	if item.json["status"] != "approved" || item.json["grant"] == nil || mapAt(t, item.json, "plan")["state"] != "approved" {
		t.Fatalf("a minted item: %s", item.body)
	}
	grantJSON, _ := json.Marshal(item.json["grant"])
	checkOn(st, docRequest{op: "POST /api/v1/redeem", path: "/api/v1/redeem", token: tok, body: `{"grant":` + string(grantJSON) +
		`,"call":{"tool":"files.copy","target":"file:f1","args":{"size":1}}}`}, http.StatusOK)
	checkOn(st, docRequest{op: "POST /api/v1/calls/{id}/outcome", path: "/api/v1/calls/" + item.json["id"].(string) + "/outcome",
		token: tok, body: `{"status":"succeeded"}`}, http.StatusOK)
	if _, err := st.queue.Freeze(ctx, "root", audit.ChannelCLI, "files.copy", "", "incident"); err != nil {
		t.Fatal(err)
	}
	checkOn(st, docRequest{op: mint, path: "/api/v1/plans/" + id + "/items/1/grant", token: tok}, http.StatusServiceUnavailable)
	if _, err := st.queue.Unfreeze(ctx, "root", audit.ChannelCLI, "files.copy", ""); err != nil {
		t.Fatal(err)
	}
	second := checkOn(st, docRequest{op: mint, path: "/api/v1/plans/" + id + "/items/1/grant", token: tok}, http.StatusOK)
	cancelled := checkOn(st, docRequest{op: cancel, path: "/api/v1/plans/" + id + "/cancel", token: tok}, http.StatusOK)
	ci, _ := cancelled.json["items"].([]any)
	if cancelled.json["status"] != "cancelled" || cancelled.json["reason"] == nil || len(ci) != 3 ||
		ci[1].(map[string]any)["status"] != "revoked" || ci[2].(map[string]any)["status"] != "cancelled" {
		t.Errorf("a cancelled plan: %s", cancelled.body)
	}
	if second.json["id"] != ci[1].(map[string]any)["id"] {
		t.Errorf("the minted item is not item 1")
	}
	checkOn(st, docRequest{op: cancel, path: "/api/v1/plans/" + id + "/cancel", token: tok}, http.StatusConflict)
	checkOn(st, docRequest{op: cancel, path: "/api/v1/plans/pln_none/cancel", token: tok}, http.StatusNotFound)
	_ = p

	// Through the operator API: listed with a listing token, approved by a
	// person's decide token naming digest and listing (recorded command,
	// unattested), another denied.
	accounts := account.NewService(st.db.Accounts(), nil)
	mintOp := func(scope string) string {
		_, secret, err := accounts.CreateOperatorToken(ctx, account.OperatorTokenSpec{Person: "alice", Scope: scope, Life: time.Hour}, audit.ChannelWeb)
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	read, decide := mintOp(account.ScopeRead), mintOp(account.ScopeDecide)
	const opList, opApprove, opDeny = "GET /api/v1/operator/plans", "POST /api/v1/operator/plans/{id}/approve", "POST /api/v1/operator/plans/{id}/deny"
	toApprove := checkOn(st, docRequest{op: submit, path: "/api/v1/plans", token: tok, body: planBody(false, 200, 2)}, http.StatusCreated)
	toDeny := checkOn(st, docRequest{op: submit, path: "/api/v1/plans", token: tok, body: planBody(false, 300, 1)}, http.StatusCreated)
	checkOn(st, docRequest{op: opList, path: "/api/v1/operator/plans", token: tok}, http.StatusForbidden)
	listed := checkOn(st, docRequest{op: opList, path: "/api/v1/operator/plans", token: read}, http.StatusOK)
	listing := map[string]string{}
	for _, v := range listed.json["plans"].([]any) {
		lp := v.(map[string]any)
		listing[mapAt(t, lp, "plan")["id"].(string)] = lp["listing"].(string)
	}
	aid, did := toApprove.json["id"].(string), toDeny.json["id"].(string)
	if listing[aid] == "" || listing[did] == "" {
		t.Fatalf("the plan listing leaves out a pending plan: %s", listed.body)
	}
	body := func(digest, listed string) string {
		return `{"digest":"` + digest + `","listing":"` + listed + `"}`
	}
	digest := toApprove.json["digest"].(string)
	checkOn(st, docRequest{op: opApprove, path: "/api/v1/operator/plans/" + aid + "/approve", token: read, body: body(digest, listing[aid])}, http.StatusForbidden)
	checkOn(st, docRequest{op: opApprove, path: "/api/v1/operator/plans/" + aid + "/approve", token: decide, body: `{"digest":"` + digest + `"}`}, http.StatusBadRequest)
	// Another plan's listing names other items: refused.
	checkOn(st, docRequest{op: opApprove, path: "/api/v1/operator/plans/" + aid + "/approve", token: decide, body: body(digest, listing[did])}, http.StatusConflict)
	checkOn(st, docRequest{op: opApprove, path: "/api/v1/operator/plans/" + aid + "/approve", token: decide,
		body: body(toDeny.json["digest"].(string), listing[aid])}, http.StatusConflict)
	ok := checkOn(st, docRequest{op: opApprove, path: "/api/v1/operator/plans/" + aid + "/approve", token: decide, body: body(digest, listing[aid])}, http.StatusOK)
	op := mapAt(t, ok.json, "plan")
	given := mapAt(t, op["items"].([]any)[0].(map[string]any), "approvals")["given"].([]any)
	if op["status"] != "approved" || ok.json["listing"] != nil || len(given) != 1 ||
		given[0].(map[string]any)["method"] != "command" || given[0].(map[string]any)["human"] != "unattested" || given[0].(map[string]any)["channel"] != "api" {
		t.Errorf("a plan approved through the operator API: %s", ok.body)
	}
	checkOn(st, docRequest{op: opDeny, path: "/api/v1/operator/plans/" + did + "/deny", token: decide, body: `{"reason":""}`}, http.StatusBadRequest)
	denied := checkOn(st, docRequest{op: opDeny, path: "/api/v1/operator/plans/" + did + "/deny", token: decide, body: `{"reason":"not these files"}`}, http.StatusOK)
	if mapAt(t, denied.json, "plan")["status"] != "denied" {
		t.Errorf("a plan denied through the operator API: %s", denied.body)
	}
	checkOn(st, docRequest{op: opDeny, path: "/api/v1/operator/plans/pln_none/deny", token: decide, body: `{"reason":"no"}`}, http.StatusNotFound)
}

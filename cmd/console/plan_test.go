package main

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/client"
)

// console plan get and cancel read and withdraw a plan the token submitted;
// another token's plan is plan_not_found.
func TestPlanCommands(t *testing.T) {
	url, data := callConsole(t)
	code, secret, stderr := callRun(t, nil, "", "token", "create", "--actor", "agent:reader", "--audience", "reports-host", "--data", data)
	if code != 0 {
		t.Fatalf("token create exited %d: %s", code, stderr)
	}
	env := map[string]string{"COUNTERSIGN_URL": url, "COUNTERSIGN_TOKEN": strings.TrimSpace(secret)}
	c := clientFor(url, env["COUNTERSIGN_TOKEN"])
	p, err := c.SubmitPlan(t.Context(), readerPlan())
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := callRun(t, env, "", "plan", "get", p.ID)
	if v := callJSON(t, stdout); code != 0 || v["id"] != p.ID || v["status"] != "pending" {
		t.Fatalf("plan get: exit %d %s %s", code, stdout, stderr)
	}
	code, stdout, _ = callRun(t, env, "", "plan", "cancel", p.ID)
	if v := callJSON(t, stdout); code != 0 || v["status"] != "cancelled" {
		t.Fatalf("plan cancel: exit %d %s", code, stdout)
	}
	code, stdout, _ = callRun(t, env, "", "plan", "cancel", p.ID)
	if v := callJSON(t, stdout); code != 1 || callErrorCode(v) != "plan_not_pending" {
		t.Fatalf("plan cancel again: exit %d %s", code, stdout)
	}
	_, other, _ := callRun(t, nil, "", "token", "create", "--actor", "agent:reader", "--audience", "reports-host", "--data", data)
	code, stdout, _ = callRun(t, map[string]string{"COUNTERSIGN_URL": url, "COUNTERSIGN_TOKEN": strings.TrimSpace(other)}, "", "plan", "get", p.ID)
	if v := callJSON(t, stdout); code != 1 || callErrorCode(v) != "plan_not_found" {
		t.Fatalf("another token's plan: exit %d %s", code, stdout)
	}
	if code, _, _ := callRun(t, env, "", "plan", "get"); code != 2 {
		t.Fatalf("plan get without an id: exit %d, want 2", code)
	}
}

func clientFor(url, token string) *client.Client { return client.New(url, token) }

func readerPlan() client.PlanProposal {
	return client.PlanProposal{Rationale: "read two reports", Items: []client.CallSpec{
		{Tool: "reports.read", Target: "report:jan", Args: map[string]any{"period": "2026-01"}},
		{Tool: "reports.read", Target: "report:feb", Args: map[string]any{"period": "2026-02"}},
	}}
}

package server

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// TestDecideNeedsAnEnabledDecider: a command-line decision in the name of
// someone who is not an enabled operator or admin changes nothing, so one
// shell user cannot meet a quorum under invented names.
func TestDecideNeedsAnEnabledDecider(t *testing.T) {
	st := startAPIStack(t)
	ctx := context.Background()
	hash, err := account.Hash("a-long-password-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []struct {
		name string
		role account.Role
	}{{"olga", account.RoleOperator}, {"ada", account.RoleAdmin}, {"aud", account.RoleAuditor}, {"gone", account.RoleOperator}} {
		if _, err := accountsOf(st.db).AddUser(ctx, u.name, u.role, hash, "test", audit.ChannelCLI); err != nil {
			t.Fatal(err)
		}
	}
	if err := accountsOf(st.db).DisableUser(ctx, "gone", "test", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	deployer := st.token("agent:deployer", "deploy-host")
	r := st.submit(deployer, `{"tool":"releases.deploy","target":"service:api","args":{"version":"v1.2.3","environment":"production","change_ticket":"CHG-1234"}}`, http.StatusCreated)
	id, digest := r.str("id"), r.str("digest")

	for _, name := range []string{"ghost1", "aud", "gone", ""} {
		_, err := Decide(ctx, st.queue, ControlRequest{Action: "approve", ID: id, Operator: name, Digest: digest})
		if !errors.Is(err, queue.ErrNotADecider) {
			t.Errorf("approve as %q: %v, want queue.ErrNotADecider", name, err)
		}
		if ae := DecisionError(err); ae.Status != http.StatusForbidden || ae.Code != "not_a_decider" {
			t.Errorf("approve as %q: %d %s, want 403 not_a_decider", name, ae.Status, ae.Code)
		}
	}
	var approvals int
	st.db.SQL().QueryRow(`SELECT COUNT(*) FROM approvals WHERE call_id = ?`, id).Scan(&approvals)
	if approvals != 0 {
		t.Fatalf("%d approvals recorded for refused deciders", approvals)
	}
	for _, name := range []string{"olga", "ada"} {
		if _, err := Decide(ctx, st.queue, ControlRequest{Action: "approve", ID: id, Operator: name, Digest: digest}); err != nil {
			t.Fatalf("approve as %s: %v", name, err)
		}
	}
	if c, err := st.queue.Call(ctx, id); err != nil || c.Status != "approved" {
		t.Fatalf("after two real operators: %v %v", c.Status, err)
	}
}

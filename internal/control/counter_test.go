package control

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/testkit/sqlitekit"
	"github.com/countersign/countersign/internal/tools"
)

// TestDecideCounter: action counter answers a call with the edit, and
// carries what the operator typed where the tool asks for the target.
func TestDecideCounter(t *testing.T) {
	reg, err := tools.Parse([]byte(`tools:
  keys.rotate:
    audience: vault-host
    target: '^key:[a-z]+$'
    confirm: target
    counter: {edit: [target]}
    args: {type: object, additionalProperties: false}
`))
	if err != nil {
		t.Fatal(err)
	}
	k := sqlitekit.NewQueue(t, sqlitekit.WithTools(reg))
	testkit.SeedUsers(t, k.DB.Accounts(), account.RoleOperator, "olga")
	ctx := context.Background()
	c, _, err := k.Service.Submit(ctx, queue.Principal{Actor: "agent:ops", Audience: "vault-host"}, []byte(`{"tool":"keys.rotate","target":"key:alpha","args":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Action: ActionCounter, ID: c.ID, Operator: "olga", Digest: c.Digest,
		Edits: map[string]json.RawMessage{"target": json.RawMessage(`"key:beta"`)}}
	var ce *queue.ConfirmationError
	if _, err := Decide(ctx, k.Service, req); !errors.As(err, &ce) {
		t.Fatalf("counter without the target typed: %v, want a confirmation error", err)
	}
	req.Confirm = "key:beta"
	counter, err := Decide(ctx, k.Service, req)
	if err != nil || counter.CounteredFrom != c.ID || counter.Target != "key:beta" || counter.EditedBy != "olga" {
		t.Fatalf("counter: %+v %v", counter, err)
	}
}

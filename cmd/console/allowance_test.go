package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/control"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/scope"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

const allowanceToolsFile = `tools:
  payments.refund:
    description: Refund an invoice
    audience: payments-host
    target: '^invoice:INV-[0-9]+$'
    args:
      type: object
      additionalProperties: false
      required: [amount_minor, currency]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 500000}
        currency: {type: string, enum: [USD, EUR]}
    display: {money: {amount: /amount_minor, currency: /currency}}
    allowance: {max_uses: 10, max_for: 1h, vary: [target, /amount_minor]}
`

// allowanceData is a data directory whose tools file opts payments.refund
// into allowances, with alice's allowance of 5 refunds up to EUR 50.00 given
// and used once, as the console's pages would leave it. It returns the
// allowance and the call it approved.
func allowanceData(t *testing.T) (data string, a *queue.Allowance, covered *queue.Call) {
	t.Helper()
	data = t.TempDir()
	toolsPath := filepath.Join(data, "tools.yaml")
	if err := os.WriteFile(toolsPath, []byte(allowanceToolsFile), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := db.Open(dbPath(data))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	keys, err := grant.OpenKeyring(keysDir(data), Issuer, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.Load(toolsPath)
	if err != nil {
		t.Fatal(err)
	}
	testkit.SeedUsers(t, d.Accounts(), account.RoleOperator, "alice", "bob")
	testkit.SeedUsers(t, d.Accounts(), account.RoleAuditor, "aud")
	q := queue.NewService(queue.Config{Store: d.Store(), Tools: reg, Signer: keys, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()
	payer := queue.Principal{Actor: "agent:billing", Audience: "payments-host"}
	base, _, err := q.Submit(ctx, payer, []byte(`{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":100,"currency":"EUR"}}`))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := reg.Tool("payments.refund")
	maxAmount := int64(5000)
	ch := scope.Choices{Uses: 5, Until: time.Now().Add(30 * time.Minute), TargetPrefix: "invoice:INV-",
		Members: map[string]scope.Member{"/amount_minor": {Max: &maxAmount}}}
	sc, err := scope.Materialise(scope.Call{Actor: base.Actor, Audience: base.Audience, Tool: base.Tool, Target: base.Target,
		ToolDigest: base.ToolDigest, Args: base.Args}, tool, ch, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if a, _, err = q.GiveAllowance(ctx, queue.GiveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: base.ID,
		Digest: base.Digest, ScopeDigest: sc.Digest(), Choices: ch}); err != nil {
		t.Fatal(err)
	}
	covered, _, err = q.Submit(ctx, payer, []byte(`{"tool":"payments.refund","target":"invoice:INV-2","args":{"amount_minor":2500,"currency":"EUR"}}`))
	if err != nil || covered.Status != queue.StatusApproved {
		t.Fatalf("covered call: %v, %v", covered, err)
	}
	return data, a, covered
}

// TestAllowanceListAndRevoke: console allowance list shows what each
// allowance covers in the words its giver read, its uses and its people;
// revoke, with no server running, leaves who may to the queue, says its
// refusals in the error table's words, and revokes the grants the
// allowance minted.
func TestAllowanceListAndRevoke(t *testing.T) {
	data, a, covered := allowanceData(t)
	code, out, errs := userRun(t, "", "allowance", "list", "--data", data)
	for _, want := range []string{a.ID + "  live  payments.refund by agent:billing for payments-host", "1 of 5 used", "given by alice",
		"confirmers alice (1 needed)", "scope digest " + a.ScopeDigest,
		`up to 5 payments.refund calls by agent:billing for payments-host, any target starting with "invoice:INV-"`, "each at most EUR 50.00"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("allowance list = %d, %q, %q; want it to say %q", code, out, errs, want)
		}
	}
	steps := []struct {
		args []string
		code int
		says string
	}{
		{[]string{"allowance", "revoke", a.ID, "--as", "aud", "--reason", "stop"}, 1, `not_a_decider: not an enabled operator or admin: "aud" is an auditor`},
		{[]string{"allowance", "revoke", "alw_none", "--as", "bob", "--reason", "stop"}, 1, "allowance_not_found"},
		{[]string{"allowance", "revoke", a.ID, "--as", "bob"}, 2, "usage: console allowance revoke ID --as NAME --reason TEXT"},
		{[]string{"allowance", "revoke", a.ID, "--as", "bob", "--reason", "wrong customer"}, 0, "Revoked allowance " + a.ID + " (payments.refund by agent:billing, 1 of 5 used)"},
		{[]string{"allowance", "revoke", a.ID, "--as", "bob", "--reason", "again"}, 1, "allowance_ended: allowance " + a.ID + " has ended (revoked)"},
		{[]string{"allowance", "list"}, 0, "no allowance in force"},
		{[]string{"allowance", "list", "--all"}, 0, "ended revoked at"},
		{[]string{"allowance"}, 2, "usage: console allowance list"},
	}
	for _, s := range steps {
		code, out, errs := userRun(t, "", append(s.args, "--data", data)...)
		if code != s.code || !strings.Contains(out+errs, s.says) || strings.Contains(errs, "queue:") {
			t.Errorf("console %v = %d %q %q, want %d saying %q", s.args, code, out, errs, s.code, s.says)
		}
	}
	code, out, errs = userRun(t, "", "allowance", "list", "--all", "--json", "--data", data)
	var got control.Allowance
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got.ID != a.ID || got.State != queue.EndRevoked ||
		got.EndedBy != "bob" || got.Used != 1 || got.Uses != 5 {
		t.Fatalf("allowance list --json = %d, %q (%v), %q", code, out, err, errs)
	}
	d, err := db.Open(dbPath(data))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := d.Store().Call(context.Background(), covered.ID)
	if err != nil || c.Revoked == nil || c.Revoked.By != "bob" || c.Revoked.Reason != "wrong customer" || c.Revoked.Channel != audit.ChannelCLI {
		t.Fatalf("the covered call's grant after console allowance revoke: %+v, %v", c.Revoked, err)
	}
}

// TestPolicyReplayScope: policy replay --scope reports the past calls an
// allowance's scope, or a scope in a file, covers, and refuses an
// allowance that does not exist.
func TestPolicyReplayScope(t *testing.T) {
	data, a, covered := allowanceData(t)
	code, stdout, stderr := runConsole(t, "", "policy", "replay", "--scope", a.ID, "--data", data, "--since", "1h")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"scope " + a.ScopeDigest, "it covers 2 of the 2 calls of payments.refund", "it allows 5 uses",
		a.BaseCall, covered.ID, "EUR 50.00"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	file := filepath.Join(t.TempDir(), "scope.json")
	narrow := strings.Replace(string(a.Scope), `"max":5000`, `"max":1000`, 1)
	if narrow == string(a.Scope) {
		t.Fatalf("the scope has no max of 5000: %s", a.Scope)
	}
	if err := os.WriteFile(file, []byte(narrow), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runConsole(t, "", "policy", "replay", "--scope", file, "--data", data, "--json")
	var got struct {
		Covered, Calls int64
		Listed         []struct {
			CallID string `json:"call_id"`
		}
	}
	if err := json.Unmarshal([]byte(stdout), &got); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s %s", code, err, stdout, stderr)
	}
	if got.Covered != 1 || got.Calls != 2 || len(got.Listed) != 1 || got.Listed[0].CallID != a.BaseCall {
		t.Errorf("a scope up to EUR 10.00 covers %+v, want only the base call", got)
	}
	if code, _, stderr := runConsole(t, "", "policy", "replay", "--scope", "alw_nope", "--data", data); code != 1 || !strings.Contains(stderr, "allowance") {
		t.Errorf("an unknown allowance: exit %d, %s", code, stderr)
	}
}

// TestAllowanceListThroughTheSocket: with a server running, console
// allowance list asks it through the control socket (here in a directory
// that holds no database, so only the socket can answer), in words with
// the tools the server runs with.
func TestAllowanceListThroughTheSocket(t *testing.T) {
	data, a, _ := allowanceData(t)
	d, err := db.Open(dbPath(data))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	reg, err := tools.Load(filepath.Join(data, "tools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	q := queue.NewService(queue.Config{Store: d.Store(), Tools: reg, Logger: log})
	served := t.TempDir()
	ln, err := control.Listen(controlPath(served))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); control.Serve(ctx, ln, q, log) }()
	defer func() { stop(); <-done }()
	code, out, errs := userRun(t, "", "allowance", "list", "--data", served)
	for _, want := range []string{a.ID + "  live  payments.refund", "1 of 5 used", `up to 5 payments.refund calls by agent:billing`} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("allowance list through the socket = %d %q %q, want %q", code, out, errs, want)
		}
	}
	code, out, _ = userRun(t, "", "allowance", "list", "--json", "--giver", "bob", "--data", served)
	if code != 0 || strings.TrimSpace(out) != "" {
		t.Errorf("allowance list --giver bob = %d %q, want nothing", code, out)
	}
}

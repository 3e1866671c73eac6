package control

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/testkit/sqlitekit"
)

// stack is a database, a keyring and the example tools behind a queue.
type stack struct {
	db       *db.DB
	queue    *queue.Service
	accounts *account.Service
}

func newStack(t *testing.T) *stack {
	t.Helper()
	k := sqlitekit.NewQueue(t)
	return &stack{db: k.DB, queue: k.Service, accounts: account.NewService(k.DB.Accounts(), k.Clock.Now)}
}

// TestDecideNeedsAnEnabledDecider: a command-line decision in the name of
// someone who is not an enabled operator or admin changes nothing, so one
// shell user cannot meet a quorum under invented names.
func TestDecideNeedsAnEnabledDecider(t *testing.T) {
	st := newStack(t)
	ctx := context.Background()
	hash, err := account.Hash("a-long-password-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []struct {
		name string
		role account.Role
	}{{"olga", account.RoleOperator}, {"ada", account.RoleAdmin}, {"aud", account.RoleAuditor}, {"gone", account.RoleOperator}} {
		if _, err := st.accounts.AddUser(ctx, u.name, u.role, hash, "test", audit.ChannelCLI); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.accounts.DisableUser(ctx, "gone", "test", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	deployer := queue.Principal{Actor: "agent:deployer", Audience: "deploy-host"}
	c, _, err := st.queue.Submit(ctx, deployer, []byte(`{"tool":"releases.deploy","target":"service:api","args":{"version":"v1.2.3","environment":"production","change_ticket":"CHG-1234"}}`))
	if err != nil {
		t.Fatal(err)
	}
	id, digest := c.ID, c.Digest

	// The message says what is wrong with the name, so the person knows
	// what to do next: create the account, or use another one.
	for name, says := range map[string]string{
		"ghost1": "add the account with 'console user add NAME --role operator'",
		"aud":    `"aud" is an auditor, and only operators and admins decide`,
		"gone":   `"gone" is disabled`,
		"":       "add the account",
	} {
		_, err := Decide(ctx, st.queue, Request{Action: "approve", ID: id, Operator: name, Digest: digest})
		if !errors.Is(err, queue.ErrNotADecider) {
			t.Errorf("approve as %q: %v, want queue.ErrNotADecider", name, err)
		}
		if ae := server.ErrorOf(err); ae.Status != http.StatusForbidden || ae.Code != "not_a_decider" || !strings.Contains(ae.Message, says) {
			t.Errorf("approve as %q: %d %s %q, want 403 not_a_decider saying %q", name, ae.Status, ae.Code, ae.Message, says)
		}
	}
	var approvals int
	st.db.SQL().QueryRow(`SELECT COUNT(*) FROM approvals WHERE call_id = ?`, id).Scan(&approvals)
	if approvals != 0 {
		t.Fatalf("%d approvals recorded for refused deciders", approvals)
	}
	for _, name := range []string{"olga", "ada"} {
		if _, err := Decide(ctx, st.queue, Request{Action: "approve", ID: id, Operator: name, Digest: digest}); err != nil {
			t.Fatalf("approve as %s: %v", name, err)
		}
	}
	if c, err := st.queue.Call(ctx, id); err != nil || c.Status != "approved" {
		t.Fatalf("after two real operators: %v %v", c.Status, err)
	}
}

// TestDecideAsksWhatTheBrowserAsks: an approval from the shell needs the
// target typed when the tool asks for it, and the acknowledgement of a
// deception warning, exactly as one from the browser.
func TestDecideAsksWhatTheBrowserAsks(t *testing.T) {
	st := newStack(t)
	ctx := context.Background()
	hash, err := account.Hash("a-long-password-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.accounts.AddUser(ctx, "olga", account.RoleOperator, hash, "test", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	files, _, err := st.queue.Submit(ctx, queue.Principal{Actor: "agent:janitor", Audience: "files-host"},
		[]byte(`{"tool":"files.delete","target":"file:/srv/shared/a.csv","args":{"reason":"old"}}`))
	if err != nil {
		t.Fatal(err)
	}
	mail, _, err := st.queue.Submit(ctx, queue.Principal{Actor: "agent:mailer", Audience: "mail-host"},
		[]byte(`{"tool":"email.send","target":"mailbox:billing@example.com","args":{"to":[{"address":"ops@example.com"}],"subject":"report\u202Efdp.exe","body":"hi"}}`))
	if err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		req  Request
		code string
	}{
		{Request{Action: "approve", ID: files.ID, Operator: "olga", Digest: files.Digest}, "confirmation_mismatch"},
		{Request{Action: "approve", ID: files.ID, Operator: "olga", Digest: files.Digest, Confirm: "file:/srv/shared/b.csv"}, "confirmation_mismatch"},
		{Request{Action: "approve", ID: mail.ID, Operator: "olga", Digest: mail.Digest}, "warning_not_acknowledged"},
	}
	for _, r := range refused {
		if _, err := Decide(ctx, st.queue, r.req); server.ErrorOf(err).Code != r.code {
			t.Errorf("%+v: %v, want %s", r.req, err, r.code)
		}
	}
	var approvals int
	st.db.SQL().QueryRow(`SELECT COUNT(*) FROM approvals`).Scan(&approvals)
	if approvals != 0 {
		t.Fatalf("%d approvals recorded without the confirmations", approvals)
	}
	for _, req := range []Request{
		{Action: "approve", ID: files.ID, Operator: "olga", Digest: files.Digest, Confirm: files.Target},
		{Action: "approve", ID: mail.ID, Operator: "olga", Digest: mail.Digest, AcceptWarnings: true},
	} {
		if c, err := Decide(ctx, st.queue, req); err != nil || c.Status != queue.StatusApproved {
			t.Errorf("%+v: %v", req, err)
		}
	}
}

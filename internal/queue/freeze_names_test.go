package queue_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

// namesEnv is newEnv over examples/tools.yaml with two MCP servers in the
// tools file (hostile, whose tool exfil is mirrored, and quiet, which
// serves nothing yet), an admin, and a token for agent:billing-bot.
func namesEnv(t *testing.T) *env {
	t.Helper()
	data, err := os.ReadFile("../../examples/tools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data = append(data, "\nmcp:\n  hostile:\n    command: [hostile-mcp]\n  quiet:\n    command: [quiet-mcp]\n"...)
	reg, err := tools.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, func(c *queue.Config) { c.Tools = reg })
	mirror(t, e, "exfil")
	testkit.SeedUsers(t, e.db.Accounts(), account.RoleAdmin, "root")
	if _, _, err := account.NewService(e.db.Accounts(), nil).CreateToken(context.Background(),
		"agent:billing-bot", "payments-host", "", "root", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	return e
}

// mirror makes the server hostile serve the tools named.
func mirror(t *testing.T, e *env, names ...string) {
	t.Helper()
	var ts []*tools.Tool
	for _, n := range names {
		m, err := tools.Mirror(tools.MirrorSpec{Server: "hostile", Name: n, InputSchema: []byte(`{"type":"object","properties":{}}`)})
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, m)
	}
	e.q.Tools().SetMirrored("hostile", ts)
}

// submitHostile submits a call of hostile/NAME and returns the error.
func submitHostile(e *env, name string) error {
	p := queue.Principal{Actor: "agent:desk", Audience: "hostile"}
	_, _, err := e.q.Submit(context.Background(), p, []byte(`{"tool":"hostile/`+name+`","target":"mcp:hostile","args":{}}`))
	return err
}

// TestFreezeNamesWhatExists: a freeze of a name that matches nothing is
// refused with the close matches, and stores nothing.
func TestFreezeNamesWhatExists(t *testing.T) {
	ctx := context.Background()
	e := namesEnv(t)
	cases := []struct {
		tool, actor string
		code        string // the NameError's field and kind
		near        string
	}{
		{"Payments.Refund", "", "invalid tool", "payments.refund"},
		{"payments.refund ", "", "invalid tool", "payments.refund"},
		{" payments.refund", "", "invalid tool", "payments.refund"},
		{"payments.refnd", "", "unknown tool", "payments.refund"},
		{"hostile/Exfil", "", "unknown tool", "hostile/exfil"},
		{"hostil", "", "unknown tool", "hostile"},
		{"", "Agent:Billing-Bot", "unknown actor", "agent:billing-bot"},
		{"", "agent:billing-bot ", "invalid actor", "agent:billing-bot"},
		{"", "agent:biling-bot", "unknown actor", "agent:billing-bot"},
		{"payments.refund", "agent:nobody", "unknown actor", ""},
	}
	for _, tc := range cases {
		_, err := e.q.Freeze(ctx, "alice", audit.ChannelCLI, tc.tool, tc.actor, "incident 5")
		var ne *queue.NameError
		if !errors.As(err, &ne) {
			t.Errorf("freeze of tool %q actor %q = %v, want a NameError", tc.tool, tc.actor, err)
			continue
		}
		kind := "unknown "
		if ne.Invalid {
			kind = "invalid "
		}
		if kind+ne.Field != tc.code || (tc.near != "" && !slices.Contains(ne.Near, tc.near)) {
			t.Errorf("freeze of tool %q actor %q = %s %s near %q, want %s near %q", tc.tool, tc.actor, kind, ne.Field, ne.Near, tc.code, tc.near)
		}
		if tc.near == "" && len(ne.Near) > 0 {
			t.Errorf("freeze of tool %q actor %q lists %q as close", tc.tool, tc.actor, ne.Near)
		}
	}
	fz, err := e.q.Freezes(ctx)
	if err != nil || len(fz) != 0 {
		t.Errorf("freezes in force after refusals: %v %v", fz, err)
	}
	// Known names freeze: a tool of the file, an actor with a token, an
	// actor with calls, a mirrored tool.
	MustApproved(t, e) // a call by agent:a
	for _, n := range [][2]string{{"payments.refund", ""}, {"", "agent:billing-bot"}, {"", "agent:a"}, {"hostile/exfil", "agent:a"}} {
		f, err := e.q.Freeze(ctx, "alice", audit.ChannelCLI, n[0], n[1], "incident 5")
		if err != nil || len(f.Unseen) != 0 {
			t.Errorf("freeze of tool %q actor %q = %+v, %v", n[0], n[1], f, err)
		}
	}
}

// TestFreezeMCPServer: a freeze of an MCP server's name stops every tool
// it serves, those it serves now and those it serves later, and is lifted
// by the same name.
func TestFreezeMCPServer(t *testing.T) {
	ctx := context.Background()
	e := namesEnv(t)
	f, err := e.q.Freeze(ctx, "alice", audit.ChannelCLI, "hostile", "", "incident 6")
	if err != nil {
		t.Fatal(err)
	}
	if f.Tool != "hostile"+queue.ServerWildcard || f.Scope() != "every tool of the MCP server hostile" {
		t.Errorf("freeze of hostile: tool %q scope %q", f.Tool, f.Scope())
	}
	var fe *queue.FrozenError
	if err := submitHostile(e, "exfil"); !errors.As(err, &fe) {
		t.Errorf("hostile/exfil under the server's freeze: %v, want frozen", err)
	}
	mirror(t, e, "exfil", "later")
	if err := submitHostile(e, "later"); !errors.As(err, &fe) {
		t.Errorf("hostile/later, served after the freeze: %v, want frozen", err)
	}
	// Another server's tools and the native tools are not frozen.
	if _, _, err := e.q.Submit(ctx, agent, []byte(`{"tool":"payments.refund","target":"invoice:INV-5","args":`+refundArgs+`}`)); err != nil {
		t.Errorf("payments.refund under hostile's freeze: %v", err)
	}
	// A server of the tools file that serves nothing yet is a name too.
	if _, err := e.q.Freeze(ctx, "alice", audit.ChannelCLI, "quiet", "", "incident 6"); err != nil {
		t.Errorf("freeze of the server quiet: %v", err)
	}
	if _, err := e.q.Unfreeze(ctx, "root", audit.ChannelCLI, "hostile", ""); err != nil {
		t.Fatalf("unfreeze hostile: %v", err)
	}
	if err := submitHostile(e, "later"); err != nil {
		t.Errorf("hostile/later after the lift: %v", err)
	}
}

// TestFreezeAllowUnknown: a tool or actor not seen yet is frozen only when
// asked for explicitly, and the freeze says so; it then stops the calls
// once they come. A name that cannot be a call's is refused even then.
func TestFreezeAllowUnknown(t *testing.T) {
	ctx := context.Background()
	e := namesEnv(t)
	req := queue.FreezeRequest{By: "alice", Channel: audit.ChannelCLI, Actor: "agent:new", Reason: "not yet deployed"}
	if _, err := e.q.FreezeWith(ctx, req); err == nil {
		t.Fatal("an unseen actor was frozen without AllowUnknown")
	}
	req.AllowUnknown = true
	f, err := e.q.FreezeWith(ctx, req)
	if err != nil || !slices.Equal(f.Unseen, []string{"agent:new"}) {
		t.Fatalf("FreezeWith(AllowUnknown) = %+v, %v; want the freeze, saying agent:new is unseen", f, err)
	}
	p := queue.Principal{Actor: "agent:new", Audience: "payments-host"}
	var fe *queue.FrozenError
	if _, _, err := e.q.Submit(ctx, p, []byte(`{"tool":"payments.refund","target":"invoice:INV-9","args":`+refundArgs+`}`)); !errors.As(err, &fe) {
		t.Errorf("a call by agent:new: %v, want frozen", err)
	}
	var ne *queue.NameError
	for _, tool := range []string{"Payments.Refund", "payments.refund "} {
		_, err := e.q.FreezeWith(ctx, queue.FreezeRequest{By: "alice", Channel: audit.ChannelCLI, Tool: tool, Reason: "x", AllowUnknown: true})
		if !errors.As(err, &ne) || !ne.Invalid {
			t.Errorf("FreezeWith(%q, AllowUnknown) = %v, want an invalid name", tool, err)
		}
	}
}

package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
)

// peopleTools are tools with a reviewer condition, a passkey requirement,
// and an ask rule that asks two people and a passkey.
const peopleTools = `tools:
  vault.rotate:
    audience: vault-host
    target: '^secret:[a-z]+$'
    approvals: 1
    approvers: {roles: [admin], groups: [security]}
    args: {type: object, additionalProperties: false, properties: {}}
  funds.transfer:
    audience: bank-host
    target: '^account:[0-9]+$'
    approvals: 1
    approve_with: passkey
    args:
      type: object
      additionalProperties: false
      required: [amount_minor]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 100000000}
  funds.quote:
    audience: bank-host
    target: '^account:[0-9]+$'
    approvals: 1
    rules:
      - id: big-quotes
        when: args.amount_minor > 1000000
        then: ask
        approvals: 2
        approve_with: passkey
    args:
      type: object
      additionalProperties: false
      required: [amount_minor]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 100000000}
`

var (
	vaultBot = queue.Principal{Actor: "agent:vault", Audience: "vault-host", Owners: []string{"olga", "team:vault-admins"}}
	bankBot  = queue.Principal{Actor: "agent:bank", Audience: "bank-host", Owners: []string{"oidc:idp.example.com/00u-owen"}}
)

func newPeopleEnv(t *testing.T) *env {
	t.Helper()
	return newPeopleEnvFrom(t, peopleTools)
}

// newPeopleEnvFrom is newPeopleEnv with the tools file yaml.
func newPeopleEnvFrom(t *testing.T, yaml string) *env {
	t.Helper()
	pol, err := policy.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, func(c *queue.Config) { c.Tools, c.Policy = pol.Registry(), pol })
	testkit.SeedUsers(t, e.db.Accounts(), account.RoleOperator, "olga", "sam")
	testkit.SeedUsers(t, e.db.Accounts(), account.RoleAdmin, "root")
	// Single-sign-on accounts with groups from their provider.
	accountsUpdate(t, e, func(tx account.Tx) error {
		for _, u := range []account.User{
			{Name: "oidc:idp.example.com/00u-sec", Role: account.RoleOperator, Kind: account.KindOIDC, Issuer: "https://idp.example.com",
				Subject: "00u-sec", ShortName: "sec", Groups: []string{"security"}},
			{Name: "oidc:idp.example.com/00u-vaulter", Role: account.RoleOperator, Kind: account.KindOIDC, Issuer: "https://idp.example.com",
				Subject: "00u-vaulter", ShortName: "vaulter", Groups: []string{"security", "vault-admins"}},
			{Name: "oidc:idp.example.com/00u-owen", Role: account.RoleAdmin, Kind: account.KindOIDC, Issuer: "https://idp.example.com",
				Subject: "00u-owen", ShortName: "owen"},
		} {
			u.CreatedAt = time.Now().UTC().Truncate(time.Millisecond)
			if err := tx.InsertUser(u); err != nil {
				return err
			}
		}
		return nil
	})
	return e
}

func accountsUpdate(t *testing.T, e *env, fn func(account.Tx) error) {
	t.Helper()
	if err := e.db.Accounts().Update(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}

func submitAs(t *testing.T, e *env, who queue.Principal, tool, target, args string) *queue.Call {
	t.Helper()
	c, _, err := e.q.Submit(context.Background(), who, []byte(fmt.Sprintf(`{"tool":%q,"target":%q,"args":%s}`, tool, target, args)))
	if err != nil {
		t.Fatalf("Submit %s: %v", tool, err)
	}
	return c
}

// TestOwnersAndApprovers: owners of an agent never approve its calls, by
// name, by short name or through a team; a tool's reviewer condition lets
// only the roles and groups it names approve; both hold on every channel.
func TestOwnersAndApprovers(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name     string
		operator string
		channel  string
		want     error
	}{
		{"an owner by name", "olga", audit.ChannelWeb, queue.ErrOwner},
		{"an owner by name, from the command line", "olga", audit.ChannelCLI, queue.ErrOwner},
		{"an owner through a team, though the condition allows the group", "oidc:idp.example.com/00u-vaulter", audit.ChannelWeb, queue.ErrOwner},
		{"an operator outside the roles and groups", "sam", audit.ChannelWeb, queue.ErrNotAnApprover},
		{"an operator outside them, from the command line", "sam", audit.ChannelCLI, queue.ErrNotAnApprover},
		{"a member of the group", "oidc:idp.example.com/00u-sec", audit.ChannelWeb, nil},
		{"an admin", "root", audit.ChannelCLI, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newPeopleEnv(t)
			c := submitAs(t, e, vaultBot, "vault.rotate", "secret:db", `{}`)
			if got := strings.Join(c.Owners, ","); got != "olga,team:vault-admins" {
				t.Fatalf("owners on the call = %q", got)
			}
			_, err := e.q.Approve(ctx, tc.operator, tc.channel, c.ID, c.Digest)
			if !matches(err, tc.want) {
				t.Fatalf("Approve(%s) = %v, want %v", tc.operator, err, tc.want)
			}
			got, _ := e.q.Call(ctx, c.ID)
			if want := queue.StatusPending; tc.want != nil && got.Status != want {
				t.Errorf("status %s after a refusal", got.Status)
			}
			if tc.want == nil && got.Status != queue.StatusApproved {
				t.Errorf("status %s after an allowed approval", got.Status)
			}
		})
	}
	t.Run("the refusal names who may approve", func(t *testing.T) {
		e := newPeopleEnv(t)
		c := submitAs(t, e, vaultBot, "vault.rotate", "secret:db", `{}`)
		_, err := e.q.Approve(ctx, "sam", audit.ChannelWeb, c.ID, c.Digest)
		if err == nil || !strings.Contains(err.Error(), "role admin, or group security") {
			t.Errorf("refusal = %v", err)
		}
		var ae *queue.ApproversError
		if !errors.As(err, &ae) || ae.Who != "role admin, or group security" {
			t.Errorf("ApproversError = %+v", ae)
		}
	})
	t.Run("owners come from the token when the call is made", func(t *testing.T) {
		e := newPeopleEnv(t)
		c := submitAs(t, e, vaultBot, "vault.rotate", "secret:db", `{}`)
		stored, err := e.q.Call(ctx, c.ID)
		if err != nil || strings.Join(stored.Owners, ",") != "olga,team:vault-admins" ||
			strings.Join(stored.Approvers.Roles, ",") != "admin" || strings.Join(stored.Approvers.Groups, ",") != "security" {
			t.Fatalf("stored call = owners %v approvers %+v, %v", stored.Owners, stored.Approvers, err)
		}
	})
	t.Run("an owner by single-sign-on principal", func(t *testing.T) {
		e := newPeopleEnv(t)
		c := submitAs(t, e, bankBot, "funds.quote", "account:42", `{"amount_minor":5}`)
		if _, err := e.q.Approve(ctx, "oidc:idp.example.com/00u-owen", audit.ChannelWeb, c.ID, c.Digest); !errors.Is(err, queue.ErrOwner) {
			t.Errorf("the owner's own approval: %v, want ErrOwner", err)
		}
	})
}

// fakeProof is a passkey proof as the server hands it over after
// internal/passkey verified the assertion; the queue checks that it names
// this call, digest and operator, and advances the passkey's counter.
func fakeProof(c *queue.Call, operator string, id []byte, before, after uint32) *queue.PasskeyProof {
	ev, _ := json.Marshal(map[string]any{"format": "countersign.passkey-approval.v1", "call_id": c.ID, "digest": c.Digest,
		"operator": operator, "credential_id": "AQID", "sign_count": after})
	return &queue.PasskeyProof{Operator: operator, CredentialID: id, Name: "laptop", CountBefore: before, CountAfter: after,
		Record: []byte(`{"id":"AQID"}`), Evidence: ev}
}

func addPasskey(t *testing.T, e *env, user string, id []byte, count uint32) {
	t.Helper()
	accountsUpdate(t, e, func(tx account.Tx) error {
		return tx.InsertPasskey(account.Passkey{ID: id, User: user, Name: "laptop", PublicKey: []byte{1}, SignCount: count,
			Record: []byte(`{}`), CreatedAt: time.Now().UTC().Truncate(time.Millisecond)})
	})
}

// TestPasskeyRequired: a call of a tool (or of an ask rule) that requires
// passkeys is approved only with a passkey proof, never by click, the
// control socket or the command line; the proof must be for this call,
// digest and operator, and its counter must be the stored one.
func TestPasskeyRequired(t *testing.T) {
	ctx := context.Background()
	key := []byte{1, 2, 3}
	t.Run("click and command line refused, passkey accepted", func(t *testing.T) {
		e := newPeopleEnv(t)
		addPasskey(t, e, "alice", key, 5)
		c := submitAs(t, e, bankBot, "funds.transfer", "account:1", `{"amount_minor":100}`)
		if !c.RequirePasskey {
			t.Fatal("the call does not require a passkey")
		}
		for _, ch := range []string{audit.ChannelWeb, audit.ChannelCLI} {
			if _, err := e.q.Approve(ctx, "alice", ch, c.ID, c.Digest); !errors.Is(err, queue.ErrPasskeyRequired) {
				t.Errorf("Approve through %s = %v, want ErrPasskeyRequired", ch, err)
			}
		}
		got, err := e.q.ApproveWith(ctx, queue.ApproveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: c.ID, Digest: c.Digest,
			Passkey: fakeProof(c, "alice", key, 5, 6)})
		if err != nil || got.Status != queue.StatusApproved {
			t.Fatalf("approve with a passkey = %v, %v", got, err)
		}
		stored, _ := e.q.Call(ctx, c.ID)
		a := stored.Approvals[0]
		if a.Passkey == nil || a.Passkey.Name != "laptop" || string(a.Passkey.CredentialID) != string(key) || !strings.Contains(string(a.Passkey.Evidence), c.ID) {
			t.Errorf("stored approval = %+v", a)
		}
		if a.Method != queue.MethodPasskey {
			t.Errorf("stored approval's method = %q, want %q", a.Method, queue.MethodPasskey)
		}
		pks, _ := e.db.Accounts().Passkeys(ctx, "alice")
		if pks[0].SignCount != 6 || pks[0].LastUsedAt.IsZero() {
			t.Errorf("passkey after the approval: count %d, last used %v", pks[0].SignCount, pks[0].LastUsedAt)
		}
		entries := auditKinds(t, e, c.ID)
		if !strings.Contains(entries[audit.KindApproved], `"method":"passkey"`) || !strings.Contains(entries[audit.KindApproved], `"evidence":{`) ||
			!strings.Contains(entries[audit.KindSubmitted], `"approve_with":"passkey"`) {
			t.Errorf("audit = %v", entries)
		}
	})
	t.Run("an ask rule requires it for the calls it matches", func(t *testing.T) {
		e := newPeopleEnv(t)
		small := submitAs(t, e, bankBot, "funds.quote", "account:1", `{"amount_minor":5}`)
		big := submitAs(t, e, bankBot, "funds.quote", "account:1", `{"amount_minor":2000000}`)
		if small.RequirePasskey || !big.RequirePasskey || big.ApprovalsRequired != 2 {
			t.Fatalf("small requires %v, big requires %v with %d approvals", small.RequirePasskey, big.RequirePasskey, big.ApprovalsRequired)
		}
		if _, err := e.q.Approve(ctx, "alice", audit.ChannelWeb, small.ID, small.Digest); err != nil {
			t.Errorf("a click on the small quote: %v", err)
		}
		if _, err := e.q.Approve(ctx, "alice", audit.ChannelWeb, big.ID, big.Digest); !errors.Is(err, queue.ErrPasskeyRequired) {
			t.Errorf("a click on the big quote: %v", err)
		}
		// The owner does not count toward the rule's quorum either.
		addPasskey(t, e, "oidc:idp.example.com/00u-owen", []byte{7}, 0)
		_, err := e.q.ApproveWith(ctx, queue.ApproveInput{Operator: "oidc:idp.example.com/00u-owen", Channel: audit.ChannelWeb,
			CallID: big.ID, Digest: big.Digest, Passkey: fakeProof(big, "oidc:idp.example.com/00u-owen", []byte{7}, 0, 0)})
		if !errors.Is(err, queue.ErrOwner) {
			t.Errorf("the owner's passkey approval = %v, want ErrOwner", err)
		}
		if got, _ := e.q.Call(ctx, big.ID); len(got.Approvals) != 0 {
			t.Errorf("approvals after the owner's try: %d", len(got.Approvals))
		}
	})
	t.Run("proofs that do not fit approve nothing", func(t *testing.T) {
		e := newPeopleEnv(t)
		addPasskey(t, e, "alice", key, 5)
		addPasskey(t, e, "bob", []byte{9}, 0)
		c := submitAs(t, e, bankBot, "funds.transfer", "account:1", `{"amount_minor":100}`)
		other := submitAs(t, e, bankBot, "funds.transfer", "account:2", `{"amount_minor":100}`)
		cases := []struct {
			name  string
			in    queue.ApproveInput
			want  error
			isErr bool
		}{
			{"evidence for another call", queue.ApproveInput{Operator: "alice", CallID: c.ID, Digest: c.Digest, Passkey: fakeProof(other, "alice", key, 5, 6)},
				queue.ErrDigestMismatch, true},
			{"evidence of another operator", queue.ApproveInput{Operator: "alice", CallID: c.ID, Digest: c.Digest, Passkey: fakeProof(c, "bob", key, 5, 6)},
				queue.ErrDigestMismatch, true},
			{"another operator's passkey", queue.ApproveInput{Operator: "alice", CallID: c.ID, Digest: c.Digest, Passkey: fakeProof(c, "alice", []byte{9}, 0, 1)},
				queue.ErrPasskeyChanged, true},
			{"a counter already moved on", queue.ApproveInput{Operator: "alice", CallID: c.ID, Digest: c.Digest, Passkey: fakeProof(c, "alice", key, 4, 6)},
				queue.ErrPasskeyChanged, true},
		}
		for _, tt := range cases {
			tt.in.Channel = audit.ChannelWeb
			if _, err := e.q.ApproveWith(ctx, tt.in); !errors.Is(err, tt.want) {
				t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
			}
		}
		if got, _ := e.q.Call(ctx, c.ID); got.Status != queue.StatusPending || len(got.Approvals) != 0 {
			t.Errorf("after refused proofs: %s with %d approvals", got.Status, len(got.Approvals))
		}
		pks, _ := e.db.Accounts().Passkeys(ctx, "alice")
		if pks[0].SignCount != 5 {
			t.Errorf("a refused approval moved the counter to %d", pks[0].SignCount)
		}
	})
	t.Run("two approvals racing on one counter: one wins", func(t *testing.T) {
		e := newPeopleEnv(t)
		addPasskey(t, e, "alice", key, 5)
		a := submitAs(t, e, bankBot, "funds.transfer", "account:1", `{"amount_minor":100}`)
		b := submitAs(t, e, bankBot, "funds.transfer", "account:2", `{"amount_minor":100}`)
		errs := make(chan error, 2)
		for _, c := range []*queue.Call{a, b} {
			go func() {
				_, err := e.q.ApproveWith(ctx, queue.ApproveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: c.ID, Digest: c.Digest,
					Passkey: fakeProof(c, "alice", key, 5, 6)})
				errs <- err
			}()
		}
		var ok, changed int
		for range 2 {
			switch err := <-errs; {
			case err == nil:
				ok++
			case errors.Is(err, queue.ErrPasskeyChanged):
				changed++
			default:
				t.Errorf("unexpected: %v", err)
			}
		}
		if ok != 1 || changed != 1 {
			t.Errorf("%d approved, %d refused as changed; want 1 and 1 (one assertion, one counter step)", ok, changed)
		}
	})
}

// A tool that requires a passkey, or names approvers, cannot be approved by
// a rule: the tools file is refused at load.
func TestRulesCannotApproveForPeople(t *testing.T) {
	for _, extra := range []string{"approve_with: passkey", "approvers: {roles: [admin]}"} {
		yaml := fmt.Sprintf(`tools:
  t.x:
    audience: h
    target: '^x$'
    approvals: 1
    auto_approve: allowed
    %s
    rules:
      - {id: always, when: 'true', then: approve}
    args: {type: object, additionalProperties: false, properties: {}}
`, extra)
		if _, err := policy.Parse([]byte(yaml)); err == nil {
			t.Errorf("%s with an approve rule loaded", extra)
		}
	}
}

// auditKinds maps each audit kind of a call to its details.
func auditKinds(t *testing.T, e *env, callID string) map[string]string {
	t.Helper()
	rows, err := e.db.SQL().Query(`SELECT kind, details FROM audit WHERE call_id = ? ORDER BY seq`, callID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, d string
		if err := rows.Scan(&k, &d); err != nil {
			t.Fatal(err)
		}
		out[k] = d
	}
	return out
}

// TestOwnersDoNotResolve: the people who run an agent do not record
// whether its call ran, any more than its actor does: by name, through a
// team or by principal, on every channel.
func TestOwnersDoNotResolve(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name     string
		operator string
		want     error
	}{
		{"an owner by name", "olga", queue.ErrOwner},
		{"an owner through a team", "oidc:idp.example.com/00u-vaulter", queue.ErrOwner},
		{"another operator", "sam", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newPeopleEnv(t)
			c := submitAs(t, e, vaultBot, "vault.rotate", "secret:db", `{}`)
			c, err := e.q.Approve(ctx, "root", audit.ChannelWeb, c.ID, c.Digest)
			if err != nil {
				t.Fatal(err)
			}
			if r, err := e.q.Redeem(ctx, vaultBot, exactBody(c)); err != nil || !r.Accepted {
				t.Fatalf("Redeem: %v %+v", err, r)
			}
			if _, err := e.q.ReportOutcome(ctx, vaultBot, c.ID, queue.OutcomeUnknown, ""); err != nil {
				t.Fatal(err)
			}
			for _, ch := range []string{audit.ChannelWeb, audit.ChannelCLI} {
				_, err := e.q.Resolve(ctx, tc.operator, ch, c.ID, queue.VerdictNotExecuted, "nothing in the vault log", "")
				if !matches(err, tc.want) {
					t.Fatalf("Resolve(%s, %s) = %v, want %v", tc.operator, ch, err, tc.want)
				}
				if tc.want == nil {
					return
				}
			}
			if got := e.load(t, c.ID); got.Resolution != nil || !got.Unresolved() {
				t.Errorf("after the refusals: resolution %+v, unresolved %t", got.Resolution, got.Unresolved())
			}
		})
	}
}

// TestOwnersNamedByWhatTheyAreCalled: an owner written as a person's
// provider user name stays that person after the provider renames them
// (the user name is shown, never the identity), and an owner written in
// another case than the account's name is still that account.
func TestOwnersNamedByWhatTheyAreCalled(t *testing.T) {
	ctx := context.Background()
	owen := "oidc:idp.example.com/00u-owen"
	cases := []struct {
		name, owner, operator string
		rename                bool
	}{
		{"a provider user name, renamed at the provider", "owen", owen, true},
		{"a provider user name in another case", "OWEN", owen, false},
		{"a local name in another case", "Sam", "sam", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newPeopleEnv(t)
			accounts := account.NewService(e.db.Accounts(), nil)
			tok, _, err := accounts.CreateTokenWith(ctx, account.TokenSpec{Actor: "agent:ci", Audience: "bank-host",
				Owners: []string{tc.owner}}, "root", audit.ChannelWeb)
			if err != nil {
				t.Fatal(err)
			}
			if tc.rename {
				if _, _, err := accounts.LoginOIDC(ctx, account.OIDCLogin{Principal: owen, Issuer: "https://idp.example.com",
					Subject: "00u-owen", PreferredUsername: "owen.smith", Role: account.RoleAdmin},
					account.NewSession{IDHash: "sess-owen", CSRF: "csrf-owen"}); err != nil {
					t.Fatal(err)
				}
			}
			who := queue.Principal{Actor: tok.Actor, Audience: tok.Audience, TokenID: tok.ID, Owners: tok.Owners}
			c := submitAs(t, e, who, "funds.quote", "account:42", `{"amount_minor":5}`)
			if _, err := e.q.Approve(ctx, tc.operator, audit.ChannelWeb, c.ID, c.Digest); !errors.Is(err, queue.ErrOwner) {
				t.Errorf("token owners %v: the owner's approval = %v, want ErrOwner", tok.Owners, err)
			}
		})
	}
}

// TestOwnCallByTheNameShown: nobody approves or resolves a call proposed
// under the name they go by: a single-sign-on account's provider user name
// (its principal can never be an actor), or its name in another case.
func TestOwnCallByTheNameShown(t *testing.T) {
	ctx := context.Background()
	cases := []struct{ name, actor, operator string }{
		{"a provider user name", "sec", "oidc:idp.example.com/00u-sec"},
		{"a provider user name in another case", "Sec", "oidc:idp.example.com/00u-sec"},
		{"a local name in another case", "ROOT", "root"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newPeopleEnv(t)
			who := queue.Principal{Actor: tc.actor, Audience: "vault-host", TokenID: "tok_self"}
			c := submitAs(t, e, who, "vault.rotate", "secret:db", `{}`)
			if _, err := e.q.Approve(ctx, tc.operator, audit.ChannelWeb, c.ID, c.Digest); !errors.Is(err, queue.ErrOwnCall) {
				t.Errorf("approval by %s of a call by %s = %v, want ErrOwnCall", tc.operator, tc.actor, err)
			}
			// Resolving another, once someone else approved it and it ran.
			approver := "root"
			if tc.operator == "root" {
				approver = "oidc:idp.example.com/00u-vaulter"
			}
			c = submitAs(t, e, who, "vault.rotate", "secret:other", `{}`)
			c, err := e.q.Approve(ctx, approver, audit.ChannelWeb, c.ID, c.Digest)
			if err != nil {
				t.Fatal(err)
			}
			if r, err := e.q.Redeem(ctx, who, exactBody(c)); err != nil || !r.Accepted {
				t.Fatalf("Redeem: %v %+v", err, r)
			}
			if _, err := e.q.ReportOutcome(ctx, who, c.ID, queue.OutcomeUnknown, ""); err != nil {
				t.Fatal(err)
			}
			if _, err := e.q.Resolve(ctx, tc.operator, audit.ChannelWeb, c.ID, queue.VerdictExecuted, "seen", ""); !errors.Is(err, queue.ErrResolveOwnCall) {
				t.Errorf("resolution by %s of a call by %s = %v, want ErrResolveOwnCall", tc.operator, tc.actor, err)
			}
		})
	}
}

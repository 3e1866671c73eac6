package storetest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/testkit"
)

// An operator token is its person's: scope read or decide, a life of at
// most 30 days, at most 5 live per account (an expired or revoked one
// makes room), shown once and found by its secret only while it is live
// and its account enabled; only its person revokes it, and a revocation
// through one handle refuses the token at the next lookup through another
// (another replica or process). Making and revoking are audited.
var _ = add("accounts/operator tokens", func(t *testing.T, s Stores) {
	ctx := context.Background()
	testkit.SeedUsers(t, s.Accounts, account.RoleOperator, "alice", "bob")
	testkit.SeedUsers(t, s.Accounts, account.RoleAuditor, "audrey")
	clock := testkit.NewClock(t0)
	a := account.NewService(s.Accounts, clock.Now)
	other := s.Reopen(t)
	b := account.NewService(other.Accounts, clock.Now)

	day := 24 * time.Hour
	for _, c := range []struct {
		name string
		spec account.OperatorTokenSpec
		want error
	}{
		{"scope admin", account.OperatorTokenSpec{Person: "alice", Scope: "admin", Life: day}, account.ErrOperatorTokenScope},
		{"no scope", account.OperatorTokenSpec{Person: "alice", Life: day}, account.ErrOperatorTokenScope},
		{"31 days", account.OperatorTokenSpec{Person: "alice", Scope: account.ScopeRead, Life: 31 * day}, account.ErrOperatorTokenLife},
		{"30 days and a second", account.OperatorTokenSpec{Person: "alice", Scope: account.ScopeRead, Life: 30*day + time.Second}, account.ErrOperatorTokenLife},
		{"no life", account.OperatorTokenSpec{Person: "alice", Scope: account.ScopeRead}, account.ErrOperatorTokenLife},
		{"a bidi control in the note", account.OperatorTokenSpec{Person: "alice", Scope: account.ScopeRead, Life: day, Note: "ci\u202e"}, account.ErrOperatorTokenNote},
		{"nobody", account.OperatorTokenSpec{Person: "mallory", Scope: account.ScopeRead, Life: day}, account.ErrUserNotFound},
		{"an auditor", account.OperatorTokenSpec{Person: "audrey", Scope: account.ScopeRead, Life: day}, account.ErrOperatorTokenRole},
	} {
		if _, _, err := a.CreateOperatorToken(ctx, c.spec, audit.ChannelWeb); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}

	tok, secret, err := a.CreateOperatorToken(ctx, account.OperatorTokenSpec{Person: "alice", Scope: account.ScopeDecide, Life: 30 * day, Note: "laptop"}, audit.ChannelWeb)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, account.OperatorTokenPrefix) || !tok.ExpiresAt.Equal(t0.Add(30*day)) || tok.Person != "alice" {
		t.Fatalf("token %+v secret %q", tok, secret[:4])
	}
	got, u, err := b.OperatorBySecret(ctx, secret)
	if err != nil || got.ID != tok.ID || got.Scope != account.ScopeDecide || u.Name != "alice" {
		t.Fatalf("OperatorBySecret on another handle: %+v %v, want %s", got, err, tok.ID)
	}
	// An agent token's secret is never an operator token, nor the other
	// way round.
	_, agentSecret, err := a.CreateToken(ctx, "agent:bot", "host", "", "admin", audit.ChannelCLI)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.OperatorBySecret(ctx, agentSecret); !errors.Is(err, account.ErrOperatorTokenInvalid) {
		t.Errorf("an agent token as an operator token: %v", err)
	}
	if _, err := a.TokenBySecret(ctx, secret); !errors.Is(err, account.ErrTokenNotFound) {
		t.Errorf("an operator token as an agent token: %v", err)
	}
	if _, _, err := a.OperatorBySecret(ctx, secret+"x"); !errors.Is(err, account.ErrOperatorTokenInvalid) {
		t.Errorf("a wrong secret: %v", err)
	}

	// Five live per account; an expired one makes room, bob's are his own.
	short, _, err := a.CreateOperatorToken(ctx, account.OperatorTokenSpec{Person: "alice", Scope: account.ScopeRead, Life: time.Hour}, audit.ChannelWeb)
	if err != nil {
		t.Fatal(err)
	}
	var secrets []string
	for range 3 {
		_, sec, err := a.CreateOperatorToken(ctx, account.OperatorTokenSpec{Person: "alice", Scope: account.ScopeRead, Life: day}, audit.ChannelWeb)
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, sec)
	}
	if _, _, err := b.CreateOperatorToken(ctx, account.OperatorTokenSpec{Person: "alice", Scope: account.ScopeRead, Life: day}, audit.ChannelWeb); !errors.Is(err, account.ErrTooManyOperatorTokens) {
		t.Fatalf("a sixth live token: %v, want ErrTooManyOperatorTokens", err)
	}
	if _, _, err := a.CreateOperatorToken(ctx, account.OperatorTokenSpec{Person: "bob", Scope: account.ScopeRead, Life: day}, audit.ChannelWeb); err != nil {
		t.Fatalf("bob's first token while alice holds five: %v", err)
	}
	clock.Advance(time.Hour)
	if _, _, err := a.OperatorBySecret(ctx, secrets[0]); err != nil {
		t.Fatal(err)
	}
	list, err := a.OperatorTokens(ctx, "alice")
	if err != nil || len(list) != 5 {
		t.Fatalf("alice's tokens: %d %v", len(list), err)
	}
	// The expired token, made before three live ones, is listed after them.
	if last := list[len(list)-1]; last.ID != short.ID || last.State(clock.Now()) != "expired" {
		t.Errorf("the last listed is %s (%s), want the expired %s", last.ID, last.State(clock.Now()), short.ID)
	}
	if _, _, err := a.CreateOperatorToken(ctx, account.OperatorTokenSpec{Person: "alice", Scope: account.ScopeRead, Life: day}, audit.ChannelWeb); err != nil {
		t.Fatalf("a token once one has expired: %v", err)
	}

	// Only its person revokes it; the revocation holds on the other handle
	// at its next lookup.
	if err := b.RevokeOperatorToken(ctx, "bob", tok.ID, audit.ChannelWeb); !errors.Is(err, account.ErrOperatorTokenNotFound) {
		t.Errorf("bob revoking alice's token: %v", err)
	}
	if err := a.RevokeOperatorToken(ctx, "alice", tok.ID, audit.ChannelWeb); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.OperatorBySecret(ctx, secret); !errors.Is(err, account.ErrOperatorTokenInvalid) {
		t.Errorf("a revoked token on another handle: %v", err)
	}
	if err := a.RevokeOperatorToken(ctx, "alice", tok.ID, audit.ChannelWeb); !errors.Is(err, account.ErrOperatorTokenNotFound) {
		t.Errorf("revoking twice: %v", err)
	}
	if _, _, err := b.CreateOperatorToken(ctx, account.OperatorTokenSpec{Person: "alice", Scope: account.ScopeRead, Life: day}, audit.ChannelWeb); err != nil {
		t.Fatalf("a token once one was revoked: %v", err)
	}
	// Past its expiry a token is refused.
	clock.Advance(day)
	if _, _, err := b.OperatorBySecret(ctx, secrets[0]); !errors.Is(err, account.ErrOperatorTokenInvalid) {
		t.Errorf("an expired token: %v", err)
	}
	// A disabled account's tokens are refused at once.
	_, bobSecret, err := a.CreateOperatorToken(ctx, account.OperatorTokenSpec{Person: "bob", Scope: account.ScopeRead, Life: day}, audit.ChannelWeb)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.DisableUser(ctx, "bob", "admin", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.OperatorBySecret(ctx, bobSecret); !errors.Is(err, account.ErrOperatorTokenInvalid) {
		t.Errorf("a disabled account's token: %v", err)
	}
	if _, _, err := a.CreateOperatorToken(ctx, account.OperatorTokenSpec{Person: "bob", Scope: account.ScopeRead, Life: day}, audit.ChannelWeb); !errors.Is(err, account.ErrUserDisabled) {
		t.Errorf("a token for a disabled account: %v", err)
	}

	var out bytes.Buffer
	if _, err := s.Audit.ExportAudit(ctx, &out, audit.ExportOptions{Format: "jsonl"}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), `"kind":"operator_token_created"`); n != 9 {
		t.Errorf("%d operator_token_created entries, want 9", n)
	}
	if n := strings.Count(out.String(), `"kind":"operator_token_revoked"`); n != 1 {
		t.Errorf("%d operator_token_revoked entries, want 1", n)
	}
	if strings.Contains(out.String(), secret) {
		t.Error("the audit trail holds a secret")
	}
})

// One person's stored operator tokens stay bounded however many they make
// and revoke: making one drops their ended tokens beyond the newest
// MaxEndedOperatorTokensKept, and never a live one or another person's.
var _ = add("accounts/operator tokens made and revoked stay bounded", func(t *testing.T, s Stores) {
	ctx := context.Background()
	testkit.SeedUsers(t, s.Accounts, account.RoleOperator, "alice", "bob")
	clock := testkit.NewClock(t0)
	a := account.NewService(s.Accounts, clock.Now)
	spec := func(p string) account.OperatorTokenSpec {
		return account.OperatorTokenSpec{Person: p, Scope: account.ScopeRead, Life: 24 * time.Hour}
	}
	bobs, _, err := a.CreateOperatorToken(ctx, spec("bob"), audit.ChannelWeb)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.RevokeOperatorToken(ctx, "bob", bobs.ID, audit.ChannelWeb); err != nil {
		t.Fatal(err)
	}
	kept, _, err := a.CreateOperatorToken(ctx, spec("alice"), audit.ChannelWeb)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3*account.MaxEndedOperatorTokensKept; i++ {
		clock.Advance(time.Second)
		tok, _, err := a.CreateOperatorToken(ctx, spec("alice"), audit.ChannelWeb)
		if err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
		if err := a.RevokeOperatorToken(ctx, "alice", tok.ID, audit.ChannelWeb); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Second)
	if _, _, err := a.CreateOperatorToken(ctx, spec("alice"), audit.ChannelWeb); err != nil {
		t.Fatal(err)
	}
	list, err := a.OperatorTokens(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	live, ended := 0, 0
	for _, tok := range list {
		if tok.Live(clock.Now()) {
			live++
		} else {
			ended++
		}
	}
	if live != 2 || ended != account.MaxEndedOperatorTokensKept {
		t.Errorf("alice holds %d live and %d ended tokens, want 2 and %d", live, ended, account.MaxEndedOperatorTokensKept)
	}
	if list[0].ID != kept.ID && list[1].ID != kept.ID {
		t.Errorf("alice's first live token is gone from %v", list[:2])
	}
	if bl, err := a.OperatorTokens(ctx, "bob"); err != nil || len(bl) != 1 {
		t.Errorf("bob's ended token: %v, %v; want it kept", bl, err)
	}
})

// The bound of live operator tokens holds when one person's tokens are
// made at once through two handles (two replicas): exactly
// MaxOperatorTokensPerAccount of them are made.
var _ = add("accounts/operator tokens raced to their bound", func(t *testing.T, s Stores) {
	ctx := context.Background()
	testkit.SeedUsers(t, s.Accounts, account.RoleOperator, "alice")
	services := []*account.Service{account.NewService(s.Accounts, nil), account.NewService(s.Reopen(t).Accounts, nil)}
	const tries = 12
	errs := make(chan error, tries)
	var wg sync.WaitGroup
	for i := range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := services[i%2].CreateOperatorToken(ctx, account.OperatorTokenSpec{Person: "alice", Scope: account.ScopeRead, Life: time.Hour}, audit.ChannelWeb)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	made := 0
	for err := range errs {
		switch {
		case err == nil:
			made++
		case !errors.Is(err, account.ErrTooManyOperatorTokens):
			t.Errorf("a refusal other than the bound: %v", err)
		}
	}
	if made != account.MaxOperatorTokensPerAccount {
		t.Errorf("%d tokens made at once, want %d", made, account.MaxOperatorTokensPerAccount)
	}
	list, err := services[1].OperatorTokens(ctx, "alice")
	if err != nil || len(list) != account.MaxOperatorTokensPerAccount {
		t.Errorf("alice holds %d tokens (%v), want %d", len(list), err, account.MaxOperatorTokensPerAccount)
	}
})

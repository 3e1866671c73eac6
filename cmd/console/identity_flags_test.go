package main

import (
	"context"
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/console"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/sso/ssotest"
)

func testAccounts(t *testing.T) *account.Service {
	t.Helper()
	d, err := db.Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return account.NewService(d.Accounts(), time.Now)
}

func parseIdentity(t *testing.T, args ...string) identityFlags {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f identityFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestIdentityFlags(t *testing.T) {
	accounts := testAccounts(t)
	idp := ssotest.Start(t)
	secret := idp.SecretFile(t)
	ctx := context.Background()
	refused := []struct {
		args []string
		want string
	}{
		{[]string{"--local-login", "off"}, "needs single sign-on"},
		{[]string{"--local-login", "admins-only"}, "needs single sign-on"},
		{[]string{"--local-login", "some"}, "want all, admins-only or off"},
		{[]string{"--oidc-client-id", "x"}, "need --oidc-issuer"},
		{[]string{"--oidc-issuer", idp.Issuer()}, "needs --oidc-client-id"},
		{[]string{"--oidc-issuer", idp.Issuer(), "--oidc-client-id", idp.ClientID}, "needs --oidc-role-map"},
		{[]string{"--oidc-issuer", idp.Issuer(), "--oidc-client-id", idp.ClientID, "--oidc-role-map", "ops=root"}, "unknown role"},
		{[]string{"--oidc-issuer", idp.Issuer(), "--oidc-client-id", idp.ClientID, "--oidc-role-map", "ops=operator",
			"--oidc-client-secret-file", filepath.Join(t.TempDir(), "missing")}, "--oidc-client-secret-file"},
		{[]string{"--oidc-issuer", "http://idp.example.com/realms/main", "--oidc-client-id", "x", "--oidc-role-map", "ops=operator",
			"--oidc-client-secret-file", secret}, "must be https"},
	}
	for _, tt := range refused {
		var cc console.Config
		err := parseIdentity(t, tt.args...).consoleIdentity(ctx, accounts, "http://127.0.0.1:8080", &cc)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err = %v, want %q", tt.args, err, tt.want)
		}
	}
	var cc console.Config
	f := parseIdentity(t, "--oidc-issuer", idp.Issuer(), "--oidc-client-id", idp.ClientID, "--oidc-client-secret-file", secret,
		"--oidc-role-map", "approvers=operator", "--oidc-role-map", "sre=admin,audit=auditor", "--local-login", "admins-only")
	if err := f.consoleIdentity(ctx, accounts, "https://approvals.example.com", &cc); err != nil {
		t.Fatal(err)
	}
	if cc.SSO == nil || cc.LocalLogin != console.LocalAdminsOnly || cc.SSOName != "127.0.0.1" || cc.Passkeys.RPID() != "approvals.example.com" {
		t.Errorf("console config = %+v", cc)
	}
}

func TestPasskeyRPID(t *testing.T) {
	accounts := testAccounts(t)
	for url, want := range map[string]string{
		"https://approvals.example.com":      "approvals.example.com",
		"https://approvals.example.com:8443": "approvals.example.com",
		"http://127.0.0.1:8080":              "localhost",
		"http://localhost:9000":              "localhost",
	} {
		pk, err := passkeys(accounts, url)
		if err != nil || pk.RPID() != want {
			t.Errorf("passkeys(%s) RP ID = %v, %v; want %s", url, pk, err, want)
		}
	}
}

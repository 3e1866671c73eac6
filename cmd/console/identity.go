package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/console"
	"github.com/countersign/countersign/internal/passkey"
	"github.com/countersign/countersign/internal/sso"
)

// identityFlags configure single sign-on and which local accounts may log
// in.
type identityFlags struct {
	issuer, clientID, secretFile string
	scopes                       listFlag
	groupsClaim, name            string
	roleMap                      listFlag
	localLogin                   string
}

func (f *identityFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.issuer, "oidc-issuer", "", "single sign-on: the OpenID provider's issuer URL, e.g. https://idp.example.com/realms/main (off when empty)")
	fs.StringVar(&f.clientID, "oidc-client-id", "", "single sign-on: the console's client id at the provider")
	fs.StringVar(&f.secretFile, "oidc-client-secret-file", "", "single sign-on: file holding the client secret (not the secret itself, so it never shows in ps)")
	fs.Var(&f.scopes, "oidc-scopes", "single sign-on: scopes to request, comma-separated (default openid,profile,email,groups)")
	fs.StringVar(&f.groupsClaim, "oidc-groups-claim", sso.DefaultGroupsClaim, "single sign-on: the ID token claim listing the user's groups")
	fs.Var(&f.roleMap, "oidc-role-map", "single sign-on: 'group=role,...' mapping the provider's groups to operator, auditor or admin (repeatable); a user in no mapped group gets no session")
	fs.StringVar(&f.name, "oidc-name", "", "single sign-on: the provider's name on the login page, \"Sign in with NAME\" (default: the issuer's host)")
	fs.StringVar(&f.localLogin, "local-login", "all", "who may log in with a local name and password: all, admins-only (break-glass administrators) or off")
}

// relyingParty discovers the provider and returns the console's relying
// party, its logins under way kept in the database.
func (f identityFlags) relyingParty(ctx context.Context, accounts *account.Service, publicURL string) (*sso.RelyingParty, string, error) {
	if f.issuer == "" {
		if f.clientID != "" || f.secretFile != "" || len(f.roleMap) > 0 {
			return nil, "", errors.New("--oidc-client-id, --oidc-client-secret-file and --oidc-role-map need --oidc-issuer")
		}
		return nil, "", nil
	}
	if f.clientID == "" {
		return nil, "", errors.New("--oidc-issuer needs --oidc-client-id")
	}
	var secret string
	if f.secretFile != "" {
		b, err := os.ReadFile(f.secretFile)
		if err != nil {
			return nil, "", fmt.Errorf("--oidc-client-secret-file: %w", err)
		}
		secret = strings.TrimSpace(string(b))
		if secret == "" {
			return nil, "", fmt.Errorf("--oidc-client-secret-file: %s is empty", f.secretFile)
		}
	}
	roles, err := sso.ParseRoleMap(strings.Join(f.roleMap, ","))
	if err != nil {
		return nil, "", fmt.Errorf("--oidc-role-map: %w", err)
	}
	if len(roles) == 0 {
		return nil, "", errors.New("--oidc-issuer needs --oidc-role-map: without it nobody who signs on gets a role")
	}
	rp, err := sso.New(ctx, sso.Config{
		Issuer: f.issuer, ClientID: f.clientID, ClientSecret: secret,
		RedirectURL: strings.TrimSuffix(publicURL, "/") + console.CallbackPath,
		Scopes:      f.scopes, GroupsClaim: f.groupsClaim, Roles: roles,
		Finished: accounts.Oneshots("oidc", sso.MaxFinished),
	})
	if err != nil {
		return nil, "", err
	}
	name := f.name
	if name == "" {
		if u, err := url.Parse(f.issuer); err == nil {
			name = u.Hostname()
		}
	}
	return rp, name, nil
}

// passkeys returns the passkey service of the console at publicURL: the RP
// ID is its host, or localhost when it is an IP address (which cannot be
// one; browsers must then use http://localhost:PORT).
func passkeys(accounts *account.Service, publicURL string) (*passkey.Service, error) {
	u, err := url.Parse(publicURL)
	if err != nil || u.Hostname() == "" {
		return nil, fmt.Errorf("--public-url %q: not a URL", publicURL)
	}
	host, origin := u.Hostname(), u.Scheme+"://"+u.Host
	if net.ParseIP(host) != nil {
		host = "localhost"
		origin = u.Scheme + "://localhost"
		if p := u.Port(); p != "" {
			origin += ":" + p
		}
	}
	return passkey.New(passkey.Config{RPID: host, RPName: "Countersign", Origins: []string{origin},
		Ceremonies: accounts.Oneshots("passkey", passkey.MaxCeremonies)})
}

// consoleIdentity fills the console's single sign-on, local login and
// passkey settings.
func (f identityFlags) consoleIdentity(ctx context.Context, accounts *account.Service, publicURL string, cfg *console.Config) error {
	local, err := console.ParseLocalLogin(f.localLogin)
	if err != nil {
		return fmt.Errorf("--local-login: %w", err)
	}
	rp, name, err := f.relyingParty(ctx, accounts, publicURL)
	if err != nil {
		return err
	}
	if rp == nil && local != console.LocalAll {
		return fmt.Errorf("--local-login=%s needs single sign-on (--oidc-issuer), or nobody could log in", local)
	}
	pk, err := passkeys(accounts, publicURL)
	if err != nil {
		return err
	}
	cfg.SSO, cfg.SSOName, cfg.LocalLogin, cfg.Passkeys = rp, name, local, pk
	return nil
}

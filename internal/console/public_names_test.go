package console

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
)

// agentRequest sends one agent API request with a bearer token and returns
// the status and the body.
func agentRequest(t *testing.T, e *consoleEnv, method, path, secret, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// agentCall is what the tests read of the agent API's call object.
type agentCall struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	Approvals struct {
		Given []struct{ By, Channel, Method string } `json:"given"`
	} `json:"approvals"`
	Comments   []struct{ By, Comment string } `json:"comments"`
	Decision   *struct{ By, Reason string }   `json:"decision"`
	Revocation *struct{ By, Reason string }   `json:"revocation"`
	Owners     []string                       `json:"owners"`
}

// TestAgentsSeeSingleSignOnOperatorsByTheirShownName: a single-sign-on
// operator who approves, comments, revokes and denies is named to the
// agent, in the API's call object and on the call's status page alike, by
// the name people see (the provider's user name), never by the principal
// oidc:HOST/SUB; the same for the token's owners, whose pinned principals
// are one person with the name they were written as. What is stored keeps
// the principals.
func TestAgentsSeeSingleSignOnOperatorsByTheirShownName(t *testing.T) {
	e := newSSOEnv(t, LocalAll)
	ctx := context.Background()
	e.idp.User("00u-bob", "bob", "bob@example.com", "approvers")
	bob := e.browser()
	e.ssoLogin(t, bob, "")
	// carla and dora sign on once, so that owners written as their user
	// names are pinned to their principals; dora is also named by her
	// principal.
	e.idp.User("00u-carla", "carla", "", "approvers")
	e.ssoLogin(t, e.browser(), "")
	e.idp.User("00u-dora", "dora", "", "approvers")
	e.ssoLogin(t, e.browser(), "")
	tok, secret, err := e.c.accounts.CreateTokenWith(ctx, account.TokenSpec{Actor: "agent:billing-bot", Audience: "payments-host",
		Owners: []string{"carla", e.principal("00u-dora"), "team:payments"}}, "test", audit.ChannelCLI)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(tok.Owners, e.principal("00u-carla")) || !slices.Contains(tok.Owners, e.principal("00u-dora")) {
		t.Fatalf("stored owners %v, want carla's principal pinned and dora's kept", tok.Owners)
	}
	wantOwners := []string{"carla", "dora", "team:payments"}

	submit := func(invoice string) string {
		t.Helper()
		status, body := agentRequest(t, e.consoleEnv, http.MethodPost, "/api/v1/calls", secret, strings.ReplaceAll(conRefundBody, "INV-1042", invoice))
		if status != http.StatusCreated {
			t.Fatalf("submit: %d %s", status, body)
		}
		var c agentCall
		if err := json.Unmarshal(body, &c); err != nil {
			t.Fatal(err)
		}
		return c.ID
	}
	// read returns the agent's call object and the call's status page,
	// after checking that neither names a principal.
	read := func(id string) (agentCall, *htmlPage) {
		t.Helper()
		status, body := agentRequest(t, e.consoleEnv, http.MethodGet, "/api/v1/calls/"+id, secret, "")
		if status != http.StatusOK {
			t.Fatalf("get %s: %d %s", id, status, body)
		}
		if bytes.Contains(bytes.ToLower(body), []byte(account.OIDCPrefix)) {
			t.Errorf("the agent's call object names a principal: %s", body)
		}
		var c agentCall
		if err := json.Unmarshal(body, &c); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.Owners, wantOwners) {
			t.Errorf("the agent's owners %q, want %q", c.Owners, wantOwners)
		}
		page := e.browser().get(e.c.links.Path(id))
		if page.status != http.StatusOK {
			t.Fatalf("status page of %s: %d", id, page.status)
		}
		if strings.Contains(strings.ToLower(page.body), account.OIDCPrefix) {
			t.Errorf("the status page names a principal")
		}
		if got := strings.Join(strings.Fields(page.find("owners").Text()), " "); got != "carla, dora, team:payments" {
			t.Errorf("the status page's owners %q, want carla, dora, team:payments", got)
		}
		return c, page
	}

	// Approved with a comment, then the grant revoked.
	approved := submit("INV-1042")
	if p := bob.approveForm(approved, url.Values{"comment": {"Checked the invoice."}}); p.status != http.StatusSeeOther {
		t.Fatalf("bob approves: %d %q", p.status, p.find("decision-error").Text())
	}
	c, page := read(approved)
	if len(c.Approvals.Given) != 1 || c.Approvals.Given[0].By != "bob" || c.Approvals.Given[0].Method != "click" {
		t.Errorf("approvals.given %+v, want one click by bob", c.Approvals.Given)
	}
	if len(c.Comments) != 1 || c.Comments[0].By != "bob" {
		t.Errorf("comments %+v, want one by bob", c.Comments)
	}
	if got := page.find("approval-by").Map(func(_ int, s *goquery.Selection) string { return strings.TrimSpace(s.Text()) }); !slices.Equal(got, []string{"bob"}) {
		t.Errorf("the status page's approvers %q, want [bob] as the API names them", got)
	}
	if p := bob.post("/calls/"+approved+"/revoke", url.Values{"csrf": {bob.csrf()}, "reason": {"wrong invoice"}}); p.status != http.StatusSeeOther {
		t.Fatalf("bob revokes: %d", p.status)
	}
	c, page = read(approved)
	if c.Revocation == nil || c.Revocation.By != "bob" {
		t.Errorf("revocation %+v, want by bob", c.Revocation)
	}
	if got := strings.Fields(page.find("revoked-by").Text()); len(got) == 0 || got[0] != "bob" {
		t.Errorf("the status page's revoker %q, want bob", page.find("revoked-by").Text())
	}

	// Denied.
	denied := submit("INV-1043")
	if p := bob.post("/calls/"+denied+"/deny", url.Values{"csrf": {bob.csrf()}, "reason": {"Already refunded"}}); p.status != http.StatusSeeOther {
		t.Fatalf("bob denies: %d %q", p.status, p.find("decision-error").Text())
	}
	c, page = read(denied)
	if c.Status != "denied" || c.Decision == nil || c.Decision.By != "bob" || c.Decision.Reason != "Already refunded" {
		t.Errorf("decision %+v (status %s), want denied by bob", c.Decision, c.Status)
	}
	if got := strings.TrimSpace(page.find("denied-by").Text()); got != "bob" {
		t.Errorf("the status page's denier %q, want bob", got)
	}

	// The stored call, the audit trail and the operators' own tools keep
	// the principal.
	stored, err := e.q.Call(ctx, approved)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Approvals[0].Operator != e.principal("00u-bob") || stored.Revoked.By != e.principal("00u-bob") {
		t.Errorf("stored approver %q, revoker %q, want the principal", stored.Approvals[0].Operator, stored.Revoked.By)
	}
	raw, _ := json.Marshal(mustStored(t, stored))
	if !bytes.Contains(raw, []byte(`"by":"`+e.principal("00u-bob")+`"`)) {
		t.Errorf("the operators' call object lost the principal: %s", raw)
	}
}

// TestPublicNamesOfAnUnnamedAccount: a single-sign-on account whose
// provider gives neither a user name nor a display name, and a principal
// of no account, are named account.UnnamedSSO; local names, rules and
// teams are left as they are.
func TestPublicNamesOfAnUnnamedAccount(t *testing.T) {
	e := newSSOEnv(t, LocalAll)
	e.idp.User("00u-anon", "", "", "approvers")
	e.ssoLogin(t, e.browser(), "")
	name := e.c.accounts.PublicNames(context.Background())
	for in, want := range map[string]string{
		e.principal("00u-anon"):   account.UnnamedSSO,
		e.principal("00u-nobody"): account.UnnamedSSO,
		"olivia":                  "olivia",
		"policy:small-refunds":    "policy:small-refunds",
		"team:payments":           "team:payments",
	} {
		if got := name(in); got != want {
			t.Errorf("PublicNames(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPublicNamesTellALocalOperatorFromAProvidersUser: a provider's user
// name is unique among the accounts (a login that would shadow another's
// is refused), but its display name is whatever it sends, a local
// operator's name too: agents read it marked as single sign-on, never as
// the local operator.
func TestPublicNamesTellALocalOperatorFromAProvidersUser(t *testing.T) {
	e := newSSOEnv(t, LocalAll) // olivia is a local operator
	for _, sub := range []string{"00u-lookalike", "00u-pat"} {
		e.idp.User(sub, strings.TrimPrefix(sub, "00u-"), sub+"@example.com", "approvers")
		e.ssoLogin(t, e.browser(), "")
	}
	// A provider that sends no usable user name, only a display name.
	e.exec(`UPDATE users SET short_name = '', display_name = 'olivia' WHERE name = ?`,
		e.principal("00u-lookalike"))
	name := e.c.accounts.PublicNames(context.Background())
	for in, want := range map[string]string{
		e.principal("00u-lookalike"): "olivia" + account.SSOSuffix,
		e.principal("00u-pat"):       "pat",
		"olivia":                     "olivia",
	} {
		if got := name(in); got != want {
			t.Errorf("PublicNames(%q) = %q, want %q", in, got, want)
		}
	}
	owners := account.PublicOwners([]string{"olivia", e.principal("00u-lookalike")}, name)
	if len(owners) != 2 {
		t.Errorf("owners %q: a local operator and a provider's user read as one person", owners)
	}
}

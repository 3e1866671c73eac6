package storetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

// The cases in services.go, cases.go and races.go drive the stores through
// the domain's own services (queue.Service, account.Service), as the
// console does. The races open several handles on one database (Reopen)
// and check that reads-then-decide stay correct across them.

// toolsYAML are the tools the cases propose: one approval, and two.
const toolsYAML = `tools:
  payments.refund:
    description: Refund an invoice
    audience: payments-host
    target: '^invoice:INV-[0-9]+$'
    approvals: 1
    grant_ttl: 60s
    decide_within: 15m
    informational: [/notes]
    args:
      type: object
      additionalProperties: false
      required: [amount_minor, currency]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 5000000}
        currency: {type: string, enum: [USD, EUR]}
        notes: {type: string, maxLength: 500}
  releases.deploy:
    description: Deploy a release
    audience: deploy-host
    target: '^service:[a-z-]+$'
    approvals: 2
    grant_ttl: 120s
    decide_within: 30m
    args:
      type: object
      additionalProperties: false
      required: [version]
      properties:
        version: {type: string, pattern: '^v[0-9]+\.[0-9]+\.[0-9]+$'}
`

var (
	payer    = queue.Principal{Actor: "agent:billing", Audience: "payments-host"}
	deployer = queue.Principal{Actor: "agent:release", Audience: "deploy-host"}
)

// world is one database and the services of several handles on it, as
// several console processes (or replicas) would hold them, sharing one
// keyring so that any of them verifies the grants of the others.
type world struct {
	first  *Stores // the handle Run opened, handed out first
	reopen func(t *testing.T) Stores
	clock  *testkit.Clock
	keys   *grant.Keyring
	tools  *tools.Registry
	// maxPending is the queue's MaxPendingPerToken (0: the default).
	maxPending int
	// policy, when set, decides calls by its rules (tools is then its
	// registry); maxAllowancesTool and maxAllowancesGiver are the queue's
	// bounds of live allowances (0: the defaults).
	policy                                *policy.Policy
	maxAllowancesTool, maxAllowancesGiver int
	// present, when set, is the key of the decision pages' presentation
	// tokens, which approvals through the browser must then carry.
	present *present.Key
}

// newWorld seeds the operators the cases decide as (alice, bob, op0 to
// op15) and an admin; newBareWorld seeds nobody.
func newWorld(t *testing.T, s Stores) *world {
	t.Helper()
	ops := []string{"alice", "bob"}
	for i := 0; i < racers; i++ {
		ops = append(ops, fmt.Sprintf("op%d", i))
	}
	testkit.SeedUsers(t, s.Accounts, account.RoleOperator, ops...)
	testkit.SeedUsers(t, s.Accounts, account.RoleAdmin, "admin")
	return newBareWorld(t, s)
}

func newBareWorld(t *testing.T, s Stores) *world {
	t.Helper()
	tb := t
	dir := tb.TempDir()
	clk := testkit.NewClock(time.Now().UTC().Truncate(time.Millisecond))
	keys, err := grant.OpenKeyring(filepath.Join(dir, "keys"), "countersign", clk.Now)
	if err != nil {
		tb.Fatal(err)
	}
	reg, err := tools.Parse([]byte(toolsYAML))
	if err != nil {
		tb.Fatal(err)
	}
	return &world{first: &s, reopen: s.Reopen, clock: clk, keys: keys, tools: reg}
}

// handle is one open handle with its services.
type handle struct {
	Stores
	q *queue.Service
	a *account.Service
}

// open returns the next handle: the one Run opened, then new ones.
func (w *world) open(t *testing.T) *handle {
	t.Helper()
	return w.openWith(t, w.policy)
}

// openWith is open with the rules and tools of pol (nil: w's tools, no
// rules), as a console started with another tools file would run.
func (w *world) openWith(t *testing.T, pol *policy.Policy) *handle {
	t.Helper()
	reg := w.tools
	if pol != nil {
		reg = pol.Registry()
	}
	var s Stores
	if w.first != nil {
		s, w.first = *w.first, nil
	} else {
		if w.reopen == nil {
			t.Fatal("storetest: this case needs a second handle on the database: set Stores.Reopen")
		}
		s = w.reopen(t)
	}
	q := queue.NewService(queue.Config{Store: s.Queue, Tools: reg, Policy: pol, Signer: w.keys, Now: w.clock.Now,
		MaxPendingPerToken: w.maxPending, MaxAllowancesPerTool: w.maxAllowancesTool, MaxAllowancesPerGiver: w.maxAllowancesGiver,
		Presentations: w.present, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return &handle{Stores: s, q: q, a: account.NewService(s.Accounts, w.clock.Now)}
}

func mustVerify(tb testing.TB, tr audit.Trail, wantAtLeast int64) audit.VerifyResult {
	tb.Helper()
	res, err := tr.VerifyChain(context.Background())
	if err != nil {
		tb.Fatalf("VerifyChain: %v", err)
	}
	if !res.OK {
		tb.Fatalf("VerifyChain: %v", res.Err)
	}
	if res.Count < wantAtLeast {
		tb.Fatalf("VerifyChain: %d entries, want at least %d", res.Count, wantAtLeast)
	}
	return res
}

// racers is how many goroutines race in each round of a race, and rounds
// how many rounds each race runs.
const (
	racers = 16
	rounds = 4
)

// bytesBuffer is a bytes.Buffer that counts substrings.
type bytesBuffer struct{ bytes.Buffer }

func (b *bytesBuffer) count(s string) int { return strings.Count(b.String(), s) }

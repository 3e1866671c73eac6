package db

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/scope"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

// allowanceTools opts payments.refund into allowances for the test across
// processes; each child loads it from the file named by allowanceToolsEnv.
const allowanceTools = `tools:
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
    allowance: {max_uses: 50, max_for: 1h, vary: [target, /amount_minor]}
`

const (
	allowanceToolsEnv = "COUNTERSIGN_ALLOWANCE_TOOLS"
	allowanceFirstEnv = "COUNTERSIGN_ALLOWANCE_FIRST" // the child's first invoice number
	allowanceCalls    = 16                            // calls each child submits
)

// childAllowanceSubmit opens the parent's database as another console
// process would (its own pool, Service and keyring), prints "ready", waits
// for a line on stdin, submits allowanceCalls refunds from as many
// goroutines at once and prints each call's status, one a line, then
// "done".
func childAllowanceSubmit() int {
	d, err := Open(os.Getenv(dbEnv))
	if err != nil {
		fmt.Printf("error %v\n", err)
		return 1
	}
	defer d.Close()
	keys, err := grant.OpenKeyring(os.Getenv(keysEnv), "countersign", time.Now)
	if err != nil {
		fmt.Printf("error %v\n", err)
		return 1
	}
	reg, err := tools.Load(os.Getenv(allowanceToolsEnv))
	if err != nil {
		fmt.Printf("error %v\n", err)
		return 1
	}
	var first int
	fmt.Sscan(os.Getenv(allowanceFirstEnv), &first)
	q := queue.NewService(queue.Config{Store: d.Store(), Tools: reg, Signer: keys, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Printf("error stdin: %v\n", err)
		return 1
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range allowanceCalls {
		wg.Go(func() {
			body := fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":{"amount_minor":100,"currency":"EUR"}}`, first+i)
			c, _, err := q.Submit(context.Background(), agent, []byte(body))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fmt.Printf("error %v\n", err)
				return
			}
			fmt.Println(c.Status)
		})
	}
	wg.Wait()
	fmt.Println("done")
	return 0
}

// TestAllowanceUsesAcrossProcesses gives an allowance of 10 uses, then has
// four processes, each with its own connection pool and Service over the
// one database file, submit 16 calls inside it each at the same moment:
// exactly 10 of the 64 are approved, the allowance records 10 uses and
// ended used_up, and the chain verifies.
func TestAllowanceUsesAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: heavy race: processes using one allowance")
	}
	const procs, uses = 4, 10
	dir := t.TempDir()
	toolsPath := filepath.Join(dir, "tools.yaml")
	if err := os.WriteFile(toolsPath, []byte(allowanceTools), 0o600); err != nil {
		t.Fatal(err)
	}
	l := &ledger{path: filepath.Join(dir, "countersign.db"), keyDir: filepath.Join(dir, "keys"), now: time.Now}
	MustOpen(t, l)
	reg, err := tools.Load(toolsPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := testkit.Seed(context.Background(), l.db.Accounts(), account.RoleOperator, "alice"); err != nil {
		t.Fatal(err)
	}
	q := queue.NewService(queue.Config{Store: l.db.Store(), Tools: reg, Signer: l.keys, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()
	base, _, err := q.Submit(ctx, agent, []byte(`{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":100,"currency":"EUR"}}`))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := reg.Tool("payments.refund")
	maxAmount := int64(1000)
	ch := scope.Choices{Uses: uses, Until: time.Now().Add(30 * time.Minute), TargetPrefix: "invoice:INV-",
		Members: map[string]scope.Member{"/amount_minor": {Max: &maxAmount}}}
	sc, err := scope.Materialise(scope.Call{Actor: base.Actor, Audience: base.Audience, Tool: base.Tool, Target: base.Target,
		ToolDigest: base.ToolDigest, Args: base.Args}, tool, ch, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := q.GiveAllowance(ctx, queue.GiveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: base.ID, Digest: base.Digest,
		ScopeDigest: sc.Digest(), Choices: ch})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Reader
	}
	children := make([]child, procs)
	for i := range children {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = childEnv(l, "allowance-submit", allowanceToolsEnv+"="+toolsPath, fmt.Sprintf("%s=%d", allowanceFirstEnv, 1000*(i+1)))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children[i] = child{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	}
	for i, ch := range children {
		if line, err := ch.out.ReadString('\n'); strings.TrimSpace(line) != "ready" {
			t.Fatalf("child %d: %q, %v; want ready", i, line, err)
		}
	}
	for _, ch := range children {
		if _, err := io.WriteString(ch.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]int{}
	for i, ch := range children {
		for {
			line, err := ch.out.ReadString('\n')
			if err != nil {
				t.Fatalf("child %d: %q, %v", i, line, err)
			}
			if line = strings.TrimSpace(line); line == "done" {
				break
			}
			got[line]++
		}
		ch.stdin.Close()
		if err := ch.cmd.Wait(); err != nil {
			t.Errorf("child %d: %v", i, err)
		}
	}
	if want := map[string]int{"approved": uses, "pending": procs*allowanceCalls - uses}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("children report %v, want %v", got, want)
	}
	stored, err := q.Allowance(context.Background(), a.ID)
	if err != nil || stored.Used != uses || stored.EndReason != queue.EndUsedUp {
		t.Fatalf("allowance after the race: %+v, %v; want %d uses, ended used_up", stored, err, uses)
	}
	sqldb := l.db.SQL()
	if n := countRows(t, sqldb, `SELECT COUNT(*) FROM allowance_uses WHERE allowance_id = ?`, a.ID); n != uses {
		t.Errorf("%d uses recorded, want %d", n, uses)
	}
	if n := countRows(t, sqldb, `SELECT COUNT(*) FROM audit WHERE kind = 'approved' AND channel = 'allowance'`); n != uses {
		t.Errorf("%d approved entries by the allowance, want %d", n, uses)
	}
	verifyAuditChain(t, sqldb)
}

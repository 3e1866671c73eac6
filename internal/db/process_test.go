package db

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/grant"
)

// Environment of a child process started by these tests. The test binary
// runs itself again with roleEnv set, and TestMain runs that role instead
// of the tests.
const (
	roleEnv = "COUNTERSIGN_LEDGER_ROLE" // "redeem-once", "redeem-loop", "group-loop" or "allowance-submit"
	dbEnv   = "COUNTERSIGN_LEDGER_DB"
	keysEnv = "COUNTERSIGN_LEDGER_KEYS"
	bodyEnv = "COUNTERSIGN_LEDGER_BODY" // file holding a redemption request
)

func TestMain(m *testing.M) {
	switch role := os.Getenv(roleEnv); role {
	case "":
		os.Exit(m.Run())
	case "redeem-once":
		os.Exit(childRedeemOnce())
	case "redeem-loop":
		os.Exit(childRedeemLoop())
	case "group-loop":
		os.Exit(childGroupLoop())
	case "allowance-submit":
		os.Exit(childAllowanceSubmit())
	case "auth-revoke", "auth-write-killed":
		os.Exit(childAuthWrite(role))
	default:
		fmt.Fprintf(os.Stderr, "unknown %s %q\n", roleEnv, role)
		os.Exit(2)
	}
}

// childLedger opens the parent's database and key directory as a separate
// console process would. Children run in the package directory, as the
// tests do, so the tools file is found at the same relative path.
func childLedger() (*ledger, error) {
	l := &ledger{path: os.Getenv(dbEnv), keyDir: os.Getenv(keysEnv), now: time.Now}
	return l, l.open()
}

// childRedeemOnce prints "ready", waits for a line on stdin, redeems the
// request in the body file once and prints "accepted", "refused <reason>"
// or "error <message>".
func childRedeemOnce() int {
	l, err := childLedger()
	if err != nil {
		fmt.Printf("error %v\n", err)
		return 1
	}
	defer l.db.Close()
	body, err := os.ReadFile(os.Getenv(bodyEnv))
	if err != nil {
		fmt.Printf("error %v\n", err)
		return 1
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Printf("error stdin: %v\n", err)
		return 1
	}
	r, err := l.q.Redeem(context.Background(), agent, body)
	switch {
	case err != nil:
		fmt.Printf("error %v\n", err)
	case r.Accepted:
		fmt.Println("accepted")
	default:
		fmt.Printf("refused %s\n", r.Reason)
	}
	return 0
}

// childEnv is the environment of a child in role, sharing l's files.
func childEnv(l *ledger, role string, extra ...string) []string {
	return append(append(os.Environ(), roleEnv+"="+role, dbEnv+"="+l.path, keysEnv+"="+l.keyDir), extra...)
}

// TestRedemptionAcrossProcesses starts eight processes, each with its own
// connection pool, Service and keyring over one database file, and has
// them redeem one grant at the same moment: exactly one is accepted and
// the other seven are refused as replayed.
func TestRedemptionAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: heavy race: processes redeeming one grant")
	}
	const procs = 8
	l := newLedger(t, nil)
	c := MustApprove(t, l)
	bodyFile := filepath.Join(t.TempDir(), "redeem.json")
	if err := os.WriteFile(bodyFile, redemptionBody(c), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Reader
	}
	children := make([]child, procs)
	for i := range children {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = childEnv(l, "redeem-once", bodyEnv+"="+bodyFile)
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
	// Every child has opened the database and waits; then all go at once.
	for i, ch := range children {
		line, err := ch.out.ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
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
		line, err := ch.out.ReadString('\n')
		if err != nil {
			t.Errorf("child %d: %q, %v", i, line, err)
		}
		got[strings.TrimSpace(line)]++
		ch.stdin.Close()
		if err := ch.cmd.Wait(); err != nil {
			t.Errorf("child %d: %v", i, err)
		}
	}
	want := map[string]int{"accepted": 1, "refused " + grant.ReasonReplayed: procs - 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("children report %v, want %v", got, want)
	}
	sqldb := l.db.SQL()
	if ledger, audited := ledgerJTIs(t, sqldb), redeemedJTIs(t, sqldb); ledger[c.GrantJTI] != 1 || len(ledger) != 1 ||
		audited[c.GrantJTI] != 1 || len(audited) != 1 {
		t.Errorf("ledger %v, redeemed entries %v; want one each for %s", ledger, audited, c.GrantJTI)
	}
	if got, want := countRows(t, sqldb, `SELECT COUNT(*) FROM audit WHERE kind = 'redemption_refused'`), procs-1; got != want {
		t.Errorf("redemption_refused entries = %d, want %d", got, want)
	}
	verifyAuditChain(t, sqldb)
}

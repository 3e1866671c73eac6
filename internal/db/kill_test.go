package db

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/queue"
)

// childRedeemLoop prints "ready", then until it is killed: redeems a call
// that was approved but never redeemed (left by a killed predecessor), if
// any; approves and redeems a fresh call; and presents again a grant that
// was already redeemed. Each acceptance is reported as "accepted <jti>"
// once Redeem has returned; anything unexpected as "unexpected ...".
func childRedeemLoop() int {
	l, err := childLedger()
	if err != nil {
		fmt.Printf("unexpected open: %v\n", err)
		return 1
	}
	ctx := context.Background()
	report := func(what string, r *queue.Redemption, err error, want string) {
		switch {
		case err != nil:
			fmt.Printf("unexpected %s: %v\n", what, err)
		case r.Accepted:
			fmt.Printf("accepted %s\n", r.Call.GrantJTI)
		case r.Reason != want:
			fmt.Printf("unexpected %s: refused %s, want %s\n", what, r.Reason, want)
		}
	}
	fmt.Println("ready")
	for {
		if body, ok, err := storedRedemption(l.db.SQL(), queue.StatusApproved); err != nil {
			fmt.Printf("unexpected read approved: %v\n", err)
		} else if ok {
			r, err := l.q.Redeem(ctx, agent, body)
			report("leftover", r, err, grant.ReasonExpired) // accepted, or expired if it waited too long
		}
		c, err := l.approve(ctx)
		if err != nil {
			fmt.Printf("unexpected approve: %v\n", err)
			continue
		}
		r, err := l.q.Redeem(ctx, agent, redemptionBody(c))
		report("fresh", r, err, "accepted")
		if body, ok, err := storedRedemption(l.db.SQL(), queue.StatusRedeemed); err != nil {
			fmt.Printf("unexpected read redeemed: %v\n", err)
		} else if ok {
			r, err := l.q.Redeem(ctx, agent, body)
			report("replay", r, err, grant.ReasonReplayed)
		}
	}
}

// storedRedemption builds the redemption request of a random call with the
// given status from what the database stored when it was approved.
func storedRedemption(db *sql.DB, status queue.Status) ([]byte, bool, error) {
	var token, tool, target, args string
	err := db.QueryRow(`SELECT grant_token, tool, target, args FROM calls WHERE status = ? ORDER BY random() LIMIT 1`,
		string(status)).Scan(&token, &tool, &target, &args)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v, err := canonical.Parse([]byte(args))
	if err != nil {
		return nil, false, err
	}
	return redemptionBodyOf(token, tool, target, v.(canonical.Object)), true, nil
}

// TestKilledRedeemerLeavesAConsistentLedger kills a redeeming process with
// SIGKILL at random moments, 20 times, restarting it each time. Afterwards
// the database passes integrity_check, every acceptance a child reported
// is in the nonce ledger, no jti was accepted twice, every ledger row has
// exactly one redeemed audit entry (and the reverse), the audit chain
// verifies, and a restarted Service refuses every redeemed grant as
// replayed.
func TestKilledRedeemerLeavesAConsistentLedger(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: kill loop: redeemer processes killed mid-write")
	}
	const kills = 20
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>32))
	l := newLedger(t, nil)
	if err := l.db.Close(); err != nil { // the children own the file while they run
		t.Fatal(err)
	}
	start := time.Now()
	deadline := start.Add(45 * time.Second) // the whole kill loop, however slow the machine
	reported := map[string]int{}
	unexpected := 0
	for i := range kills {
		lines, err := runAndKill(t, l, "redeem-loop", deadline, func() time.Duration { return time.Duration(rng.IntN(300)) * time.Millisecond })
		if err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		for _, line := range lines {
			switch {
			case strings.HasPrefix(line, "accepted "):
				reported[strings.TrimPrefix(line, "accepted ")]++
			case line == "ready":
			default:
				if unexpected++; unexpected <= 10 {
					t.Errorf("child %d: %s", i, line)
				}
			}
		}
	}
	t.Logf("%d kills in %s; %d acceptances reported", kills, time.Since(start).Round(time.Millisecond), len(reported))
	if unexpected > 0 {
		t.Fatalf("%d unexpected results in all", unexpected)
	}
	if len(reported) == 0 {
		t.Fatal("no child reported an acceptance before it was killed")
	}

	MustOpen(t, l)
	sqldb := l.db.SQL()
	integrityCheck(t, sqldb)
	ledger := ledgerJTIs(t, sqldb)
	audited := redeemedJTIs(t, sqldb)
	for jti, n := range reported {
		if n != 1 {
			t.Errorf("jti %s was accepted %d times", jti, n)
		}
		if ledger[jti] != 1 {
			t.Errorf("jti %s was reported accepted but has %d ledger rows", jti, ledger[jti])
		}
	}
	for jti, n := range ledger {
		if n != 1 || audited[jti] != 1 {
			t.Errorf("jti %s: %d ledger rows, %d redeemed entries; want 1 and 1", jti, n, audited[jti])
		}
	}
	for jti, n := range audited {
		if ledger[jti] != 1 {
			t.Errorf("jti %s: %d redeemed entries but %d ledger rows", jti, n, ledger[jti])
		}
	}
	if got, want := countRows(t, sqldb, `SELECT COUNT(*) FROM calls c JOIN redemptions r ON r.jti = c.grant_jti
		WHERE c.status = 'redeemed' AND r.call_id = c.id`), len(ledger); got != want {
		t.Errorf("redeemed calls matching their ledger row = %d, want %d", got, want)
	}
	if got, want := countRows(t, sqldb, `SELECT COUNT(*) FROM calls WHERE status = 'redeemed'`), len(ledger); got != want {
		t.Errorf("redeemed calls = %d, want %d (one per ledger row)", got, want)
	}
	verifyAuditChain(t, sqldb)

	// After the last kill, a restarted console refuses every redeemed grant.
	rows, err := sqldb.Query(`SELECT id FROM calls WHERE status = 'redeemed'`)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	ctx := context.Background()
	for _, id := range ids {
		c, err := l.db.Store().Call(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		r, err := l.q.Redeem(ctx, agent, redemptionBody(c))
		if err != nil {
			t.Fatal(err)
		}
		if r.Accepted || r.Reason != grant.ReasonReplayed {
			t.Errorf("call %s after restart: accepted %t, reason %q; want replayed", id, r.Accepted, r.Reason)
		}
	}
}

// runAndKill starts a child in role (redeem-loop, group-loop), lets it run
// for delay() after it is ready, kills it with SIGKILL and returns every
// line it wrote. A child not ready by deadline is an error.
func runAndKill(t *testing.T, l *ledger, role string, deadline time.Time, delay func() time.Duration) ([]string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = childEnv(l, role)
	cmd.Stdout = w
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	w.Close() // the child holds the only write end: EOF when it dies
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var out []string
	ready := time.NewTimer(time.Until(deadline))
	defer ready.Stop()
	select {
	case line, ok := <-lines:
		if !ok || line != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, fmt.Errorf("first line %q, want ready", line)
		}
		out = append(out, line)
	case <-ready.C:
		cmd.Process.Kill()
		cmd.Wait()
		return nil, errors.New("not ready before the test's deadline")
	}
	killAt := time.After(delay())
wait:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				err := cmd.Wait()
				return out, fmt.Errorf("child ended before it was killed: %v", err)
			}
			out = append(out, line)
		case <-killAt:
			break wait
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return out, err
	}
	for line := range lines {
		out = append(out, line)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		return out, fmt.Errorf("child ended with %v, want killed by SIGKILL", err)
	}
	return out, nil
}

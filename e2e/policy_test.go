package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// policyFile is examples/policy.yaml: tools with rules.
func policyFile(tb testing.TB) string {
	tb.Helper()
	p, err := filepath.Abs("../examples/policy.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func startPolicyServer(tb testing.TB, data string) *server {
	tb.Helper()
	if data == "" {
		data = tb.TempDir()
	}
	return startProcess(tb, data, "serve", "--addr", "127.0.0.1:0", "--data", data, "--tools", policyFile(tb), "--log-level", "warn")
}

func refundBody(invoice int, amount int, reason string) string {
	return fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":{"amount_minor":%d,"currency":"USD","reason_code":%q}}`,
		invoice, amount, reason)
}

func refundCall(invoice int, amount int, reason string) string {
	return fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":{"amount_minor":%d,"currency":"USD","reason_code":%q}}`,
		invoice, amount, reason)
}

// auditEntries exports the audit trail with the real binary.
func auditEntries(tb testing.TB, data string) []map[string]any {
	tb.Helper()
	out, code := runConsole(tb, "", "audit", "export", "--data", data, "--format", "jsonl")
	if code != 0 {
		tb.Fatalf("audit export exited %d", code)
	}
	var entries []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			tb.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if _, ok := e["kind"]; ok {
			entries = append(entries, e)
		}
	}
	return entries
}

// TestPolicyWholeLoop: a small refund is approved by rule and redeemed with
// no person; a fraud claim waits for two; a too-large one is denied with
// the rule's reason, and the same call again is previously_denied; the
// audit names the rule and the tools file.
func TestPolicyWholeLoop(t *testing.T) {
	s := startPolicyServer(t, "")
	ctx := context.Background()
	bot := newRawAgent(s.url, s.token("agent:billing-bot", "payments-host"))

	r, err := bot.submit(ctx, refundBody(1, 1299, "duplicate"))
	if err != nil || r.status != http.StatusCreated || r.str("status") != "approved" || r.str("grant") == "" || r.str("decided_by_rule") != "small-refunds" {
		t.Fatalf("small refund: %v %d %s", err, r.status, r.raw)
	}
	red, err := bot.redeem(ctx, r.str("grant"), refundCall(1, 1299, "duplicate"))
	if err != nil || red.status != http.StatusOK || red.str("decision") != "accepted" {
		t.Fatalf("redeem: %v %d %s", err, red.status, red.raw)
	}

	r, err = bot.submit(ctx, refundBody(2, 1299, "fraud"))
	if err != nil || r.status != http.StatusCreated || r.str("status") != "pending" {
		t.Fatalf("fraud refund: %v %d %s", err, r.status, r.raw)
	}
	if a, _ := r.body["approvals"].(map[string]any); a["required"] != float64(2) {
		t.Fatalf("fraud refund approvals %v, want 2 required", r.body["approvals"])
	}

	r, err = bot.submit(ctx, refundBody(3, 2000000, "requested"))
	if err != nil || r.status != http.StatusForbidden || r.code() != "denied_by_policy" {
		t.Fatalf("too large: %v %d %s", err, r.status, r.raw)
	}
	e, _ := r.body["error"].(map[string]any)
	if e["reason"] != "refunds over 10,000.00 go through finance, not an agent" || !strings.Contains(e["message"].(string), "too-large") {
		t.Fatalf("denial %v", e)
	}
	r, err = bot.submit(ctx, refundBody(3, 2000000, "requested"))
	if err != nil || r.status != http.StatusConflict || r.code() != "previously_denied" {
		t.Fatalf("resubmission: %v %d %s", err, r.status, r.raw)
	}
	if e, _ := r.body["error"].(map[string]any); e["reason"] != "refunds over 10,000.00 go through finance, not an agent" {
		t.Fatalf("resubmission reason %v", e)
	}

	out, _ := runConsole(t, "", "tools", "lint", policyFile(t))
	toolsDigest := out[strings.LastIndex(out, " ")+1 : len(out)-1]
	var approvedByRule, deniedByRule, loaded bool
	for _, en := range auditEntries(t, s.data) {
		d, _ := en["details"].(map[string]any)
		switch {
		case en["kind"] == "approved" && en["principal"] == "policy:small-refunds":
			approvedByRule = d["tools_digest"] == toolsDigest && d["rule"] == "small-refunds" && len(d["rule_digest"].(string)) == 64 && len(d["tool_digest"].(string)) == 64
		case en["kind"] == "denied" && en["principal"] == "policy:too-large":
			deniedByRule = d["tools_digest"] == toolsDigest
		case en["kind"] == "tools_loaded":
			loaded = d["tools_digest"] == toolsDigest
		}
	}
	if !approvedByRule || !deniedByRule || !loaded {
		t.Fatalf("audit: approved by rule %v, denied by rule %v, tools file recorded %v (digest %s)", approvedByRule, deniedByRule, loaded, toolsDigest)
	}
}

// TestFreezeRacesRedemption runs `console freeze` against a running server
// while a redemption is in flight, many times: each redemption either
// committed before the freeze (its audit entry comes first) or is refused
// with 503 frozen, and every redemption after the command returned is
// refused.
func TestFreezeRacesRedemption(t *testing.T) {
	s := startPolicyServer(t, "")
	s.addUser("root", "admin")
	ctx := context.Background()
	bot := newRawAgent(s.url, s.token("agent:billing-bot", "payments-host"))
	rounds := 20
	if testing.Short() {
		rounds = 3
	}
	accepted, refused := 0, 0
	for i := range rounds {
		inv := 100 + i
		r, err := bot.submit(ctx, refundBody(inv, 1000+i, "duplicate"))
		if err != nil || r.str("status") != "approved" {
			t.Fatalf("round %d: submit %v %s", i, err, r.raw)
		}
		var wg sync.WaitGroup
		var red reply
		var redErr error
		wg.Add(1)
		// A delay spread over the time the command takes, so that the
		// redemption lands sometimes before the freeze and sometimes after.
		delay := time.Duration(rand.IntN(80)) * time.Millisecond
		go func() {
			defer wg.Done()
			time.Sleep(delay)
			red, redErr = bot.redeem(ctx, r.str("grant"), refundCall(inv, 1000+i, "duplicate"))
		}()
		if _, code := runConsole(t, "", "freeze", "--data", s.data, "--tool", "payments.refund", "--reason", fmt.Sprintf("drill %d", i), "--as", "root"); code != 0 {
			t.Fatalf("round %d: freeze exited %d", i, code)
		}
		// After the command returned, nothing redeems.
		r2, _ := bot.submit(ctx, refundBody(1000+inv, 1000+i, "duplicate"))
		if r2.status != http.StatusServiceUnavailable || r2.code() != "frozen" {
			t.Fatalf("round %d: submission while frozen: %d %s", i, r2.status, r2.raw)
		}
		wg.Wait()
		if redErr != nil {
			t.Fatal(redErr)
		}
		switch {
		case red.status == http.StatusOK && red.str("decision") == "accepted":
			accepted++
			// It committed before the freeze.
			var redeemedSeq, frozenSeq float64
			for _, en := range auditEntries(t, s.data) {
				if en["kind"] == "redeemed" && en["call_id"] == red.str("call_id") {
					redeemedSeq = en["seq"].(float64)
				}
				if d, _ := en["details"].(map[string]any); en["kind"] == "frozen" && d["reason"] == fmt.Sprintf("drill %d", i) {
					frozenSeq = en["seq"].(float64)
				}
			}
			if redeemedSeq == 0 || frozenSeq == 0 || redeemedSeq > frozenSeq {
				t.Fatalf("round %d: accepted redemption at seq %v, freeze at %v", i, redeemedSeq, frozenSeq)
			}
		case red.status == http.StatusServiceUnavailable && red.str("reason") == "frozen":
			refused++
			if !strings.Contains(red.str("message"), fmt.Sprintf("drill %d", i)) {
				t.Fatalf("round %d: refusal without the freeze's reason: %s", i, red.raw)
			}
			// Nothing was consumed: after the freeze is lifted the grant
			// still redeems.
		default:
			t.Fatalf("round %d: redemption %d %s; want accepted or 503 frozen", i, red.status, red.raw)
		}
		if _, code := runConsole(t, "", "unfreeze", "--data", s.data, "--tool", "payments.refund", "--as", "root"); code != 0 {
			t.Fatalf("round %d: unfreeze exited %d", i, code)
		}
		if red.str("reason") == "frozen" {
			again, _ := bot.redeem(ctx, r.str("grant"), refundCall(inv, 1000+i, "duplicate"))
			if again.status != http.StatusOK {
				t.Fatalf("round %d: redemption after unfreeze: %d %s", i, again.status, again.raw)
			}
		}
	}
	t.Logf("%d rounds: %d redemptions committed before the freeze, %d refused by it", rounds, accepted, refused)
}

// TestKillWhileFrozen: a freeze survives kill -9 and restart.
func TestKillWhileFrozen(t *testing.T) {
	data := t.TempDir()
	s := startPolicyServer(t, data)
	s.addUser("root", "admin")
	s.addUser("olive", "operator")
	ctx := context.Background()
	tok := s.token("agent:billing-bot", "payments-host")
	bot := newRawAgent(s.url, tok)
	r, err := bot.submit(ctx, refundBody(7, 1500, "duplicate"))
	if err != nil || r.str("status") != "approved" {
		t.Fatalf("submit %v %s", err, r.raw)
	}
	if _, code := runConsole(t, "", "freeze", "--data", data, "--reason", "incident 9", "--as", "olive"); code != 0 {
		t.Fatalf("freeze exited %d", code)
	}
	// An operator may freeze but not lift it.
	if _, code := runConsole(t, "", "unfreeze", "--data", data, "--as", "olive"); code == 0 {
		t.Fatal("an operator lifted a freeze")
	}
	s.kill()
	s = startPolicyServer(t, data)
	bot = newRawAgent(s.url, tok)
	red, err := bot.redeem(ctx, r.str("grant"), refundCall(7, 1500, "duplicate"))
	if err != nil || red.status != http.StatusServiceUnavailable || red.str("reason") != "frozen" {
		t.Fatalf("redeem after restart: %v %d %s", err, red.status, red.raw)
	}
	out, _ := runConsole(t, "", "freeze", "--list", "--data", data)
	if !strings.Contains(out, "every call frozen since") || !strings.Contains(out, "incident 9") {
		t.Fatalf("freeze --list: %s", out)
	}
	if _, code := runConsole(t, "", "unfreeze", "--data", data, "--as", "root"); code != 0 {
		t.Fatal("unfreeze by the admin failed")
	}
	red, err = bot.redeem(ctx, r.str("grant"), refundCall(7, 1500, "duplicate"))
	if err != nil || red.status != http.StatusOK {
		t.Fatalf("redeem after unfreeze: %v %d %s", err, red.status, red.raw)
	}
}

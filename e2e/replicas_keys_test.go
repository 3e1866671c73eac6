package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/pgtest"
)

// publishTrust rebuilds the trust file from every replica's keys jwks and
// replaces it atomically, as a deployment would.
func (r *replicas) publishTrust() {
	r.t.Helper()
	dir := r.t.TempDir()
	var parts []string
	for i, d := range r.data {
		out, code := runConsole(r.t, "", "keys", "jwks", "--data", d)
		if code != 0 {
			r.t.Fatalf("keys jwks exited %d", code)
		}
		p := filepath.Join(dir, fmt.Sprintf("%d.json", i))
		if err := os.WriteFile(p, []byte(out), 0o600); err != nil {
			r.t.Fatal(err)
		}
		parts = append(parts, p)
	}
	out, code := runConsole(r.t, "", append([]string{"keys", "trust"}, parts...)...)
	if code != 0 {
		r.t.Fatalf("keys trust exited %d", code)
	}
	tmp := r.trust + ".new"
	if err := os.WriteFile(tmp, []byte(out), 0o600); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Rename(tmp, r.trust); err != nil {
		r.t.Fatal(err)
	}
}

// TestKeyRotationWithoutWindow rotates replica A's grant key in two steps
// (prepare, publish the trust file, activate with --check-replica) while
// grants signed by A are redeemed on B the whole time: not one is refused
// as unknown_key, and B redeems A's first grants under the new key. A
// one-step rotation on B, not yet published, is then refused on A with
// unknown_key: the window the two steps close.
func TestKeyRotationWithoutWindow(t *testing.T) {
	requirePostgres(t)
	r := startReplicas(t, pgtest.Database(t), 2)
	token := r.token("agent:billing-bot", "payments-host")
	a, b := newRawAgent(r.srv[0].url, token), newRawAgent(r.srv[1].url, token)
	ctx := context.Background()

	// flow submits on A, approves on replica signer (which signs the
	// grant) and redeems on redeemer.
	var mu sync.Mutex
	kids := map[string]int{}
	invoice := 9000
	flow := func(signer int, redeemer *rawAgent) (kid string, red reply, err error) {
		mu.Lock()
		invoice++
		call := fmt.Sprintf(replicaRefund, invoice)
		mu.Unlock()
		sub, err := a.submit(ctx, call)
		if err != nil || sub.status != http.StatusCreated {
			return "", reply{}, fmt.Errorf("submit: %d %s %v", sub.status, sub.raw, err)
		}
		ar, err := controlApprove(ctx, r.data[signer], sub.str("id"), "alice", sub.str("digest"))
		if err != nil || ar.status != http.StatusOK {
			return "", reply{}, fmt.Errorf("approve: %d %s %v", ar.status, ar.raw, err)
		}
		grant, _ := ar.body["call"].(map[string]any)["grant"].(string)
		var hdr struct {
			KID string `json:"kid"`
		}
		if h, err := decodeSegment(strings.Split(grant, ".")[0]); err != nil || json.Unmarshal(h, &hdr) != nil {
			return "", reply{}, fmt.Errorf("grant header of %q: %v", grant, err)
		}
		red, err = redeemer.redeem(ctx, grant, call)
		return hdr.KID, red, err
	}
	// Flows run from A to B in the background through every step.
	stop := make(chan struct{})
	done := make(chan struct{})
	var failures []string
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			kid, red, err := flow(0, b)
			mu.Lock()
			switch {
			case err != nil:
				failures = append(failures, err.Error())
			case red.status != http.StatusOK || red.str("decision") != "accepted":
				failures = append(failures, fmt.Sprintf("kid %s: %d %s", kid, red.status, red.raw))
			default:
				kids[kid]++
			}
			n := len(failures)
			mu.Unlock()
			if n > 0 {
				return
			}
		}
	}()
	count := func(kid string) int {
		mu.Lock()
		defer mu.Unlock()
		return kids[kid]
	}
	// waitFlows waits until n flows under kid were redeemed.
	waitFlows := func(kid string, n int) {
		t.Helper()
		for count(kid) < n {
			select {
			case <-done:
				t.Fatalf("the flows stopped: %v", failures)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	first, err := runKeysList(t, r.data[0])
	if err != nil {
		t.Fatal(err)
	}
	waitFlows(first, 3)

	out, code := runConsole(t, "", "keys", "rotate", "--prepare", "--data", r.data[0], "--db", r.db)
	if code != 0 {
		t.Fatalf("keys rotate --prepare exited %d", code)
	}
	next := strings.TrimSuffix(strings.Fields(out)[1], ":")
	waitFlows(first, count(first)+3)
	if n := count(next); n != 0 {
		t.Fatalf("%d grants were signed with the key only prepared", n)
	}
	// Activation is refused while B does not list the next key yet.
	if _, code := runConsole(t, "", "keys", "rotate", "--activate", "--check-replica", r.srv[1].url,
		"--data", r.data[0], "--db", r.db); code == 0 {
		t.Fatal("activation succeeded before B listed the next key")
	}
	r.publishTrust()
	// Every replica re-reads the trust file within about a second.
	waitListed(t, r.srv[1].url, next)
	if _, code := runConsole(t, "", "keys", "rotate", "--activate", "--check-replica", r.srv[0].url, "--check-replica", r.srv[1].url,
		"--data", r.data[0], "--db", r.db); code != 0 {
		t.Fatalf("keys rotate --activate exited %d", code)
	}
	waitFlows(next, 5)
	close(stop)
	<-done
	mu.Lock()
	if len(failures) > 0 {
		t.Fatalf("a flow during the rotation failed: %v", failures)
	}
	t.Logf("flows signed on A and redeemed on B during the rotation, by kid: %v", kids)
	mu.Unlock()

	// The one-step rotation on B, not published: A refuses B's new grants.
	if _, code := runConsole(t, "", "keys", "rotate", "--data", r.data[1], "--db", r.db); code != 0 {
		t.Fatalf("keys rotate on B exited %d", code)
	}
	_, red, err := flow(1, a)
	if err != nil {
		t.Fatal(err)
	}
	if red.status != http.StatusForbidden || red.str("reason") != "unknown_key" {
		t.Fatalf("A redeeming B's grant under an unpublished key: %d %s; want 403 unknown_key", red.status, red.raw)
	}
	r.verify()
}

// waitListed waits until the replica at base lists kid in /api/v1/keys.
func waitListed(t *testing.T, base, kid string) {
	t.Helper()
	ag := newRawAgent(base, "")
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if k, err := ag.do(context.Background(), http.MethodGet, "/api/v1/keys", nil); err == nil && strings.Contains(string(k.raw), kid) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never listed %s", base, kid)
}

// runKeysList returns the current key of a data directory.
func runKeysList(t *testing.T, data string) (string, error) {
	t.Helper()
	out, code := runConsole(t, "", "keys", "list", "--data", data)
	if code != 0 {
		return "", fmt.Errorf("keys list exited %d", code)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "current" {
			return f[0], nil
		}
	}
	return "", fmt.Errorf("keys list shows no current key:\n%s", out)
}

package queue

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/scope"
)

// TestScopeCacheIsBounded: the kept scopes never outnumber
// maxCachedScopes, however many allowances are read, and a kept scope is
// returned only for the bytes it was parsed from.
func TestScopeCacheIsBounded(t *testing.T) {
	var c scopeCache
	until := time.Date(2026, 12, 5, 18, 0, 0, 0, time.UTC)
	for i := range 3 * maxCachedScopes {
		sc := &scope.Scope{Actor: "agent:a", Audience: "host", Tool: "pay.refund", ToolDigest: strings.Repeat("ab", 32),
			Target: scope.Target{Value: fmt.Sprintf("invoice:%d", i)}, Args: map[string]scope.Bound{}, Uses: 2, Until: until}
		a := &Allowance{ID: fmt.Sprintf("alw_%d", i), Scope: sc.JSON(), ScopeDigest: sc.Digest()}
		got, err := c.parse(a)
		if err != nil || got.Target.Value != sc.Target.Value {
			t.Fatalf("allowance %d: %+v, %v", i, got, err)
		}
		if n := len(c.m); n > maxCachedScopes {
			t.Fatalf("after %d allowances the cache holds %d scopes, more than %d", i+1, n, maxCachedScopes)
		}
	}
	sc := &scope.Scope{Actor: "agent:a", Audience: "host", Tool: "pay.refund", ToolDigest: strings.Repeat("ab", 32),
		Target: scope.Target{Value: "invoice:x"}, Args: map[string]scope.Bound{}, Uses: 2, Until: until}
	a := &Allowance{ID: "alw_x", Scope: sc.JSON(), ScopeDigest: sc.Digest()}
	if _, err := c.parse(a); err != nil {
		t.Fatal(err)
	}
	sc.Uses = 3
	a.Scope = sc.JSON() // edited, the digest kept
	if _, err := c.parse(a); err == nil {
		t.Error("a scope whose bytes changed under its digest was accepted from the cache")
	}
}

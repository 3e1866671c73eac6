package passkey

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
)

// trail seals entries into a chain, as the console writes them.
func trail(t *testing.T, entries ...*audit.Entry) []*audit.Entry {
	t.Helper()
	prevSeq, prev := int64(0), ""
	for _, e := range entries {
		e.Time = "2030-01-02T03:04:05.000000000Z"
		if err := e.Seal(prevSeq, prev); err != nil {
			t.Fatal(err)
		}
		prevSeq, prev = e.Seq, e.Hash
	}
	return entries
}

func exampleEvidence(t *testing.T) (Evidence, any) {
	t.Helper()
	b, err := os.ReadFile("testdata/evidence.json")
	if err != nil {
		t.Fatal(err)
	}
	var ev Evidence
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	v, err := canonical.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return ev, v
}

func registration(ev Evidence, key []byte) *audit.Entry {
	return &audit.Entry{Kind: audit.KindPasskeyAdded, Principal: ev.Operator, Channel: audit.ChannelWeb,
		Details: map[string]any{"user": ev.Operator, "credential_id": base64.RawURLEncoding.EncodeToString(ev.CredentialID),
			"name": ev.CredentialName, "public_key": base64.RawURLEncoding.EncodeToString(key), "sign_count": int64(0)}}
}

func approval(callID, digest, operator string, evidence any) *audit.Entry {
	return &audit.Entry{Kind: audit.KindApproved, CallID: callID, Principal: operator, Channel: audit.ChannelWeb,
		Details: map[string]any{"digest": digest, "received": int64(1), "required": int64(1), "method": "passkey",
			"passkey": map[string]any{"credential_id": "x", "name": "virtual key"}, "evidence": evidence}}
}

// verify runs the chain through an audit.Verifier with the checker, both
// with the details as values and as stored text.
func verify(t *testing.T, entries []*audit.Entry) (*TrailChecker, error) {
	t.Helper()
	c := NewTrailChecker()
	v := audit.NewVerifier()
	v.Check(c.Check)
	for _, e := range entries {
		body, err := canonical.Encode(e.Details)
		if err != nil {
			t.Fatal(err)
		}
		stored := *e
		stored.Details = audit.RawDetails(body)
		if err := v.Add(&stored); err != nil {
			return c, err
		}
	}
	return c, nil
}

func TestTrailCheckerReverifiesEveryPasskeyApproval(t *testing.T) {
	ev, evidence := exampleEvidence(t)
	click := &audit.Entry{Kind: audit.KindApproved, CallID: "c_00", Principal: "bob", Channel: audit.ChannelWeb,
		Details: map[string]any{"digest": ev.Digest, "received": int64(1), "required": int64(1)}}

	c, err := verify(t, trail(t, registration(ev, ev.PublicKey), click, approval(ev.CallID, ev.Digest, ev.Operator, evidence)))
	if err != nil || c.Verified != 1 || len(c.Unregistered) != 0 {
		t.Fatalf("the worked example: verified %d, unregistered %v, %v", c.Verified, c.Unregistered, err)
	}

	tests := []struct {
		name    string
		entries []*audit.Entry
		want    string
	}{
		{"the entry names another digest", trail(t, registration(ev, ev.PublicKey),
			approval(ev.CallID, strings.Repeat("cd", 32), ev.Operator, evidence)), "does not verify"},
		{"the entry names another call", trail(t, registration(ev, ev.PublicKey),
			approval("c_02", ev.Digest, ev.Operator, evidence)), "does not verify"},
		{"the entry names another operator", trail(t, registration(ev, ev.PublicKey),
			approval(ev.CallID, ev.Digest, "mallory", evidence)), "does not verify"},
		{"registered with another key", trail(t, registration(ev, []byte{0xa5, 1, 2}),
			approval(ev.CallID, ev.Digest, ev.Operator, evidence)), "another public key"},
		{"evidence that is not evidence", trail(t, registration(ev, ev.PublicKey),
			approval(ev.CallID, ev.Digest, ev.Operator, map[string]any{"format": "x"})), "does not verify"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := verify(t, tt.entries)
			var be *audit.BreakError
			if !errors.As(err, &be) || be.Seq != 2 || !strings.Contains(be.Reason, tt.want) {
				t.Fatalf("err = %v, want a break at entry 2 saying %q", err, tt.want)
			}
		})
	}
	t.Run("no registration in the entries seen", func(t *testing.T) {
		c, err := verify(t, trail(t, approval(ev.CallID, ev.Digest, ev.Operator, evidence)))
		if err != nil || c.Verified != 1 || len(c.Unregistered) != 1 || c.Unregistered[0] != 1 {
			t.Fatalf("verified %d, unregistered %v, %v", c.Verified, c.Unregistered, err)
		}
	})
}

// TestTrailCheckerTiesTheKeyToItsAccount: an approval verifies only with a
// key registered to the approving account and not removed since. Whoever
// registered a key of their own can sign any challenge (the client data is
// theirs to write), so a key registered to mallory proves nothing about an
// approval recorded for alice.
func TestTrailCheckerTiesTheKeyToItsAccount(t *testing.T) {
	ev, evidence := exampleEvidence(t)
	id := base64.RawURLEncoding.EncodeToString(ev.CredentialID)
	regAs := func(user string) *audit.Entry {
		e := registration(ev, ev.PublicKey)
		e.Principal, e.Details.(map[string]any)["user"] = user, user
		return e
	}
	removal := func(user, by string) *audit.Entry {
		return &audit.Entry{Kind: audit.KindPasskeyRemoved, Principal: by, Channel: audit.ChannelWeb,
			Details: map[string]any{"user": user, "credential_id": id, "name": ev.CredentialName}}
	}
	approve := func() *audit.Entry { return approval(ev.CallID, ev.Digest, ev.Operator, evidence) }
	tests := []struct {
		name    string
		entries []*audit.Entry
		want    string // "" when it verifies
	}{
		{"registered to another account", trail(t, regAs("mallory"), approve()), "registered to mallory"},
		{"removed before the approval", trail(t, regAs(ev.Operator), removal(ev.Operator, ev.Operator), approve()), "removed"},
		{"removed by an admin before the approval", trail(t, regAs(ev.Operator), removal(ev.Operator, "root"), approve()), "removed"},
		{"removal seen without its registration", trail(t, removal(ev.Operator, ev.Operator), approve()), "removed"},
		{"removed and registered again", trail(t, regAs(ev.Operator), removal(ev.Operator, ev.Operator), regAs(ev.Operator), approve()), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := verify(t, tt.entries)
			last := tt.entries[len(tt.entries)-1].Seq
			if tt.want == "" {
				if err != nil || c.Verified != 1 {
					t.Fatalf("verified %d, %v; want the approval verified", c.Verified, err)
				}
				return
			}
			var be *audit.BreakError
			if !errors.As(err, &be) || be.Seq != last || !strings.Contains(be.Reason, tt.want) {
				t.Fatalf("err = %v, want a break at entry %d saying %q", err, last, tt.want)
			}
		})
	}
}

// TestTrailCheckerSettlesWithAPrunedSnapshot: an approval whose passkey's
// registration was pruned is settled by the pruned entry's snapshot of the
// live passkeys: it must name the passkey with the same key, registered to
// the approver; one it does not name stays noted.
func TestTrailCheckerSettlesWithAPrunedSnapshot(t *testing.T) {
	ev, evidence := exampleEvidence(t)
	id := base64.RawURLEncoding.EncodeToString(ev.CredentialID)
	pruned := func(user string, key []byte) *audit.Entry {
		pk := []any{}
		if user != "" {
			pk = append(pk, map[string]any{"user": user, "credential_id": id, "name": ev.CredentialName,
				"public_key": base64.RawURLEncoding.EncodeToString(key)})
		}
		return &audit.Entry{Kind: audit.KindPruned, Principal: "root", Channel: audit.ChannelCLI,
			Details: map[string]any{"to_seq": int64(0), "snapshot": map[string]any{"passkeys": pk}}}
	}
	approve := func() *audit.Entry { return approval(ev.CallID, ev.Digest, ev.Operator, evidence) }

	c, err := verify(t, trail(t, approve(), pruned(ev.Operator, ev.PublicKey), approve()))
	if err != nil || c.Verified != 2 || len(c.Unregistered) != 0 {
		t.Fatalf("settled by the snapshot: verified %d, unregistered %v, %v", c.Verified, c.Unregistered, err)
	}
	c, err = verify(t, trail(t, approve(), pruned("", nil)))
	if err != nil || len(c.Unregistered) != 1 {
		t.Fatalf("a passkey the snapshot does not name: unregistered %v, %v", c.Unregistered, err)
	}
	for _, tc := range []struct {
		name string
		user string
		key  []byte
		want string
	}{
		{"registered to another account", "mallory", ev.PublicKey, "registered to mallory"},
		{"another key", ev.Operator, []byte{0xa5, 1, 2}, "another public key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := verify(t, trail(t, approve(), pruned(tc.user, tc.key)))
			var be *audit.BreakError
			if !errors.As(err, &be) || be.Seq != 2 || !strings.Contains(be.Reason, tc.want) {
				t.Fatalf("err = %v, want a break at entry 2 saying %q", err, tc.want)
			}
		})
	}
}

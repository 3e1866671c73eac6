package passkey

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/countersign/countersign/internal/audit"
)

// TrailChecker re-verifies, entry by entry, every approval signed by a
// passkey that an audit trail records: the evidence in the approved
// entry's details is checked with Verify against the call id, digest and
// operator the entry itself records (not the evidence's own copies), and
// its public key must be the one the passkey_registered entry recorded
// for that credential. Give it to audit.VerifyOptions.Check.
type TrailChecker struct {
	keys map[string][]byte // credential id (base64url) → COSE key, from registrations seen

	// Verified counts the approvals whose evidence verified; Unregistered
	// lists the entries whose passkey was registered before the entries
	// seen (a range export), whose key could not be compared.
	Verified     int
	Unregistered []int64
}

// NewTrailChecker returns a checker that has seen no entry yet.
func NewTrailChecker() *TrailChecker { return &TrailChecker{keys: map[string][]byte{}} }

// Check checks one entry; it is called in the trail's order.
func (t *TrailChecker) Check(e *audit.Entry) error {
	if e.Kind != audit.KindPasskeyAdded && e.Kind != audit.KindApproved {
		return nil
	}
	raw, err := detailsJSON(e.Details)
	if err != nil {
		return err
	}
	switch e.Kind {
	case audit.KindPasskeyAdded:
		var d struct {
			CredentialID string `json:"credential_id"`
			PublicKey    B64    `json:"public_key"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			return fmt.Errorf("passkey: registration entry %d: %w", e.Seq, err)
		}
		t.keys[d.CredentialID] = d.PublicKey
		return nil
	}
	var d struct {
		Method   string          `json:"method"`
		Digest   string          `json:"digest"`
		Evidence json.RawMessage `json:"evidence"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("passkey: approval entry %d: %w", e.Seq, err)
	}
	if d.Method != "passkey" {
		return nil
	}
	var ev Evidence
	if err := json.Unmarshal(d.Evidence, &ev); err != nil {
		return fmt.Errorf("the passkey evidence of this approval does not read: %v", err)
	}
	if err := Verify(ev, Binding{CallID: e.CallID, Digest: d.Digest, Operator: e.Principal}); err != nil {
		return fmt.Errorf("the passkey signature of this approval does not verify: %v", err)
	}
	id := base64.RawURLEncoding.EncodeToString(ev.CredentialID)
	key, ok := t.keys[id]
	if !ok {
		t.Unregistered = append(t.Unregistered, e.Seq)
	} else if !ev.SamePublicKey(ev.CredentialID, key) {
		return fmt.Errorf("the passkey that signed this approval is not the one registered as %s (another public key)", id)
	}
	t.Verified++
	return nil
}

// detailsJSON is an entry's details as JSON text: as stored, or encoded.
func detailsJSON(d any) ([]byte, error) {
	if raw, ok := d.(audit.RawDetails); ok {
		return raw, nil
	}
	return json.Marshal(d)
}

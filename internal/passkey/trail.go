package passkey

import (
	"bytes"
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
// for that credential, registered to the approving account and not
// removed since. Give it to audit.VerifyOptions.Check.
//
// The account matters: whoever registers a key of their own can sign any
// challenge (the client data is theirs to write), so only a key registered
// to the operator the entry names says that operator approved.
type TrailChecker struct {
	keys    map[string]registered // credential id (base64url) → its registration, from the entries seen
	removed map[string]int64      // credential id → the entry that removed it, while not registered again

	// Verified counts the approvals whose evidence verified; Unregistered
	// lists the entries whose passkey was registered before the entries
	// seen (a range export), whose key could not be compared.
	Verified     int
	Unregistered []int64

	// unregistered holds the approvals in Unregistered until a pruned
	// entry's snapshot settles them: the passkey, its key and approver.
	unregistered []pending
}

// pending is an approval whose passkey's registration was not seen.
type pending struct {
	seq      int64
	id, user string
	key      []byte
}

// registered is a passkey's registration entry: its account and key.
type registered struct {
	user string
	key  []byte
}

// NewTrailChecker returns a checker that has seen no entry yet.
func NewTrailChecker() *TrailChecker {
	return &TrailChecker{keys: map[string]registered{}, removed: map[string]int64{}}
}

// Check checks one entry; it is called in the trail's order.
func (t *TrailChecker) Check(e *audit.Entry) error {
	if e.Kind != audit.KindPasskeyAdded && e.Kind != audit.KindPasskeyRemoved && e.Kind != audit.KindApproved && e.Kind != audit.KindPruned {
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
		t.keys[d.CredentialID] = registered{user: registrant(raw, e), key: d.PublicKey}
		delete(t.removed, d.CredentialID)
		return nil
	case audit.KindPruned:
		return t.settle(raw)
	case audit.KindPasskeyRemoved:
		var d struct {
			CredentialID string `json:"credential_id"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			return fmt.Errorf("passkey: removal entry %d: %w", e.Seq, err)
		}
		delete(t.keys, d.CredentialID)
		t.removed[d.CredentialID] = e.Seq
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
	if seq, ok := t.removed[id]; ok {
		return fmt.Errorf("the passkey that signed this approval (%s) was removed at entry %d, before it", id, seq)
	}
	reg, ok := t.keys[id]
	switch {
	case !ok:
		t.Unregistered = append(t.Unregistered, e.Seq)
		t.unregistered = append(t.unregistered, pending{seq: e.Seq, id: id, user: e.Principal, key: ev.PublicKey})
	case !ev.SamePublicKey(ev.CredentialID, reg.key):
		return fmt.Errorf("the passkey that signed this approval is not the one registered as %s (another public key)", id)
	case reg.user != e.Principal:
		return fmt.Errorf("the passkey that signed this approval (%s) is registered to %s, not to %s", id, reg.user, e.Principal)
	}
	t.Verified++
	return nil
}

// settle reads a pruned entry's snapshot of the passkeys live when older
// entries were removed (docs/audit.md §6): each approval before it whose
// registration was removed must be by a passkey the snapshot names, with
// the same key, registered to the approver; a passkey it names is known
// from then on as if its registration had been seen. An approval by a
// passkey the snapshot does not name (removed before the prune) stays
// noted in Unregistered.
func (t *TrailChecker) settle(raw []byte) error {
	var d struct {
		Snapshot struct {
			Passkeys []struct {
				User         string `json:"user"`
				CredentialID string `json:"credential_id"`
				PublicKey    B64    `json:"public_key"`
			} `json:"passkeys"`
		} `json:"snapshot"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("passkey: pruned entry: %w", err)
	}
	live := map[string]registered{}
	for _, p := range d.Snapshot.Passkeys {
		live[p.CredentialID] = registered{user: p.User, key: p.PublicKey}
	}
	var still []pending
	var seqs []int64
	for _, p := range t.unregistered {
		reg, ok := live[p.id]
		switch {
		case !ok:
			still, seqs = append(still, p), append(seqs, p.seq)
		case !bytes.Equal(reg.key, p.key):
			return fmt.Errorf("the passkey that signed entry %d (%s) has another public key in this pruned entry's snapshot", p.seq, p.id)
		case reg.user != p.user:
			return fmt.Errorf("the passkey that signed entry %d (%s) is registered to %s in this pruned entry's snapshot, not to %s", p.seq, p.id, reg.user, p.user)
		}
	}
	t.unregistered, t.Unregistered = still, seqs
	for id, reg := range live {
		if _, ok := t.keys[id]; !ok {
			if _, gone := t.removed[id]; !gone {
				t.keys[id] = reg
			}
		}
	}
	return nil
}

// registrant is the account a registration entry registered the passkey
// to: its details' user, which is the entry's principal.
func registrant(raw []byte, e *audit.Entry) string {
	var d struct {
		User string `json:"user"`
	}
	if json.Unmarshal(raw, &d) == nil && d.User != "" {
		return d.User
	}
	return e.Principal
}

// detailsJSON is an entry's details as JSON text: as stored, or encoded.
func detailsJSON(d any) ([]byte, error) {
	if raw, ok := d.(audit.RawDetails); ok {
		return raw, nil
	}
	return json.Marshal(d)
}

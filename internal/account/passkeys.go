package account

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"time"

	"github.com/countersign/countersign/internal/audit"
)

// Passkey is a WebAuthn credential registered to an account.
type Passkey struct {
	// ID is the credential id.
	ID   []byte
	User string
	// Name is what the operator called it.
	Name string
	// PublicKey is the credential's COSE key; SignCount its signature
	// counter as last seen.
	PublicKey []byte
	SignCount uint32
	// Record is the WebAuthn library's whole credential record (JSON),
	// kept opaque here.
	Record     []byte
	CreatedAt  time.Time
	LastUsedAt time.Time // zero until it first approves
}

// IDString is the credential id as browsers and the audit trail write it:
// unpadded base64url.
func (p Passkey) IDString() string { return base64.RawURLEncoding.EncodeToString(p.ID) }

// MaxPasskeys bounds the passkeys of one account.
const MaxPasskeys = 20

// ErrTooManyPasskeys refuses a registration past MaxPasskeys.
var ErrTooManyPasskeys = errors.New("account: an account holds at most 20 passkeys; remove one first")

// Passkeys lists a user's passkeys, oldest first.
func (s *Service) Passkeys(ctx context.Context, user string) ([]Passkey, error) {
	return s.store.Passkeys(ctx, user)
}

// UserHandle returns the user's WebAuthn user handle, making it at first
// use.
func (s *Service) UserHandle(ctx context.Context, user string) ([]byte, error) {
	var out []byte
	err := s.store.Update(ctx, func(tx Tx) error {
		u, err := tx.User(user)
		if err != nil {
			return err
		}
		if len(u.Handle) > 0 {
			out = u.Handle
			return nil
		}
		h := make([]byte, 32)
		if _, err := rand.Read(h); err != nil {
			return err
		}
		if err := tx.SetUserHandle(user, h); err != nil {
			return err
		}
		out = h
		return nil
	})
	return out, err
}

// AddPasskey stores a newly registered passkey of p.User and audits it with
// its public key, which `console audit verify` ties every later approval
// with it back to.
func (s *Service) AddPasskey(ctx context.Context, p Passkey, channel string) error {
	return s.store.Update(ctx, func(tx Tx) error {
		have, err := tx.Passkeys(p.User)
		if err != nil {
			return err
		}
		if len(have) >= MaxPasskeys {
			return ErrTooManyPasskeys
		}
		if err := tx.InsertPasskey(p); err != nil {
			return err
		}
		return tx.Append(&audit.Entry{Time: audit.FormatTime(s.now()), Kind: audit.KindPasskeyAdded,
			Principal: p.User, Channel: channel, Details: map[string]any{
				"user": p.User, "credential_id": p.IDString(), "name": p.Name,
				"public_key": base64.RawURLEncoding.EncodeToString(p.PublicKey), "sign_count": int64(p.SignCount)}})
	})
}

// RemovePasskey removes one of user's passkeys, audited as done by by.
func (s *Service) RemovePasskey(ctx context.Context, user string, id []byte, by, channel string) (Passkey, error) {
	var out Passkey
	err := s.store.Update(ctx, func(tx Tx) error {
		p, err := tx.DeletePasskey(user, id)
		if err != nil {
			return err
		}
		out = p
		return tx.Append(&audit.Entry{Time: audit.FormatTime(s.now()), Kind: audit.KindPasskeyRemoved,
			Principal: by, Channel: channel, Details: map[string]any{
				"user": user, "credential_id": p.IDString(), "name": p.Name}})
	})
	return out, err
}

package account

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/countersign/countersign/internal/oneshot"
)

// Oneshot is a short-lived, single-use value kept in the store: a login or
// a passkey prompt under way.
type Oneshot struct {
	Kind    string
	KeyHash string // SHA-256 of the key the browser holds, never the key
	Owner   string // the account it belongs to, or ""
	Value   []byte
	Expires time.Time
}

// Oneshots returns a oneshot.Store of the given kind ("oidc", "passkey")
// kept in the database, so that every console replica on it sees the same
// ceremonies and each is taken once. At most max unexpired values of the
// kind are kept; expired ones are pruned as new ones arrive.
func (s *Service) Oneshots(kind string, max int) oneshot.Store {
	return oneshots{s: s, kind: kind, max: max}
}

type oneshots struct {
	s    *Service
	kind string
	max  int
}

func (o oneshots) hash(key string) string {
	h := sha256.Sum256([]byte("countersign/oneshot:" + o.kind + ":" + key))
	return hex.EncodeToString(h[:])
}

func (o oneshots) Put(ctx context.Context, key string, value []byte, expires time.Time) error {
	now := o.s.now()
	return o.s.store.Update(ctx, func(tx Tx) error {
		if err := tx.PruneOneshots(o.kind, now); err != nil {
			return err
		}
		n, err := tx.CountOneshots(o.kind)
		if err != nil {
			return err
		}
		if n >= o.max {
			return oneshot.ErrFull
		}
		return tx.InsertOneshot(Oneshot{Kind: o.kind, KeyHash: o.hash(key), Value: value, Expires: expires})
	})
}

func (o oneshots) PutOwned(ctx context.Context, owner string, perOwner int, key string, value []byte, expires time.Time) error {
	now := o.s.now()
	return o.s.store.Update(ctx, func(tx Tx) error {
		if err := tx.PruneOneshots(o.kind, now); err != nil {
			return err
		}
		if err := tx.TrimOneshots(o.kind, owner, perOwner-1); err != nil {
			return err
		}
		n, err := tx.CountOneshots(o.kind)
		if err != nil {
			return err
		}
		if n >= o.max {
			return oneshot.ErrFull
		}
		return tx.InsertOneshot(Oneshot{Kind: o.kind, KeyHash: o.hash(key), Owner: owner, Value: value, Expires: expires})
	})
}

func (o oneshots) Take(ctx context.Context, key string) ([]byte, time.Time, error) {
	var out Oneshot
	err := o.s.store.Update(ctx, func(tx Tx) error {
		var err error
		out, err = tx.TakeOneshot(o.kind, o.hash(key))
		return err
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	return out.Value, out.Expires, nil
}

// Package plan holds the rules of a plan that do not depend on storage: the
// plan digest an operator approves and the checks its item list must pass.
package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/countersign/countersign/internal/canonical"
)

// DigestPrefix is hashed before the canonical bytes of a plan.
const DigestPrefix = "countersign/v1/plan:"

// MaxItems is the most calls one plan may hold.
const MaxItems = 50

// ErrShape reports an item list that cannot form a plan.
var ErrShape = errors.New("plan: item list cannot form a plan")

// Digest is hex(SHA-256("countersign/v1/plan:" || JCS({"v":1,"ordered":bool,
// "items":[item digests]}))). The items are the call digests in the order the
// agent listed them; that order is part of what the operator approves.
func Digest(ordered bool, items []string) (string, error) {
	if err := Check(items); err != nil {
		return "", err
	}
	list := make([]any, len(items))
	for i, d := range items {
		list[i] = d
	}
	obj, err := canonical.NewObject(
		canonical.Member{Name: "v", Value: int64(1)},
		canonical.Member{Name: "ordered", Value: ordered},
		canonical.Member{Name: "items", Value: list},
	)
	if err != nil {
		return "", err
	}
	b, err := canonical.Encode(obj)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(DigestPrefix))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Check reports why a list of item digests cannot form a plan: it must hold
// between one and MaxItems digests, no two alike.
func Check(items []string) error {
	if len(items) == 0 {
		return fmt.Errorf("%w: a plan needs at least one item", ErrShape)
	}
	if len(items) > MaxItems {
		return fmt.Errorf("%w: %d items, at most %d", ErrShape, len(items), MaxItems)
	}
	seen := make(map[string]int, len(items))
	for i, d := range items {
		if j, ok := seen[d]; ok {
			return fmt.Errorf("%w: items %d and %d are the same call (digest %s)", ErrShape, j, i, d)
		}
		seen[d] = i
	}
	return nil
}

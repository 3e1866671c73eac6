package passkey

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/oneshot"
)

// One account beginning registrations without end does not stop another
// account's approval; a store full of others' prompts refuses with
// ErrPromptsFull.
func TestCeremoniesBoundedPerAccount(t *testing.T) {
	r := newReplay(t)
	store := oneshot.NewMemory(MaxCeremoniesPerAccount+1, func() time.Time { return r.now })
	svc, err := New(Config{RPID: r.rec.RPID, Origins: []string{r.rec.Origin}, Now: func() time.Time { return r.now }, Ceremonies: store})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	filler := User{Handle: []byte("filler-handle"), Name: "auditor-1", DisplayName: "auditor-1"}
	for i := range 100 {
		if _, _, err := svc.BeginRegistration(ctx, filler); err != nil {
			t.Fatalf("registration %d: %v", i, err)
		}
	}
	if n := store.Len(); n != MaxCeremoniesPerAccount {
		t.Errorf("one account holds %d prompts, want %d", n, MaxCeremoniesPerAccount)
	}
	a := r.rec.assertion(t, "approve")
	if _, _, err := svc.BeginApproval(ctx, r.user, a.Binding); err != nil {
		t.Fatalf("another account's approval after the filler: %v", err)
	}
	third := User{Handle: []byte("third-handle"), Name: "olivia", DisplayName: "olivia"}
	if _, _, err := svc.BeginRegistration(ctx, third); !errors.Is(err, ErrPromptsFull) {
		t.Errorf("a prompt into a full store = %v, want ErrPromptsFull", err)
	}
}

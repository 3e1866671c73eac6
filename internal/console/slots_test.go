package console

import (
	"errors"
	"testing"
)

func TestSlotsPerOwnerAndInAll(t *testing.T) {
	s := newSlots(2, 3)
	a1, err := s.take("alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.take("alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.take("alice"); !errors.Is(err, errOwnerSlotsFull) {
		t.Fatalf("alice's third slot: %v, want errOwnerSlotsFull", err)
	}
	if _, err := s.take("bob"); err != nil {
		t.Fatalf("bob while alice holds her share: %v", err)
	}
	if _, err := s.take("carol"); !errors.Is(err, errAllSlotsFull) {
		t.Fatalf("a fourth slot in all: %v, want errAllSlotsFull", err)
	}
	a1()
	a1() // a second release frees nothing more
	if _, err := s.take("carol"); err != nil {
		t.Fatalf("carol after alice released one: %v", err)
	}
	if _, err := s.take("dave"); !errors.Is(err, errAllSlotsFull) {
		t.Fatalf("after a double release: %v, want errAllSlotsFull (released once)", err)
	}
}

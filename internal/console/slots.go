package console

import (
	"errors"
	"sync"
)

// slots counts what people hold open at once (sockets, exports, evidence
// packs), each per account and in all, so that one account cannot take
// what everyone shares (DESIGN.md §3, invariant 19).
type slots struct {
	mu       sync.Mutex
	held     map[string]int // by account name
	total    int
	perOwner int // at most this many per account
	max      int // at most this many in all
}

// Why take refuses a slot.
var (
	errOwnerSlotsFull = errors.New("console: this account holds all its slots")
	errAllSlotsFull   = errors.New("console: every slot is held")
)

func newSlots(perOwner, max int) *slots {
	return &slots{held: map[string]int{}, perOwner: perOwner, max: max}
}

// take holds a slot for owner until release is called (once; later calls
// do nothing). It refuses with errOwnerSlotsFull or errAllSlotsFull.
func (s *slots) take(owner string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.held[owner] >= s.perOwner:
		return nil, errOwnerSlotsFull
	case s.total >= s.max:
		return nil, errAllSlotsFull
	}
	s.held[owner]++
	s.total++
	var once sync.Once
	return func() { once.Do(func() { s.give(owner) }) }, nil
}

func (s *slots) give(owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.held[owner]--; s.held[owner] == 0 {
		delete(s.held, owner)
	}
}

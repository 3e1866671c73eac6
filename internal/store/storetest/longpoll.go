package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// A long-poll reads the call's head before it waits (CallHead, where the
// store has it): another token's call, pending or decided, another
// actor's and a missing one are answered at once with queue.ErrNotFound,
// exactly as a read without a wait answers them, and never wait: a wait
// would tell that the call exists and is pending. The submitting token
// waits, and is woken with the decided call.
var _ = add("calls/a long-poll refuses what its token may not see, at once", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	h := w.open(t)
	owner := payer
	owner.TokenID = "tok_owner"
	sibling := payer
	sibling.TokenID = "tok_sibling" // the same actor, another token
	stranger := queue.Principal{Actor: "agent:other", Audience: payer.Audience, TokenID: "tok_owner"}
	pending := mustSubmit(t, h, owner, refund(1, "n"))
	decided := mustSubmit(t, h, owner, refund(2, "n"))
	if _, err := h.q.Deny(ctx, "alice", audit.ChannelWeb, decided.ID, "no"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		who  queue.Principal
		id   string
	}{
		{"another token's pending call", sibling, pending.ID},
		{"another token's decided call", sibling, decided.ID},
		{"another actor's pending call", stranger, pending.ID},
		{"a missing call", owner, "call_missing"},
	} {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		start := time.Now()
		got, err := h.q.Wait(wctx, tc.who, tc.id, time.Minute)
		cancel()
		if !errors.Is(err, queue.ErrNotFound) || got != nil {
			t.Errorf("%s: Wait = %v, %v; want queue.ErrNotFound", tc.name, got, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: Wait answered after %v; want at once", tc.name, d)
		}
		if _, gerr := h.q.Get(ctx, tc.who, tc.id); !errors.Is(gerr, queue.ErrNotFound) {
			t.Errorf("%s: Get = %v; the long-poll must answer as Get does", tc.name, gerr)
		}
	}
	waited := make(chan error, 1)
	go func() {
		c, err := h.q.Wait(ctx, owner, pending.ID, time.Minute)
		if err == nil && c.Status != queue.StatusDenied {
			err = errors.New("woken with status " + string(c.Status))
		}
		waited <- err
	}()
	for h.q.Waiting() < 1 {
		time.Sleep(time.Millisecond)
	}
	if _, err := h.q.Deny(ctx, "alice", audit.ChannelWeb, pending.ID, "no"); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Errorf("the submitting token's long-poll: %v", err)
	}
})

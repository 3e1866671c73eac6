package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/queue"
)

// presentingEnv is a service that checks presentation tokens under key.
func presentingEnv(t *testing.T) (*env, *present.Key) {
	t.Helper()
	key, err := present.NewKey([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	return newEnvWith(t, func(cfg *queue.Config) { cfg.Presentations = key }), key
}

// TestPresentationRequiredFromTheBrowser: with presentations checked, an
// approval through the browser is refused unless it carries the token of
// a page that showed exactly this call, with this digest, to this
// approver, within the call's decision window; nothing is recorded for a
// refusal. The accepted approval records what was presented, and a
// command records none and says so.
func TestPresentationRequiredFromTheBrowser(t *testing.T) {
	ctx := context.Background()
	e, key := presentingEnv(t)
	c := submitRefund(t, e)
	other := submitRefund(t, e)
	now := e.clock.Now()
	token := func(page, viewer string, at time.Time, items ...present.Item) string {
		return key.Token(present.Shown{Page: page, Viewer: viewer, At: at, Items: items})
	}
	item := present.Item{CallID: c.ID, Digest: c.Digest}
	window := c.DecideBy.Sub(c.CreatedAt)
	for name, tok := range map[string]string{
		"no token":               "",
		"garbage":                "p1.call.1.xx",
		"another viewer":         token(present.PageCall, "bob", now, item),
		"another call":           token(present.PageCall, "alice", now, present.Item{CallID: other.ID, Digest: other.Digest}),
		"another digest":         token(present.PageCall, "alice", now, present.Item{CallID: c.ID, Digest: other.Digest}),
		"a batch page":           token(present.PageBatch, "alice", now, item),
		"the call among others":  token(present.PageCall, "alice", now, item, present.Item{CallID: other.ID, Digest: other.Digest}),
		"older than its window":  token(present.PageCall, "alice", c.CreatedAt.Add(-window-time.Second), item),
		"rendered in the future": token(present.PageCall, "alice", now.Add(time.Minute), item),
	} {
		_, err := e.q.ApproveWith(ctx, queue.ApproveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: c.ID, Digest: c.Digest, Presented: tok})
		if !errors.Is(err, queue.ErrPresentation) {
			t.Errorf("%s: %v, want ErrPresentation", name, err)
		}
	}
	if got, _ := e.q.Call(ctx, c.ID); got.Status != queue.StatusPending || len(got.Approvals) != 0 {
		t.Fatalf("after refused approvals: %s with %d approvals, want pending with none", got.Status, len(got.Approvals))
	}
	// A token given on another channel is checked too.
	if _, err := e.q.ApproveWith(ctx, queue.ApproveInput{Operator: "alice", Channel: audit.ChannelCLI, CallID: c.ID, Digest: c.Digest,
		Presented: token(present.PageCall, "bob", now, item)}); !errors.Is(err, queue.ErrPresentation) {
		t.Errorf("a command carrying another viewer's token: %v, want ErrPresentation", err)
	}

	shownAt := now.Add(-time.Minute)
	got, err := e.q.ApproveWith(ctx, queue.ApproveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: c.ID, Digest: c.Digest,
		Presented: token(present.PageCall, "alice", shownAt, item)})
	if err != nil {
		t.Fatal(err)
	}
	a := got.Approvals[0]
	if a.Method != queue.MethodClick || a.Human() != queue.HumanTrue || a.Digest != c.Digest || a.Presented == nil ||
		a.Presented.Page != present.PageCall || !a.Presented.At.Equal(shownAt.Truncate(time.Millisecond)) {
		t.Errorf("recorded approval = %+v (presented %+v); want click, human, the digest, the call page at %v", a, a.Presented, shownAt)
	}
	stored, _ := e.q.Call(ctx, c.ID)
	if !sameApproval(stored.Approvals[0], a) {
		t.Errorf("stored approval = %+v, want %+v", stored.Approvals[0], a)
	}
	var details struct {
		Method, Human, Digest string
		Presented             struct{ Page, At string }
	}
	if err := json.Unmarshal([]byte(auditKinds(t, e, c.ID)[audit.KindApproved]), &details); err != nil {
		t.Fatal(err)
	}
	if details.Method != "click" || details.Human != "true" || details.Digest != c.Digest || details.Presented.Page != "call" || details.Presented.At == "" {
		t.Errorf("audit details = %+v", details)
	}

	// A command carries no page: recorded, and said to be unattested.
	got, err = e.q.Approve(ctx, "alice", audit.ChannelCLI, other.ID, other.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if a := got.Approvals[0]; a.Method != queue.MethodCommand || a.Human() != queue.HumanUnattested || a.Presented != nil || a.Digest != other.Digest {
		t.Errorf("approval by command = %+v", a)
	}
}

func sameApproval(a, b queue.Approval) bool {
	return a.Operator == b.Operator && a.Method == b.Method && a.Digest == b.Digest && a.Via == b.Via &&
		(a.Presented == nil) == (b.Presented == nil) && (a.Presented == nil || a.Presented.Page == b.Presented.Page && a.Presented.At.Equal(b.Presented.At))
}

// TestPresentationOfABatch: a batch approval carries the review page's
// token over every call and digest it showed; a call's page does not do,
// nor a page that showed fewer calls. Each approval records method batch,
// the batch and the page. A call the page showed longer ago than its
// decision window drops out; the rest are approved.
func TestPresentationOfABatch(t *testing.T) {
	ctx := context.Background()
	e, key := presentingEnv(t)
	a, b := submitRefund(t, e), submitRefund(t, e)
	items := []queue.BatchItem{{CallID: a.ID, Digest: a.Digest}, {CallID: b.ID, Digest: b.Digest}}
	shown := []present.Item{{CallID: a.ID, Digest: a.Digest}, {CallID: b.ID, Digest: b.Digest}}
	now := e.clock.Now()
	for name, tok := range map[string]string{
		"no token":       "",
		"a call's page":  key.Token(present.Shown{Page: present.PageCall, Viewer: "alice", At: now, Items: shown}),
		"fewer calls":    key.Token(present.Shown{Page: present.PageBatch, Viewer: "alice", At: now, Items: shown[:1]}),
		"another viewer": key.Token(present.Shown{Page: present.PageBatch, Viewer: "bob", At: now, Items: shown}),
	} {
		if _, err := e.q.ApproveBatch(ctx, queue.BatchInput{Operator: "alice", Channel: audit.ChannelWeb, Items: items, Presented: tok}); !errors.Is(err, queue.ErrPresentation) {
			t.Errorf("%s: %v, want ErrPresentation", name, err)
		}
	}
	res, err := e.q.ApproveBatch(ctx, queue.BatchInput{Operator: "alice", Channel: audit.ChannelWeb, Items: items,
		Presented: key.Token(present.Shown{Page: present.PageBatch, Viewer: "alice", At: now, Items: shown})})
	if err != nil || len(res.Decided) != 2 || len(res.Dropped) != 0 {
		t.Fatalf("batch = %+v, %v", res, err)
	}
	for _, c := range res.Decided {
		ap := c.Approvals[0]
		if ap.Method != queue.MethodBatch || ap.Via != res.ID || ap.Human() != queue.HumanTrue || ap.Presented == nil ||
			ap.Presented.Page != present.PageBatch || ap.Digest != c.Digest {
			t.Errorf("%s: approval %+v; want batch %s, human, the batch page, its digest", c.ID, ap, res.ID)
		}
	}

	// A review page older than its calls' decision window (a page can
	// only be that old when its clock was wrong): each call drops out,
	// and nothing is approved.
	c, d := submitRefund(t, e), submitRefund(t, e)
	stale := []present.Item{{CallID: c.ID, Digest: c.Digest}, {CallID: d.ID, Digest: d.Digest}}
	res, err = e.q.ApproveBatch(ctx, queue.BatchInput{Operator: "alice", Channel: audit.ChannelWeb,
		Items:     []queue.BatchItem{{CallID: c.ID, Digest: c.Digest}, {CallID: d.ID, Digest: d.Digest}},
		Presented: key.Token(present.Shown{Page: present.PageBatch, Viewer: "alice", At: c.CreatedAt.Add(-c.DecideBy.Sub(c.CreatedAt) - time.Second), Items: stale})})
	if err != nil || len(res.Decided) != 0 || len(res.Dropped) != 2 || !errors.Is(res.Dropped[0].Err, queue.ErrPresentation) {
		t.Fatalf("a stale batch = %+v, %v; want both dropped for their presentation", res, err)
	}
}

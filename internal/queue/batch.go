package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/present"
)

// MaxBatch is how many calls one batch decision may name.
const MaxBatch = 50

// Refusals of a whole batch, before anything is decided.
var (
	ErrBatchEmpty     = errors.New("queue: a batch decision names no call")
	ErrBatchTooLarge  = fmt.Errorf("queue: a batch decision names more than %d calls", MaxBatch)
	ErrBatchDuplicate = errors.New("queue: a batch decision names one call twice")
)

// Reasons one call drops out of a batch approval while the rest proceed:
// the call asks more of its approver than a batch gives (one press of a
// button for calls read together), so it is decided on its own page.
var (
	// ErrBatchWarning drops a call with a deception warning: it must be
	// read, and the warning acknowledged, on its own.
	ErrBatchWarning = errors.New("queue: a call with a deception warning is approved only on its own page")
	// ErrBatchConfirm drops a call whose tool asks for its target or a word
	// to be typed.
	ErrBatchConfirm = errors.New("queue: a call whose tool asks for typed confirmation is approved only on its own page")
	// ErrBatchPasskey drops a call that requires a passkey.
	ErrBatchPasskey = errors.New("queue: a call that requires a passkey is approved only on its own page")
)

// BatchItem is one call of a batch and the digest its approver was shown.
type BatchItem struct {
	CallID, Digest string
}

// BatchInput is one person's decision on several calls read together on
// one page: every item is approved (ApproveBatch) or denied with Reason
// (DenyBatch).
type BatchInput struct {
	Operator, Channel string
	Items             []BatchItem
	// Reason is the one reason of a batch denial, which every agent
	// receives.
	Reason string
	// Presented is the presentation token of the review page that showed
	// the batch: every item, with its digest. A batch approval through the
	// browser must carry it (Config.Presentations).
	Presented string
}

// BatchResult is what a batch decision did: the calls decided, in the
// order given, and the calls that dropped out, each with its reason.
type BatchResult struct {
	// ID names the batch in every decided call's audit entry.
	ID      string
	Decided []*Call
	Dropped []BatchDrop
}

// BatchDrop is a call that a batch decision left undecided, and why: a
// refusal the single decision would make (the call changed or was decided
// meanwhile, the operator may not approve it, a freeze), or ErrBatchWarning,
// ErrBatchConfirm or ErrBatchPasskey.
type BatchDrop struct {
	CallID string
	Err    error
}

// ApproveBatch approves every call of in as its own approval, in one
// transaction: each call is checked as a single approval checks it
// (checkApproval), gets its own approval and audit entry (method batch,
// with the batch's id) and, when that approval completes it, its own
// grant. A call that fails a check, or would ask more than a press of a
// button (a deception warning, typed confirmation, a passkey), drops out
// with the reason and the rest are approved. Events are published after
// the commit.
func (s *Service) ApproveBatch(ctx context.Context, in BatchInput) (*BatchResult, error) {
	if err := checkBatch(in); err != nil {
		return nil, err
	}
	res := &BatchResult{ID: newBatchID(s.now())}
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		res.Decided, res.Dropped = nil, nil
		u, err := decider(tx, in.Operator)
		if err != nil {
			return err
		}
		now := s.now()
		shown, err := s.presented(in.Channel, in.Presented, present.PageBatch, in.Operator, batchItems(in.Items), now)
		if err != nil {
			return err
		}
		for _, it := range in.Items {
			c, err := s.batchApprovable(tx, u, it, emit)
			if err == nil {
				err = shownInTime(shown, c, now)
			}
			if err != nil {
				if !dropsOut(err) {
					return err
				}
				res.Dropped = append(res.Dropped, BatchDrop{CallID: it.CallID, Err: err})
				continue
			}
			a := Approval{Operator: u.Name, Channel: in.Channel, At: now, Method: MethodBatch, Digest: it.Digest, Via: res.ID, Presented: shown}
			details := map[string]any{"batch": res.ID, "batch_size": int64(len(in.Items))}
			if err := s.addApproval(tx, c, u, a, details, nil, emit); err != nil {
				return err
			}
			res.Decided = append(res.Decided, c)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// batchItems is what a batch's review page presented.
func batchItems(items []BatchItem) []present.Item {
	out := make([]present.Item, len(items))
	for i, it := range items {
		out[i] = present.Item{CallID: it.CallID, Digest: it.Digest}
	}
	return out
}

// batchApprovable reads the call of it and checks that u's approval of it
// in a batch may be recorded.
func (s *Service) batchApprovable(tx Tx, u account.User, it BatchItem, emit func(Event)) (*Call, error) {
	c, err := s.loadPendingInBatch(tx, it.CallID, emit)
	if err != nil {
		return nil, err
	}
	if err := s.checkApproval(tx, c, u, it.Digest); err != nil {
		return nil, err
	}
	if err := s.batchOnly(c); err != nil {
		return nil, err
	}
	return c, nil
}

// batchOnly refuses, in a batch, a call that asks more of its approver
// than one press of a button for calls read together: a passkey, a
// deception warning to acknowledge, typed confirmation.
func (s *Service) batchOnly(c *Call) error {
	switch {
	case c.RequirePasskey:
		return ErrBatchPasskey
	case Deceptive(c):
		return ErrBatchWarning
	}
	if reg := s.Tools(); reg != nil {
		if t, ok := reg.Tool(c.Tool); ok && t.Confirm != nil {
			return ErrBatchConfirm
		}
	}
	return nil
}

// BatchPreview is what a review page can tell before the decision: the
// reason u's batch approval would leave pending call c out, from the call
// as read (the decision's transaction checks everything again), or nil.
func (s *Service) BatchPreview(c *Call, u account.User) error {
	if s.ToolChanged(c) {
		return ErrToolChanged
	}
	if err := mayApprove(c, u); err != nil {
		return err
	}
	return s.batchOnly(c)
}

// DenyBatch denies every call of in with in's one reason, in one
// transaction, each with its own audit entry. A call no longer pending,
// or whose digest is not the one shown, drops out with the reason and the
// rest are denied.
func (s *Service) DenyBatch(ctx context.Context, in BatchInput) (*BatchResult, error) {
	if err := checkBatch(in); err != nil {
		return nil, err
	}
	reason := strings.TrimSpace(in.Reason)
	if reason == "" {
		return nil, ErrReasonRequired
	}
	if len(reason) > MaxReasonBytes {
		return nil, ErrReasonTooLong
	}
	res := &BatchResult{ID: newBatchID(s.now())}
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		res.Decided, res.Dropped = nil, nil
		if err := mayDecide(tx, in.Operator); err != nil {
			return err
		}
		for _, it := range in.Items {
			c, err := s.loadPendingInBatch(tx, it.CallID, emit)
			if err == nil && c.Digest != it.Digest {
				err = ErrDigestMismatch
			}
			if err != nil {
				if !dropsOut(err) {
					return err
				}
				res.Dropped = append(res.Dropped, BatchDrop{CallID: it.CallID, Err: err})
				continue
			}
			details := map[string]any{"method": "batch", "batch": res.ID, "batch_size": int64(len(in.Items))}
			if err := s.deny(tx, c, in.Operator, in.Channel, reason, details, emit); err != nil {
				return err
			}
			res.Decided = append(res.Decided, c)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// checkBatch refuses a batch that names no call, more than MaxBatch, or
// one call twice, and checks its operator's name.
func checkBatch(in BatchInput) error {
	if err := account.CheckReserved(in.Operator); err != nil {
		return fmt.Errorf("queue: operator %q: %w", in.Operator, err)
	}
	switch {
	case len(in.Items) == 0:
		return ErrBatchEmpty
	case len(in.Items) > MaxBatch:
		return ErrBatchTooLarge
	}
	seen := make(map[string]bool, len(in.Items))
	for _, it := range in.Items {
		if seen[it.CallID] {
			return ErrBatchDuplicate
		}
		seen[it.CallID] = true
	}
	return nil
}

// loadPendingInBatch is loadPending for one call of a batch: a call found
// past its deadline is expired on the spot and drops out, and the expiry
// is committed with the batch's decisions.
func (s *Service) loadPendingInBatch(tx Tx, id string, emit func(Event)) (*Call, error) {
	c, err := s.loadPending(tx, id, emit)
	var r refused
	if errors.As(err, &r) {
		return nil, r.err
	}
	return c, err
}

// dropsOut reports whether err refuses one call of a batch (the call drops
// out and the rest proceed) rather than the whole batch (a fault of the
// store, an operator who may not decide, or a page that did not show the
// batch). A call the page showed longer ago than its decision window drops
// out (ErrPresentation).
func dropsOut(err error) bool {
	var (
		np *NotPendingError
		fz *FrozenError
		ow *OwnerError
		ap *ApproversError
		sp *SamePersonError
	)
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrDigestMismatch) || errors.Is(err, ErrIntegrity) ||
		errors.Is(err, ErrToolChanged) || errors.Is(err, ErrOwnCall) || errors.Is(err, ErrAlreadyApproved) ||
		errors.Is(err, ErrBatchWarning) || errors.Is(err, ErrBatchConfirm) || errors.Is(err, ErrBatchPasskey) ||
		errors.Is(err, ErrPresentation) ||
		errors.As(err, &np) || errors.As(err, &fz) || errors.As(err, &ow) || errors.As(err, &ap) || errors.As(err, &sp)
}

// newBatchID names a batch in its calls' audit entries: "batch_" and the
// encoding of a call id.
func newBatchID(now time.Time) string {
	return "batch_" + strings.TrimPrefix(newCallID(now), "call_")
}

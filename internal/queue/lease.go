package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/tools"
)

// A redeemed grant authorizes a call at most once; it does not make the
// call run exactly once. The executor may crash after redeeming and before
// acting, or after acting and before reporting. So a redemption starts a
// lease: the executor reports the outcome before the lease ends, or
// extends it with heartbeats while it works. A lease that lapses sets the
// outcome lease_expired (the status stays redeemed), and the call waits
// for a person, who finds out whether it ran and records a resolution.

// MaxEvidenceBytes bounds a resolution's evidence link.
const MaxEvidenceBytes = 2000

// OutcomeWithinOrDefault is the call's lease length: the tool's
// outcome_within when the call was submitted, or the default for calls
// stored without one.
func (c *Call) OutcomeWithinOrDefault() time.Duration {
	if c.OutcomeWithin > 0 {
		return c.OutcomeWithin
	}
	return tools.DefaultOutcomeWithin
}

func outcomeWithin(c *Call) time.Duration { return c.OutcomeWithinOrDefault() }

// startLease starts the executor's lease on a call being redeemed now.
func (s *Service) startLease(c *Call, who Principal, now time.Time) {
	c.RedeemedBy = who.TokenID
	c.LeaseUntil = now.Add(outcomeWithin(c))
}

// Heartbeat extends the lease of a redeemed call whose outcome is not
// reported yet, from now, by extend (the call's outcome_within when 0; never
// more). A lease is never shortened. Only the token that redeemed the call
// may extend it. A lease found lapsed is expired on the spot (and the call
// reported lease_expired) rather than revived.
func (s *Service) Heartbeat(ctx context.Context, who Principal, id string, extend time.Duration) (*Call, error) {
	if extend < 0 {
		return nil, extensionError(extend, 0)
	}
	var out *Call
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		c, err := tx.Call(id)
		if err != nil {
			return err
		}
		if !c.reachableBy(who) {
			return ErrNotFound
		}
		if c.Status != StatusRedeemed {
			return ErrNotRedeemed
		}
		if c.RedeemedBy != who.TokenID {
			return ErrNotLeaseHolder
		}
		if c.Outcome != nil {
			if c.Outcome.Status == OutcomeLeaseExpired {
				return ErrLeaseExpired
			}
			return ErrOutcomeReported
		}
		limit := outcomeWithin(c)
		if extend == 0 {
			extend = limit
		}
		if extend > limit {
			return extensionError(extend, limit)
		}
		now := s.now()
		if !now.Before(c.LeaseUntil) {
			if err := s.expireLease(tx, c, emit); err != nil {
				return err
			}
			return commitAnd(ErrLeaseExpired)
		}
		until := now.Add(extend)
		if !until.After(c.LeaseUntil) {
			out = c // the lease already runs at least that long
			return nil
		}
		c.LeaseUntil = until
		if err := tx.UpdateCall(c); err != nil {
			return err
		}
		if err := tx.Append(s.entry(audit.KindLeaseExtended, c, who.Actor, audit.ChannelAPI, map[string]any{
			"lease_until": formatTime(until), "token": who.TokenID})); err != nil {
			return err
		}
		emit(Event{Kind: audit.KindLeaseExtended, Call: c})
		out = c
		return nil
	})
	return out, err
}

func extensionError(extend, limit time.Duration) error {
	msg := fmt.Sprintf("a heartbeat extends the lease by 1 to %d seconds (the tool's outcome_within), not %d",
		int64(limit/time.Second), int64(extend/time.Second))
	return &ProposalError{Kind: "invalid_arguments", Problems: canonical.Problems{{Code: canonical.CodeOutOfRange,
		Path: "/extend_seconds", Offset: -1, Message: msg}}}
}

// expireLease sets the outcome of a redeemed call whose lease lapsed.
func (s *Service) expireLease(tx Tx, c *Call, emit func(Event)) error {
	c.Outcome = &Outcome{Status: OutcomeLeaseExpired, At: s.now()}
	if err := tx.UpdateCall(c); err != nil {
		return err
	}
	if err := tx.Append(s.entry(audit.KindLeaseExpired, c, "console", audit.ChannelAPI, map[string]any{
		"lease_until": formatTime(c.LeaseUntil), "token": c.RedeemedBy})); err != nil {
		return err
	}
	emit(Event{Kind: audit.KindLeaseExpired, Call: c})
	return nil
}

// ExpireLeases sets lease_expired on every redeemed call whose lease has
// lapsed with no outcome, each in its own transaction, and returns how many.
func (s *Service) ExpireLeases(ctx context.Context) (int, error) {
	n := 0
	for {
		ids, err := s.store.DueLeases(ctx, s.now(), 500)
		if err != nil {
			return n, err
		}
		expired := 0
		for _, id := range ids {
			err := s.update(ctx, func(tx Tx, emit func(Event)) error {
				c, err := tx.Call(id)
				if err != nil {
					return err
				}
				if !c.OutcomeOpen() || s.now().Before(c.LeaseUntil) {
					return nil // reported or extended meanwhile
				}
				expired++
				return s.expireLease(tx, c, emit)
			})
			if err != nil {
				return n + expired, err
			}
		}
		n += expired
		if len(ids) < 500 || expired == 0 {
			return n, nil
		}
	}
}

// leaseWakesBefore reports whether the lease loop will wake by itself by
// t; while it is computing its next wake (0) the answer is no.
func (s *Service) leaseWakesBefore(t time.Time) bool {
	w := s.leaseWakeAt.Load()
	return w != 0 && w <= t.UnixMilli()
}

func (s *Service) kickLeases() {
	select {
	case s.leaseKick <- struct{}{}:
	default:
	}
}

// runLeases expires leases when they end until ctx ends or Shutdown is
// called. Like the expiry loop, it sleeps until the earliest lease end (or
// a redemption that ends sooner), with no polling in between.
func (s *Service) runLeases(ctx context.Context) {
	for {
		s.leaseWakeAt.Store(0)
		if _, err := s.ExpireLeases(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("expire leases", slog.Any("error", err))
		}
		wait := time.Minute
		if next, ok, err := s.store.NextLeaseEnd(ctx); err == nil && ok {
			wait = max(next.Sub(s.now()), 0) + 5*time.Millisecond
		}
		wait = min(wait, time.Minute)
		s.leaseWakeAt.Store(s.now().Add(wait).UnixMilli())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.stopping:
			t.Stop()
			return
		case <-s.leaseKick:
		case <-t.C:
		}
		t.Stop()
	}
}

// ReportOutcome records what happened when the executor ran the call: once,
// after redemption. A report that comes after the lease expired is still
// accepted and replaces lease_expired; a second real report is refused.
func (s *Service) ReportOutcome(ctx context.Context, who Principal, id, status, detail string) (*Call, error) {
	switch status {
	case OutcomeSucceeded, OutcomeFailed, OutcomeUnknown:
	default:
		return nil, ErrInvalidOutcome
	}
	if len(detail) > MaxReasonBytes {
		return nil, &ProposalError{Kind: "invalid_arguments", Problems: canonical.Problems{{Code: canonical.CodeTooLong,
			Path: "/detail", Offset: -1, Message: fmt.Sprintf("detail is %d bytes; at most %d are kept", len(detail), MaxReasonBytes)}}}
	}
	var out *Call
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		c, err := s.reportIn(tx, emit, who, id, status, detail, s.now())
		out = c
		return err
	})
	return out, err
}

// reportIn records, in tx, the outcome an executor reported at at: the
// checks and the writes of ReportOutcome. A refusal (ErrNotFound,
// ErrNotRedeemed, ErrNotLeaseHolder, ErrOutcomeReported) writes nothing.
func (s *Service) reportIn(tx Tx, emit func(Event), who Principal, id, status, detail string, at time.Time) (*Call, error) {
	c, err := tx.Call(id)
	if err != nil {
		return nil, err
	}
	if !c.reachableBy(who) {
		return nil, ErrNotFound
	}
	if c.Status != StatusRedeemed {
		return nil, ErrNotRedeemed
	}
	// Only the executor that redeemed the grant says what happened
	// (calls redeemed before redemptions were recorded excepted).
	if c.RedeemedBy != "" && c.RedeemedBy != who.TokenID {
		return nil, ErrNotLeaseHolder
	}
	details := map[string]any{"status": status, "detail": detail}
	if c.Outcome != nil {
		if c.Outcome.Status != OutcomeLeaseExpired {
			return nil, ErrOutcomeReported
		}
		details["replaces"] = OutcomeLeaseExpired
	} else if !at.Before(c.LeaseUntil) {
		details["late"] = true
	}
	if who.TokenID != "" {
		details["token"] = who.TokenID
	}
	c.Outcome = &Outcome{Status: status, Detail: detail, At: at}
	if err := tx.UpdateCall(c); err != nil {
		return nil, err
	}
	if err := tx.Append(s.entry(audit.KindOutcome, c, who.Actor, audit.ChannelAPI, details)); err != nil {
		return nil, err
	}
	emit(Event{Kind: audit.KindOutcome, Call: c})
	return c, nil
}

// A HeldOutcome is an outcome an executor in this process learned and
// holds to write in a later transaction (ReportOutcomes, SubmitAndRedeem):
// the MCP gateway answers a call that succeeded before its outcome is
// written, and writes it with the next call it submits.
type HeldOutcome struct {
	Who    Principal
	CallID string
	Status string
	Detail string
	// At is when the executor learned the outcome: the outcome's time.
	At time.Time
}

// writeHeld writes held outcomes in tx. One that a check refuses (another
// outcome was reported, or a person resolved the call meanwhile) is
// skipped, having written nothing; any other error fails the transaction.
func (s *Service) writeHeld(tx Tx, emit func(Event), held []HeldOutcome) error {
	for _, h := range held {
		switch {
		case h.Status != OutcomeSucceeded && h.Status != OutcomeFailed && h.Status != OutcomeUnknown:
			return ErrInvalidOutcome
		case len(h.Detail) > MaxReasonBytes:
			return fmt.Errorf("queue: the outcome of %s: detail is %d bytes; at most %d are kept", h.CallID, len(h.Detail), MaxReasonBytes)
		}
		_, err := s.reportIn(tx, emit, h.Who, h.CallID, h.Status, h.Detail, h.At)
		switch {
		case err == nil:
		case errors.Is(err, ErrNotFound), errors.Is(err, ErrNotRedeemed), errors.Is(err, ErrNotLeaseHolder), errors.Is(err, ErrOutcomeReported):
			s.log.Warn("held outcome not recorded", slog.String("call", h.CallID), slog.String("status", h.Status), slog.Any("error", err))
		default:
			return err
		}
	}
	return nil
}

// ReportOutcomes writes held outcomes in one transaction, each checked as
// ReportOutcome checks it; one a check refuses is skipped and logged.
func (s *Service) ReportOutcomes(ctx context.Context, held []HeldOutcome) error {
	if len(held) == 0 {
		return nil
	}
	return s.update(ctx, func(tx Tx, emit func(Event)) error { return s.writeHeld(tx, emit, held) })
}

// Resolve records what operator found out about a call whose outcome is
// unknown or lease_expired: verdict executed or not_executed, a note, and
// an optional http(s) link to the evidence. The call's actor cannot
// resolve it. A call is resolved once.
func (s *Service) Resolve(ctx context.Context, operator, channel, id, verdict, note, evidence string) (*Call, error) {
	if operator == "" {
		return nil, ErrOperatorRequired
	}
	if verdict != VerdictExecuted && verdict != VerdictNotExecuted {
		return nil, ErrInvalidVerdict
	}
	note = strings.TrimSpace(note)
	if note == "" {
		return nil, ErrNoteRequired
	}
	if len(note) > MaxReasonBytes {
		return nil, ErrNoteTooLong
	}
	evidence, err := CheckEvidence(evidence)
	if err != nil {
		return nil, err
	}
	var out *Call
	err = s.update(ctx, func(tx Tx, emit func(Event)) error {
		c, err := tx.Call(id)
		if err != nil {
			return err
		}
		if c.Resolution != nil {
			return ErrAlreadyResolved
		}
		if !c.Unresolved() {
			if c.Status == StatusRedeemed && c.Outcome != nil {
				return fmt.Errorf("%w (the executor reported %s)", ErrNotUnresolved, c.Outcome.Status)
			}
			if c.OutcomeOpen() {
				return fmt.Errorf("%w (its lease runs until %s)", ErrNotUnresolved, c.LeaseUntil.UTC().Format(time.RFC3339))
			}
			return fmt.Errorf("%w (it is %s)", ErrNotUnresolved, c.Status)
		}
		if err := s.mayResolve(tx, c, operator); err != nil {
			return err
		}
		now := s.now()
		c.Resolution = &Resolution{Verdict: verdict, By: operator, Channel: channel, Note: note, Evidence: evidence, At: now}
		if err := tx.UpdateCall(c); err != nil {
			return err
		}
		if err := tx.Append(s.entry(audit.KindResolved, c, operator, channel, map[string]any{
			"verdict": verdict, "note": note, "evidence": evidence, "outcome": c.Outcome.Status})); err != nil {
			return err
		}
		emit(Event{Kind: audit.KindResolved, Call: c})
		out = c
		return nil
	})
	return out, err
}

// mayResolve says whether operator may record a resolution of c, inside
// the resolution's transaction: an enabled account that may decide (see
// mayDecide), not the call's own actor, and not an owner of its agent (by
// name, short name or team, as the account stands now): whoever runs the
// agent does not vouch for whether its call ran.
func (s *Service) mayResolve(tx Tx, c *Call, operator string) error {
	if strings.EqualFold(operator, c.Actor) {
		return ErrResolveOwnCall
	}
	u, err := decider(tx, operator)
	if err != nil {
		return err
	}
	if c.ProposedBy(u) {
		return ErrResolveOwnCall
	}
	if o := c.OwnedBy(u); o != "" {
		return &OwnerError{Operator: u.Name, Owner: o, Resolving: true}
	}
	return nil
}

// CheckEvidence validates a resolution's evidence link and returns it
// trimmed: empty, or an absolute http or https URL with a host, no
// credentials, no white space or invisible characters, at most
// MaxEvidenceBytes. It is shown as a link, so nothing else may pass.
func CheckEvidence(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", nil
	}
	if len(s) > MaxEvidenceBytes {
		return "", fmt.Errorf("%w (at most %d bytes)", ErrInvalidEvidence, MaxEvidenceBytes)
	}
	if strings.IndexFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == unicode.ReplacementChar
	}) >= 0 {
		return "", fmt.Errorf("%w (no spaces or invisible characters)", ErrInvalidEvidence)
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%w (%v)", ErrInvalidEvidence, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%w (it starts with %q)", ErrInvalidEvidence, u.Scheme+":")
	}
	if u.Host == "" || u.Opaque != "" {
		return "", fmt.Errorf("%w (it names no host)", ErrInvalidEvidence)
	}
	if u.User != nil {
		return "", fmt.Errorf("%w (it must not carry a user name or password)", ErrInvalidEvidence)
	}
	return s, nil
}

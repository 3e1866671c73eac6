package queue

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/present"
)

// Approve records operator's approval of call id, bound to the digest the
// operator was shown. The last approval the tool requires mints the grant in
// the same transaction.
func (s *Service) Approve(ctx context.Context, operator, channel, id, digest string) (*Call, error) {
	return s.ApproveWith(ctx, ApproveInput{Operator: operator, Channel: channel, CallID: id, Digest: digest})
}

// ApproveInput is one operator's approval of a call, bound to the digest
// the operator was shown.
type ApproveInput struct {
	Operator, Channel, CallID, Digest string
	// Comment is an optional note (at most MaxReasonBytes), stored with the
	// approval, recorded in its audit entry and returned to the agent.
	Comment string
	// Passkey is set when the operator's passkey signed the approval; a
	// call that requires one is refused without it.
	Passkey *PasskeyProof
	// Confirm is what the approver typed where the call's tool asks for its
	// target or a word to be typed (confirm: in the tools file), and
	// AcceptWarnings acknowledges the call's deception warning. Both are
	// checked in the decision's transaction against the call as stored,
	// whatever the channel (see Confirmation).
	Confirm        string
	AcceptWarnings bool
	// Presented is the presentation token of the call's page, which a
	// decision through the browser must carry (Config.Presentations); the
	// decision's transaction checks it and records what was presented.
	Presented string
	// Listed is the listing token the operator API's queue listing gave
	// the call (ListingToken), which an approval through the API must
	// carry: it names the call and the digest the listing showed the
	// token's person. It is checked, never recorded as a presentation.
	Listed string
	// For names the person on whose behalf the operator approves, through
	// a delegation live at the decision (docs/team.md); "" approves with
	// the operator's own standing.
	For string
	// Seen is the call as the approver's channel read it before deciding,
	// if it did. It is a hint, never trusted: when this approval looks like
	// the last one the call needs, the grant is signed before the write
	// lock is taken, and the decision's transaction, which checks
	// everything on the call as stored, uses that signature only if it
	// mints exactly that grant.
	Seen *Call
}

// PasskeyProof is a verified passkey assertion over one call (the server
// checks it with internal/passkey before approving): which passkey, its
// signature counter before and after, its record with the counter
// advanced, and the evidence.
type PasskeyProof struct {
	Operator     string
	CredentialID []byte
	Name         string
	// CountBefore is the counter the assertion was checked against;
	// CountAfter the authenticator's new one. The approval is refused when
	// the stored counter is no longer CountBefore (another approval used
	// the passkey at the same moment, or it was removed).
	CountBefore, CountAfter uint32
	Record                  []byte
	// Evidence is the JSON of passkey.Evidence; its call_id, digest and
	// operator must be this approval's.
	Evidence []byte
}

// ApproveWith is Approve with the approval's comment.
func (s *Service) ApproveWith(ctx context.Context, in ApproveInput) (*Call, error) {
	operator, channel, id, digest := in.Operator, in.Channel, in.CallID, in.Digest
	comment := strings.TrimSpace(in.Comment)
	if len(comment) > MaxReasonBytes {
		return nil, fmt.Errorf("%w (at most %d bytes)", ErrCommentTooLong, MaxReasonBytes)
	}
	if err := account.CheckReserved(operator); err != nil {
		return nil, fmt.Errorf("queue: operator %q: %w", operator, err)
	}
	var evidence any
	if in.Passkey != nil {
		var err error
		if evidence, err = checkEvidence(in); err != nil {
			return nil, err
		}
	}
	// When the approver's channel read the call and this approval looks
	// like the last one it needs, the grant is signed now, before the write
	// lock; the transaction below uses it only if it does mint this call's
	// grant, and checks everything as if it had not been signed.
	var pre *presigned
	if c := in.Seen; c != nil && c.ID == id && c.Status == StatusPending && c.Digest == digest &&
		len(c.Approvals)+1 >= c.ApprovalsRequired && !c.ApprovedBy(operator) && (in.For == "" || !c.ApprovedBy(in.For)) {
		pre = s.presign(c, s.now())
	}
	var out *Call
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		u, err := decider(tx, operator)
		if err != nil {
			return err
		}
		c, err := s.loadPending(tx, id, emit)
		if err != nil {
			return err
		}
		var behalf *account.User
		var delegation *Delegation
		if in.For != "" {
			d, from, err := delegatedStanding(tx, u, in.For, s.now())
			if err != nil {
				return err
			}
			delegation, behalf = d, &from
		}
		if err := s.checkApprovalFor(tx, c, u, behalf, digest); err != nil {
			return err
		}
		if c.RequirePasskey && in.Passkey == nil {
			return ErrPasskeyRequired
		}
		if err := Confirmation(s.Tools(), c, in.Confirm, in.AcceptWarnings); err != nil {
			return err
		}
		if err := approvableFrom(s.Tools(), c, channel); err != nil {
			return err
		}
		now := s.now()
		if err := s.checkListed(channel, in.Listed, operator, callItem(c), now); err != nil {
			return err
		}
		shown, err := s.presentedCall(channel, in.Presented, operator, c, now)
		if err != nil {
			return err
		}
		a := Approval{Operator: operator, Channel: channel, At: now, Comment: comment, Digest: digest,
			Method: methodOf(channel, in.Passkey != nil), Presented: shown}
		if p := in.Passkey; p != nil {
			if err := tx.UsePasskey(operator, p.CredentialID, p.CountBefore, p.CountAfter, p.Record, now); err != nil {
				return err
			}
			a.Passkey = &ApprovalPasskey{CredentialID: p.CredentialID, Name: p.Name, Evidence: p.Evidence}
		}
		details := map[string]any{}
		if delegation != nil {
			a.For = behalf.Name
			details["for"], details["delegation"] = behalf.Name, delegation.ID
		}
		if a.Passkey != nil {
			details["passkey"] = map[string]any{"credential_id": base64.RawURLEncoding.EncodeToString(a.Passkey.CredentialID),
				"name": a.Passkey.Name}
			details["evidence"] = evidence
		}
		if err := s.addApproval(tx, c, u, a, details, pre, emit); err != nil {
			return err
		}
		out = c
		return nil
	})
	return out, err
}

// methodOf is how an approval through channel was given: with a passkey,
// a click in the browser, a command; for a channel none of them names, the
// channel itself.
func methodOf(channel string, passkey bool) string {
	switch {
	case passkey:
		return MethodPasskey
	case channel == audit.ChannelWeb:
		return MethodClick
	case channel == audit.ChannelCLI, channel == audit.ChannelAPI:
		return MethodCommand
	}
	return channel
}

// ErrPresentation refuses a decision that does not come from a page that
// showed its deciders exactly these calls and digests, recently enough:
// the page's presentation token is missing, is another page's, or was
// rendered before the call's decision window.
var ErrPresentation = errors.New("queue: the decision does not come from a page that showed these calls as they are; reload the page and decide again")

// presented checks the presentation token of a decision through channel
// by operator on the page kind page that showed items, and returns what
// was presented: nil for a decision that carries none from a channel
// other than the browser. A decision through the browser must carry one
// when the service checks them (Config.Presentations). The token's age
// is checked against each call's decision window by shownInTime.
func (s *Service) presented(channel, token, page, operator string, items []present.Item, now time.Time) (*Presented, error) {
	if token == "" && (channel != audit.ChannelWeb || s.present == nil) {
		return nil, nil
	}
	if s.present == nil {
		return nil, fmt.Errorf("%w: this console checks no presentation tokens", ErrPresentation)
	}
	shown, err := s.present.Check(token, page, operator, items, now, maxPresentedAge)
	if err != nil {
		return nil, fmt.Errorf("%w (%w)", ErrPresentation, err)
	}
	return &Presented{Page: shown.Page, At: shown.At}, nil
}

// presentedCall is presented for a decision on c's own page, with the
// presentation's age checked against c's decision window.
func (s *Service) presentedCall(channel, token, operator string, c *Call, now time.Time) (*Presented, error) {
	shown, err := s.presented(channel, token, present.PageCall, operator, callItem(c), now)
	if err != nil {
		return nil, err
	}
	return shown, shownInTime(shown, c, now)
}

// Present is the presentation token of a decision page of kind page
// (present.PageCall, present.PageBatch) rendered now for viewer, showing
// calls with their digests; "" when the service checks no presentations.
// The page carries it in its decision form; nothing is stored.
func (s *Service) Present(page, viewer string, calls ...*Call) string {
	if s.present == nil {
		return ""
	}
	items := make([]present.Item, len(calls))
	for i, c := range calls {
		items[i] = present.Item{CallID: c.ID, Digest: c.Digest}
	}
	return s.present.Token(present.Shown{Page: page, Viewer: viewer, At: s.now(), Items: items})
}

// PresentAllowance is the presentation token of a page that shows base and
// the scope of an allowance from it (present.PageAllowance), for viewer;
// "" when the service checks no presentations.
func (s *Service) PresentAllowance(viewer string, base *Call, scopeDigest string) string {
	if s.present == nil {
		return ""
	}
	return s.present.Token(present.Shown{Page: present.PageAllowance, Viewer: viewer, At: s.now(),
		Items: []present.Item{{CallID: base.ID, Digest: base.Digest}, present.ScopeItem(scopeDigest)}})
}

// PresentConfirm is the presentation token of the page that confirms
// allowance a (present.PageAllowance): its base call, its scope and the
// allowance itself; "" when the service checks no presentations.
func (s *Service) PresentConfirm(viewer string, a *Allowance) string {
	if s.present == nil {
		return ""
	}
	return s.present.Token(present.Shown{Page: present.PageAllowance, Viewer: viewer, At: s.now(), Items: confirmItems(a)})
}

func confirmItems(a *Allowance) []present.Item {
	return []present.Item{{CallID: a.BaseCall, Digest: a.BaseDigest}, present.ScopeItem(a.ScopeDigest), present.AllowanceItem(a.ID)}
}

// presentedAllowance is presented for a decision on the page that showed
// c and the scope scopeDigest of an allowance from it, with the
// presentation's age checked against c's decision window.
func (s *Service) presentedAllowance(channel, token, operator string, c *Call, scopeDigest string, now time.Time) (*Presented, error) {
	shown, err := s.presented(channel, token, present.PageAllowance, operator,
		[]present.Item{{CallID: c.ID, Digest: c.Digest}, present.ScopeItem(scopeDigest)}, now)
	if err != nil {
		return nil, err
	}
	return shown, shownInTime(shown, c, now)
}

// maxPresentedAge bounds a presentation's age before the call's own
// decision window does (shownInTime).
const maxPresentedAge = 7 * 24 * time.Hour

// shownInTime refuses a presentation of c older than c's decision window:
// a page left open longer than the call could wait shows what it showed
// then, and is reloaded before deciding.
func shownInTime(p *Presented, c *Call, now time.Time) error {
	if p == nil || now.Sub(p.At) <= c.DecideBy.Sub(c.CreatedAt) {
		return nil
	}
	return fmt.Errorf("%w (%w: rendered %s)", ErrPresentation, present.ErrStale, p.At.UTC().Format(time.RFC3339))
}

// checkApproval is every check a person's approval of c makes on the call
// as stored, in the decision's transaction, whatever the way it is given
// (one call or a batch): the digest the person was shown is the call's,
// the stored envelope is what the digest covers, the tool is defined as it
// was, no freeze covers the call, and u may approve it (mayApprove,
// notApprovedAsAnother). What the approval must carry besides (a passkey,
// typed text, a warning's acknowledgement) is checked by the caller.
func (s *Service) checkApproval(tx Tx, c *Call, u account.User, digest string) error {
	return s.checkApprovalFor(tx, c, u, nil, digest)
}

// checkApprovalFor is checkApproval of an approval by u on behalf of
// behalf (nil: with u's own standing), whose delegation the caller found
// live: the own-call ban and owners are checked against both people, the
// tool's approvers against the standing used, and neither name may be in
// an approval already.
func (s *Service) checkApprovalFor(tx Tx, c *Call, u account.User, behalf *account.User, digest string) error {
	if digest != c.Digest {
		return ErrDigestMismatch
	}
	if canonical.DigestOf(c.Envelope) != c.Digest {
		// The stored envelope is not what the digest covers: the
		// database was edited. Nothing about this call can be trusted.
		return fmt.Errorf("%w: call %s", ErrIntegrity, c.ID)
	}
	if s.ToolChanged(c) {
		return ErrToolChanged
	}
	if f, err := frozen(tx, c.Tool, c.Actor); err != nil {
		return err
	} else if f != nil {
		return &FrozenError{Freeze: *f}
	}
	if err := mayApproveFor(c, u, behalf); err != nil {
		return err
	}
	if err := notApprovedAsAnother(tx, c, u); err != nil {
		return err
	}
	if behalf != nil {
		return notApprovedAsAnother(tx, c, *behalf)
	}
	return nil
}

// addApproval records approval a of c by u, with its audit entry (details
// added to the digest, the count and the comment), and mints the grant in
// the same transaction when a is the last approval c needs.
func (s *Service) addApproval(tx Tx, c *Call, u account.User, a Approval, details map[string]any, pre *presigned, emit func(Event)) error {
	if err := s.recordApproval(tx, c, u, a, details); err != nil {
		return err
	}
	return s.mintIfComplete(tx, c, a.At, pre, emit)
}

// recordApproval stores approval a of c by u with its audit entry
// (details added to the digest, the count and the comment).
func (s *Service) recordApproval(tx Tx, c *Call, u account.User, a Approval, details map[string]any) error {
	if err := tx.AddApproval(c.ID, a); err != nil {
		return err
	}
	c.Approvals = append(c.Approvals, a)
	details["digest"], details["received"], details["required"] = c.Digest, int64(len(c.Approvals)), int64(c.ApprovalsRequired)
	details["method"], details["human"] = a.Method, a.Human()
	if p := a.Presented; p != nil {
		details["presented"] = map[string]any{"page": p.Page, "at": p.At.UTC().Format(time.RFC3339Nano)}
	}
	if a.Comment != "" {
		details["comment"] = a.Comment
	}
	if u.SSO() {
		details["operator_name"], details["operator_email"] = u.Shown(), u.Email
	}
	return tx.Append(s.entry(audit.KindApproved, c, a.Operator, a.Channel, details))
}

// mintIfComplete mints c's grant at now when c has the approvals it
// requires, and emits the change.
func (s *Service) mintIfComplete(tx Tx, c *Call, now time.Time, pre *presigned, emit func(Event)) error {
	if len(c.Approvals) >= c.ApprovalsRequired && c.awaitsAccept() {
		// A counter-proposal's grant waits for its agent to accept it.
		emit(Event{Kind: audit.KindApproved, Call: c})
		return nil
	}
	if len(c.Approvals) >= c.ApprovalsRequired {
		if err := s.mint(tx, c, now, pre); err != nil {
			return err
		}
		emit(Event{Kind: audit.KindGranted, Call: c})
	} else {
		emit(Event{Kind: audit.KindApproved, Call: c})
	}
	return nil
}

// mayDecide is the rule of who may decide, checked inside the decision's
// transaction whatever the channel (browser, control socket, command
// line): an enabled account whose role decides (operator or admin).
// Otherwise one shell user could meet any quorum under invented names, and
// an account disabled a moment ago could still decide. That the operator is
// not the call's actor, and approves a call at most once, is checked with
// the call.
func mayDecide(tx Tx, operator string) error {
	_, err := decider(tx, operator)
	return err
}

// decider is mayDecide returning the account, as stored in this
// transaction.
func decider(tx Tx, operator string) (account.User, error) {
	u, err := tx.User(operator)
	if errors.Is(err, account.ErrUserNotFound) {
		return account.User{}, &DeciderError{Operator: operator}
	}
	if err == nil && !u.CanDecide() {
		return account.User{}, &DeciderError{Operator: operator, Found: true, Disabled: u.Disabled(), Role: u.Role}
	}
	return u, err
}

// mayApprove is the rest of the rule of who may approve one call, checked
// in the same transaction: not the call's actor (by name or the name shown
// for the account), not an owner of its agent
// (by name, short name or team), allowed by the tool's reviewer condition
// (role or provider group, as the account stands now), and not twice.
// Rules never reach it: they approve as policy:RULE, which no owner or
// operator can be, and an ask rule only raises how many of these approvals
// a call needs.
func mayApprove(c *Call, u account.User) error {
	return mayApproveFor(c, u, nil)
}

// mayApproveFor is mayApprove of an approval by u on behalf of behalf
// (nil: u's own standing). Neither person may be the call's actor or an
// owner of its agent; the tool's approvers are judged by the standing
// the approval uses (behalf's roles and groups as the account stands
// now); and a quorum counts people: neither name may be in an approval
// of the call already, as its approver or as whom it was for.
func mayApproveFor(c *Call, u account.User, behalf *account.User) error {
	if behalf != nil {
		if c.ProposedBy(*behalf) {
			return fmt.Errorf("%w: %s, for whom you approve, proposed it", ErrOwnCall, behalf.Name)
		}
		if o := c.OwnedBy(*behalf); o != "" {
			return &OwnerError{Operator: behalf.Name, Owner: o}
		}
	}
	standing := u
	if behalf != nil {
		standing = *behalf
	}
	if c.ProposedBy(u) {
		return ErrOwnCall
	}
	if o := c.OwnedBy(u); o != "" {
		return &OwnerError{Operator: u.Name, Owner: o}
	}
	if !c.Approvers.Allows(string(standing.Role), standing.Groups) {
		return &ApproversError{Operator: standing.Name, Who: c.Approvers.Describe()}
	}
	if c.ApprovedBy(u.Name) {
		return ErrAlreadyApproved
	}
	if behalf != nil && c.ApprovedBy(behalf.Name) {
		return fmt.Errorf("%w: %s is named in an approval already", ErrAlreadyApproved, behalf.Name)
	}
	return nil
}

// notApprovedAsAnother refuses an approval by a person who approved the
// call already under another account: a local account and a single-sign-on
// one go by the same name when one's name or short name is the other's,
// ignoring case (as owners and the call's own actor are matched), and a
// quorum counts people, not accounts. Rules' approvals (policy:ID) are no
// account and never match.
func notApprovedAsAnother(tx Tx, c *Call, u account.User) error {
	for _, a := range c.Approvals {
		for _, name := range []string{a.Operator, a.For} {
			if name == "" || name == u.Name {
				continue
			}
			other, err := tx.User(name)
			if errors.Is(err, account.ErrUserNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if samePerson(u, other) {
				return &SamePersonError{Operator: u.Name, Other: name}
			}
		}
	}
	return nil
}

// samePerson reports whether accounts a and b go by one name: a's name or
// short name is b's name or short name, ignoring case. It only ever finds
// more accounts to be one person, never fewer.
func samePerson(a, b account.User) bool {
	return goesBy(b, a.Name) || (a.ShortName != "" && goesBy(b, a.ShortName))
}

// checkEvidence reads a passkey approval's evidence: it must name this
// call, digest and operator, and it becomes the canonical value recorded
// in the audit entry.
func checkEvidence(in ApproveInput) (any, error) {
	p := in.Passkey
	var ev struct {
		CallID   string `json:"call_id"`
		Digest   string `json:"digest"`
		Operator string `json:"operator"`
	}
	if err := json.Unmarshal(p.Evidence, &ev); err != nil {
		return nil, fmt.Errorf("queue: passkey evidence: %w", err)
	}
	if p.Operator != in.Operator || ev.Operator != in.Operator || ev.CallID != in.CallID || ev.Digest != in.Digest {
		return nil, fmt.Errorf("queue: the passkey evidence is for call %s, digest %s, operator %q: %w",
			ev.CallID, ev.Digest, ev.Operator, ErrDigestMismatch)
	}
	v, err := canonical.Parse(p.Evidence)
	if err != nil {
		return nil, fmt.Errorf("queue: passkey evidence: %w", err)
	}
	return v, nil
}

// GrantLife is how long the grant approving c mints lives: its tool's
// grant_ttl, at most grant.MaxTTL.
func (c *Call) GrantLife() time.Duration {
	if c.GrantTTL <= 0 || c.GrantTTL > grant.MaxTTL {
		return grant.MaxTTL
	}
	return c.GrantTTL
}

// grantClaims are the claims of the grant that approving c at now mints.
func grantClaims(c *Call, now time.Time) grant.Claims {
	ttl := c.GrantLife()
	return grant.Claims{
		Subject: c.Actor, Audience: c.Audience, JTI: grant.NewJTI(),
		IssuedAt: now.Unix(), ExpiresAt: now.Unix() + int64(ttl/time.Second),
		CallID: c.ID, Tool: c.Tool, Target: c.Target, Digest: c.Digest,
	}
}

// presigned is a grant signed before the write lock was taken, for a
// decision that was expected to complete call's approvals. It is a grant
// only if the decision's transaction mints it (mint), and commits: until
// then it is a signature nobody has seen, stored nowhere, and redemption
// accepts only the grant whose jti the call records.
type presigned struct {
	claims     grant.Claims
	token, kid string
}

// presign signs, outside the write lock, the grant that a decision at now
// would mint for c as it was read, so that the transaction holding the
// lock does not spend the Ed25519 signature. nil when signing fails (the
// transaction then signs, and reports the error).
func (s *Service) presign(c *Call, now time.Time) *presigned {
	claims := grantClaims(c, now)
	token, kid, err := s.signer.Mint(claims)
	if err != nil {
		return nil
	}
	return &presigned{claims: claims, token: token, kid: kid}
}

// presignedAge is how much older than the decision a grant signed ahead
// may be; an older one (the write waited long for the lock) is signed
// again, so a grant never lives noticeably less than its tool's lifetime.
const presignedAge = 2 // seconds

// fits reports whether p is the grant of c decided at now: the claims of
// c's immutable fields, the lifetime c's tool gives, issued no later than
// now and at most presignedAge seconds before it.
func (p *presigned) fits(c *Call, now time.Time) bool {
	if p == nil {
		return false
	}
	want := grantClaims(c, now)
	got := p.claims
	return got.CallID == want.CallID && got.Subject == want.Subject && got.Audience == want.Audience &&
		got.Tool == want.Tool && got.Target == want.Target && got.Digest == want.Digest &&
		got.ExpiresAt-got.IssuedAt == want.ExpiresAt-want.IssuedAt &&
		got.IssuedAt <= want.IssuedAt && want.IssuedAt-got.IssuedAt <= presignedAge
}

// mint makes the decision at now final: the grant (pre when it fits c,
// else signed here) is stored with the call and audited, in the decision's
// transaction.
func (s *Service) mint(tx Tx, c *Call, now time.Time, pre *presigned) error {
	var claims grant.Claims
	var token, kid string
	if pre.fits(c, now) {
		claims, token, kid = pre.claims, pre.token, pre.kid
	} else {
		claims = grantClaims(c, now)
		var err error
		if token, kid, err = s.signer.Mint(claims); err != nil {
			return fmt.Errorf("queue: mint grant for %s: %w", c.ID, err)
		}
	}
	c.Status = StatusApproved
	c.DecidedAt = now
	c.Grant, c.GrantJTI, c.GrantKID = token, claims.JTI, kid
	c.GrantExpiresAt = time.Unix(claims.ExpiresAt, 0)
	if err := tx.UpdateCall(c); err != nil {
		return err
	}
	return tx.Append(s.entry(audit.KindGranted, c, "console", audit.ChannelAPI, map[string]any{
		"jti": claims.JTI, "kid": kid, "iat": claims.IssuedAt, "exp": claims.ExpiresAt, "digest": c.Digest}))
}

// loadPending reads a call that must still be pending. A call found past its
// deadline is expired on the spot, and that expiry is committed with the
// refusal.
func (s *Service) loadPending(tx Tx, id string, emit func(Event)) (*Call, error) {
	c, err := tx.Call(id)
	if err != nil {
		return nil, err
	}
	if c.PlanID != "" {
		return nil, ErrPlanItem
	}
	if c.Status != StatusPending {
		return nil, &NotPendingError{Status: c.Status}
	}
	if !s.now().Before(c.DecideBy) {
		if err := s.expire(tx, c, emit); err != nil {
			return nil, err
		}
		return nil, commitAnd(&NotPendingError{Status: StatusExpired, Expired: true})
	}
	return c, nil
}

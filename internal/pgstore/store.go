package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/highwater"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store"
)

// Store adapts DB to queue.Store and queue.History.
type Store struct{ *DB }

// Store returns the queue's view of the database.
func (d *DB) Store() Store { return Store{d} }

var (
	_ queue.Store   = Store{}
	_ queue.History = Store{}
	_ audit.Trail   = (*DB)(nil)
)

// Update runs fn in one write transaction (see the package comment on
// isolation) and commits when fn returns nil. The commit has happened when
// Update returns nil.
func (s Store) Update(ctx context.Context, fn func(queue.Tx) error) error {
	return s.DB.update(ctx, func(t *txn) error { return fn(t) })
}

// txn is one write transaction; it implements queue.Tx and account.Tx.
type txn struct {
	ctx context.Context
	tx  pgx.Tx
	db  *DB

	// The chain head as this transaction left it, once read.
	headSeq  int64
	headHash string
	headRead bool
	// What the transaction appended: its entries, and the newest version
	// of each call, for NOTIFY.
	entries []entryID
	calls   map[string]int64
	// advance is true once the transaction holds a change the high-water
	// mark must cover before the commit is acknowledged
	// (highwater.MayWait); the commit runs onCommit only then.
	advance bool
	// after runs once the transaction has committed (AfterCommit).
	after []func()
}

// AfterCommit runs fn after the transaction has committed, before Update
// returns, in the order of this process's commits; not at all if it does
// not commit.
func (t *txn) AfterCommit(fn func()) { t.after = append(t.after, fn) }

// entryID names one audit entry.
type entryID struct {
	seq  int64
	hash string
}

const callColumns = `seq, id, actor, audience, tool, target, args, rationale, envelope, digest, status,
	approvals_required, grant_ttl_ms, created_at, decide_by, decided_at, denied_by, denied_channel, deny_reason,
	grant_token, grant_jti, grant_kid, grant_expires_at, redeemed_at, outcome_status, outcome_detail, outcome_at, tool_digest, notify,
	outcome_within_ms, redeemed_by, lease_until, resolution, resolved_by, resolved_channel, resolution_note,
	resolution_evidence, resolved_at, owners, approvers, require_passkey, submitted_by,
	countered_by, countered_from, edited_by, accepted_at, plan_id, plan_index`

// qualified is callColumns with the table alias c.
const qualified = `c.seq, c.id, c.actor, c.audience, c.tool, c.target, c.args, c.rationale, c.envelope, c.digest, c.status,
	c.approvals_required, c.grant_ttl_ms, c.created_at, c.decide_by, c.decided_at, c.denied_by, c.denied_channel, c.deny_reason,
	c.grant_token, c.grant_jti, c.grant_kid, c.grant_expires_at, c.redeemed_at, c.outcome_status, c.outcome_detail, c.outcome_at, c.tool_digest, c.notify,
	c.outcome_within_ms, c.redeemed_by, c.lease_until, c.resolution, c.resolved_by, c.resolved_channel, c.resolution_note,
	c.resolution_evidence, c.resolved_at, c.owners, c.approvers, c.require_passkey, c.submitted_by,
	c.countered_by, c.countered_from, c.edited_by, c.accepted_at, c.plan_id, c.plan_index`

type rowScanner interface{ Scan(dest ...any) error }

func scanCall(r rowScanner, extra ...any) (*queue.Call, error) {
	var c queue.Call
	var args, status string
	var rationale []byte
	var required int32
	var ttl, created, decideBy int64
	var decidedAt, grantExp, redeemedAt, outcomeAt *int64
	var deniedBy, deniedChannel, token, jti, kid, outStatus *string
	var denyReason, outDetail []byte
	var notify, owners, approvers string
	var outcomeWithin int64
	var leaseUntil, resolvedAt *int64
	var redeemedBy, resolution, resolvedBy, resolvedChannel, evidence, submittedBy *string
	var resolutionNote []byte
	var counteredBy, counteredFrom, editedBy *string
	var acceptedAt *int64
	var planID *string
	var planIndex *int32
	dest := []any{&c.Seq, &c.ID, &c.Actor, &c.Audience, &c.Tool, &c.Target, &args, &rationale, &c.Envelope,
		&c.Digest, &status, &required, &ttl, &created, &decideBy, &decidedAt, &deniedBy, &deniedChannel,
		&denyReason, &token, &jti, &kid, &grantExp, &redeemedAt, &outStatus, &outDetail, &outcomeAt, &c.ToolDigest, &notify,
		&outcomeWithin, &redeemedBy, &leaseUntil, &resolution, &resolvedBy, &resolvedChannel, &resolutionNote, &evidence, &resolvedAt,
		&owners, &approvers, &c.RequirePasskey, &submittedBy, &counteredBy, &counteredFrom, &editedBy, &acceptedAt, &planID, &planIndex}
	err := r.Scan(append(dest, extra...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, queue.ErrNotFound
	}
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: scan call: %w", err))
	}
	v, err := canonical.ParseWith([]byte(args), canonical.Options{Numbers: canonical.NumbersFor(c.Tool)})
	if err != nil {
		return nil, fmt.Errorf("pgstore: call %s: stored args do not parse: %w", c.ID, err)
	}
	obj, ok := v.(canonical.Object)
	if !ok {
		return nil, fmt.Errorf("pgstore: call %s: stored args are not an object", c.ID)
	}
	c.Args = obj
	if notify != "" {
		c.Notify = strings.Split(notify, ",")
	}
	if err := store.DecodePeople(&c, owners, approvers); err != nil {
		return nil, err
	}
	c.Rationale = string(rationale)
	c.Status = queue.Status(status)
	c.ApprovalsRequired = int(required)
	c.GrantTTL = time.Duration(ttl) * time.Millisecond
	c.CreatedAt = time.UnixMilli(created).UTC()
	c.DecideBy = time.UnixMilli(decideBy).UTC()
	c.DecidedAt = fromMS(decidedAt)
	if deniedBy != nil {
		c.Denial = &queue.Denial{By: *deniedBy, Channel: deref(deniedChannel), Reason: string(denyReason), At: c.DecidedAt}
	}
	c.Grant, c.GrantJTI, c.GrantKID = deref(token), deref(jti), deref(kid)
	c.GrantExpiresAt = fromMS(grantExp)
	c.RedeemedAt = fromMS(redeemedAt)
	if outStatus != nil {
		c.Outcome = &queue.Outcome{Status: *outStatus, Detail: string(outDetail), At: fromMS(outcomeAt)}
	}
	c.OutcomeWithin = time.Duration(outcomeWithin) * time.Millisecond
	c.RedeemedBy = deref(redeemedBy)
	c.SubmittedBy = deref(submittedBy)
	c.CounteredBy, c.CounteredFrom, c.EditedBy = deref(counteredBy), deref(counteredFrom), deref(editedBy)
	c.AcceptedAt = fromMS(acceptedAt)
	c.PlanID = deref(planID)
	if planIndex != nil {
		c.PlanIndex = int(*planIndex)
	}
	c.LeaseUntil = fromMS(leaseUntil)
	if resolution != nil {
		c.Resolution = &queue.Resolution{Verdict: *resolution, By: deref(resolvedBy), Channel: deref(resolvedChannel),
			Note: string(resolutionNote), Evidence: deref(evidence), At: fromMS(resolvedAt)}
	}
	return &c, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// querier is a pool, a connection or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func loadCall(ctx context.Context, q querier, where string, args ...any) (*queue.Call, error) {
	c, err := scanCall(q.QueryRow(ctx, `SELECT `+callColumns+` FROM calls WHERE `+where, args...))
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `SELECT operator, channel, at, comment, passkey_id, passkey_name, evidence,
		method, digest, via, presented_page, presented_at, behalf
		FROM approvals WHERE call_id = $1 ORDER BY at, operator`, c.ID)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: approvals of %s: %w", c.ID, err))
	}
	defer rows.Close()
	for rows.Next() {
		var a queue.Approval
		var at int64
		var pkID []byte
		var pkName, evidence, page *string
		var pageAt *int64
		if err := rows.Scan(&a.Operator, &a.Channel, &at, &a.Comment, &pkID, &pkName, &evidence,
			&a.Method, &a.Digest, &a.Via, &page, &pageAt, &a.For); err != nil {
			return nil, classify(fmt.Errorf("pgstore: scan approval: %w", err))
		}
		a.At = time.UnixMilli(at).UTC()
		if page != nil && pageAt != nil {
			a.Presented = &queue.Presented{Page: *page, At: time.UnixMilli(*pageAt).UTC()}
		}
		if pkID != nil {
			a.Passkey = &queue.ApprovalPasskey{CredentialID: pkID, Name: deref(pkName), Evidence: []byte(deref(evidence))}
		}
		c.Approvals = append(c.Approvals, a)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(err)
	}
	rows.Close()
	if c.Status == queue.StatusApproved {
		var r queue.Revocation
		var reason []byte
		var at int64
		err := q.QueryRow(ctx, `SELECT call_id, jti, revoked_by, channel, reason, revoked_at FROM grant_revocations WHERE call_id = $1`, c.ID).
			Scan(&r.CallID, &r.JTI, &r.By, &r.Channel, &reason, &at)
		switch {
		case err == nil:
			r.Reason, r.At = string(reason), time.UnixMilli(at).UTC()
			c.Revoked = &r
		case !errors.Is(err, pgx.ErrNoRows):
			return nil, classify(fmt.Errorf("pgstore: revocation of %s: %w", c.ID, err))
		}
	}
	return c, nil
}

func (t *txn) InsertRevocation(r queue.Revocation) error {
	t.advance = true // the high-water mark covers it before it is acknowledged
	if _, err := t.tx.Exec(t.ctx, `INSERT INTO grant_revocations (call_id, jti, revoked_by, channel, reason, revoked_at)
		VALUES ($1,$2,$3,$4,$5,$6)`, r.CallID, r.JTI, r.By, r.Channel, []byte(r.Reason), ms(r.At)); err != nil {
		return fmt.Errorf("pgstore: record revocation: %w", err)
	}
	return nil
}

func (t *txn) Call(id string) (*queue.Call, error) {
	return loadCall(t.ctx, t.tx, `id = $1`, id)
}

func (t *txn) LatestByDigest(actor, digest, token string) (*queue.Call, error) {
	return loadCall(t.ctx, t.tx, `actor = $1 AND digest = $2 AND (submitted_by = $3 OR status = 'denied') ORDER BY seq DESC LIMIT 1`,
		actor, digest, token)
}

func (t *txn) InsertCall(c *queue.Call) error {
	args, err := canonical.Encode(c.Args)
	if err != nil {
		return fmt.Errorf("pgstore: encode args of %s: %w", c.ID, err)
	}
	owners, approvers, err := store.EncodePeople(c)
	if err != nil {
		return err
	}
	err = t.tx.QueryRow(t.ctx, `INSERT INTO calls (id, actor, audience, tool, target, args, rationale, envelope,
		digest, status, approvals_required, grant_ttl_ms, created_at, decide_by, tool_digest, notify, outcome_within_ms,
		owners, approvers, require_passkey, submitted_by, countered_from, edited_by, plan_id, plan_index)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23,$24,$25) RETURNING seq`,
		c.ID, c.Actor, c.Audience, c.Tool, c.Target, string(args), []byte(c.Rationale), c.Envelope, c.Digest,
		string(c.Status), c.ApprovalsRequired, c.GrantTTL.Milliseconds(), ms(c.CreatedAt), ms(c.DecideBy), c.ToolDigest,
		strings.Join(c.Notify, ","), c.OutcomeWithin.Milliseconds(), owners, approvers, c.RequirePasskey, c.SubmittedBy,
		nullStr(c.CounteredFrom), nullStr(c.EditedBy), nullStr(c.PlanID), planIndexOf(c)).Scan(&c.Seq)
	if err != nil {
		return fmt.Errorf("pgstore: insert call %s: %w", c.ID, err)
	}
	return nil
}

func (t *txn) UpdateCall(c *queue.Call) error {
	var deniedBy, deniedChannel *string
	var reason []byte
	if c.Denial != nil {
		deniedBy, deniedChannel = &c.Denial.By, &c.Denial.Channel
		reason = []byte(c.Denial.Reason)
	}
	var outStatus *string
	var outDetail []byte
	var outAt *int64
	if c.Outcome != nil {
		outStatus = &c.Outcome.Status
		outDetail = []byte(c.Outcome.Detail)
		outAt = nullMS(c.Outcome.At)
	}
	var resolution, resolvedBy, resolvedChannel, evidence *string
	var note []byte
	var resolvedAt *int64
	if r := c.Resolution; r != nil {
		resolution, resolvedBy, resolvedChannel, evidence = &r.Verdict, &r.By, &r.Channel, &r.Evidence
		note, resolvedAt = []byte(r.Note), nullMS(r.At)
	}
	tag, err := t.tx.Exec(t.ctx, `UPDATE calls SET status = $1, decided_at = $2, denied_by = $3, denied_channel = $4,
		deny_reason = $5, grant_token = $6, grant_jti = $7, grant_kid = $8, grant_expires_at = $9, redeemed_at = $10,
		outcome_status = $11, outcome_detail = $12, outcome_at = $13, redeemed_by = $14, lease_until = $15, resolution = $16,
		resolved_by = $17, resolved_channel = $18, resolution_note = $19, resolution_evidence = $20, resolved_at = $21,
		countered_by = $23, accepted_at = $24
		WHERE id = $22`,
		string(c.Status), nullMS(c.DecidedAt), deniedBy, deniedChannel, reason, nullStr(c.Grant), nullStr(c.GrantJTI),
		nullStr(c.GrantKID), nullMS(c.GrantExpiresAt), nullMS(c.RedeemedAt), outStatus, outDetail, outAt,
		nullStr(c.RedeemedBy), nullMS(c.LeaseUntil), resolution, resolvedBy, resolvedChannel, note, evidence, resolvedAt, c.ID,
		nullStr(c.CounteredBy), nullMS(c.AcceptedAt))
	if err != nil {
		return fmt.Errorf("pgstore: update call %s: %w", c.ID, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("pgstore: update call %s: %w", c.ID, queue.ErrNotFound)
	}
	return nil
}

func (t *txn) AddApproval(callID string, a queue.Approval) error {
	var pkID []byte
	var pkName, evidence *string
	if a.Passkey != nil {
		pkID, pkName = a.Passkey.CredentialID, &a.Passkey.Name
		ev := string(a.Passkey.Evidence)
		evidence = &ev
	}
	var page *string
	var pageAt *int64
	if p := a.Presented; p != nil {
		at := ms(p.At)
		page, pageAt = &p.Page, &at
	}
	if _, err := t.tx.Exec(t.ctx, `INSERT INTO approvals (call_id, operator, channel, at, comment, passkey_id, passkey_name, evidence,
		method, digest, via, presented_page, presented_at, behalf)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14)`, callID, a.Operator, a.Channel, ms(a.At), a.Comment, pkID, pkName, evidence,
		a.Method, a.Digest, a.Via, page, pageAt, a.For); err != nil {
		return fmt.Errorf("pgstore: add approval to %s: %w", callID, err)
	}
	return nil
}

func (t *txn) ConsumeNonce(jti, callID string, at time.Time) (bool, error) {
	t.advance = true // the high-water mark covers it before it is acknowledged
	tag, err := t.tx.Exec(t.ctx, `INSERT INTO redemptions (jti, call_id, at) VALUES ($1,$2,$3) ON CONFLICT (jti) DO NOTHING`,
		jti, callID, ms(at))
	if err != nil {
		return false, fmt.Errorf("pgstore: consume nonce: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

func (t *txn) PendingBy(token string, limit int) (int, error) {
	var n int64
	err := t.tx.QueryRow(t.ctx, `SELECT count(*) FROM (SELECT 1 FROM calls WHERE submitted_by = $1 AND status = 'pending' AND plan_id IS NULL LIMIT $2) p`,
		token, limit).Scan(&n)
	if err != nil {
		return 0, classify(fmt.Errorf("pgstore: count the pending calls of a token: %w", err))
	}
	return int(n), nil
}

func (t *txn) Retry(actor, tool string) (queue.RetryState, error) {
	var st queue.RetryState
	var count int32
	var blocked *int64
	err := t.tx.QueryRow(t.ctx, `SELECT count, blocked_at FROM retries WHERE actor = $1 AND tool = $2`, actor, tool).
		Scan(&count, &blocked)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("pgstore: read retries: %w", err)
	}
	st.Count, st.BlockedAt = int(count), fromMS(blocked)
	return st, nil
}

func (t *txn) SetRetry(actor, tool string, st queue.RetryState) error {
	t.advance = true // the high-water mark covers it before it is acknowledged
	var err error
	if st.Count == 0 && !st.Blocked() {
		_, err = t.tx.Exec(t.ctx, `DELETE FROM retries WHERE actor = $1 AND tool = $2`, actor, tool)
	} else {
		_, err = t.tx.Exec(t.ctx, `INSERT INTO retries (actor, tool, count, blocked_at) VALUES ($1,$2,$3,$4)
			ON CONFLICT (actor, tool) DO UPDATE SET count = excluded.count, blocked_at = excluded.blocked_at`,
			actor, tool, st.Count, nullMS(st.BlockedAt))
	}
	if err != nil {
		return fmt.Errorf("pgstore: write retries: %w", err)
	}
	return nil
}

func (t *txn) Append(e *audit.Entry) error { return t.append(e) }

// append seals e onto the chain inside the transaction, which holds the
// chain head lock. The entry is written by the same transaction as the
// change it records, so a crash leaves both or neither.
func (t *txn) append(e *audit.Entry) error {
	if !t.headRead {
		err := t.tx.QueryRow(t.ctx, `SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1`).Scan(&t.headSeq, &t.headHash)
		if errors.Is(err, pgx.ErrNoRows) {
			t.headSeq, t.headHash = 0, ""
		} else if err != nil {
			return fmt.Errorf("pgstore: read audit head: %w", err)
		}
		t.headRead = true
	}
	if err := e.Seal(t.headSeq, t.headHash); err != nil {
		return err
	}
	details, err := canonical.Encode(detailsOrEmpty(e.Details))
	if err != nil {
		return fmt.Errorf("pgstore: encode audit details: %w", err)
	}
	if _, err := t.tx.Exec(t.ctx, `INSERT INTO audit (seq, time, kind, call_id, principal, channel, details, prev_hash, hash)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)`, e.Seq, e.Time, e.Kind, e.CallID, e.Principal, e.Channel, string(details),
		e.PrevHash, e.Hash); err != nil {
		return fmt.Errorf("pgstore: append audit entry: %w", err)
	}
	t.headSeq, t.headHash = e.Seq, e.Hash
	t.entries = append(t.entries, entryID{e.Seq, e.Hash})
	if !highwater.MayWait(e) {
		t.advance = true
	}
	if t.calls == nil {
		t.calls = map[string]int64{}
	}
	t.calls[e.CallID] = e.Seq
	return nil
}

// notify queues one notification per call the transaction changed (and one
// with an empty call id for changes that concern no call), delivered by
// PostgreSQL when, and only if, the transaction commits.
func (t *txn) notify() error {
	for id, v := range t.calls {
		if _, err := t.tx.Exec(t.ctx, `SELECT pg_notify($1, $2)`, Channel, formatPayload(id, v)); err != nil {
			return fmt.Errorf("pgstore: notify: %w", err)
		}
	}
	return nil
}

// formatPayload is a notification's payload: "VERSION CALLID" (the call id
// is empty for changes that concern no call).
func formatPayload(callID string, version int64) string {
	return strconv.FormatInt(version, 10) + " " + callID
}

func detailsOrEmpty(v any) any {
	if v == nil {
		return canonical.Object{}
	}
	return v
}

// Call reads one call.
func (s Store) Call(ctx context.Context, id string) (*queue.Call, error) {
	return loadCall(ctx, s.pool, `id = $1`, id)
}

// CallHead reads what a long-poll checks before it waits: the call's
// status and whose it is, three columns where Call reads every column
// and parses the arguments.
func (s Store) CallHead(ctx context.Context, id string) (queue.CallHead, error) {
	var h queue.CallHead
	var by *string
	err := s.pool.QueryRow(ctx, `SELECT status, actor, submitted_by FROM calls WHERE id = $1`, id).Scan(&h.Status, &h.Actor, &by)
	if errors.Is(err, pgx.ErrNoRows) {
		return queue.CallHead{}, queue.ErrNotFound
	}
	if err != nil {
		return queue.CallHead{}, classify(fmt.Errorf("pgstore: read the head of call %s: %w", id, err))
	}
	if by != nil {
		h.SubmittedBy = *by
	}
	return h, nil
}

// DueCalls lists pending calls whose deadline has passed.
func (s Store) DueCalls(ctx context.Context, now time.Time, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM calls WHERE status = 'pending' AND plan_id IS NULL AND decide_by <= $1 ORDER BY decide_by LIMIT $2`,
		ms(now), limit)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: due calls: %w", err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, classify(err)
}

// NextDeadline returns the earliest decide_by of a pending call.
func (s Store) NextDeadline(ctx context.Context) (time.Time, bool, error) {
	var n *int64
	if err := s.pool.QueryRow(ctx, `SELECT MIN(decide_by) FROM calls WHERE status = 'pending' AND plan_id IS NULL`).Scan(&n); err != nil {
		return time.Time{}, false, classify(fmt.Errorf("pgstore: next deadline: %w", err))
	}
	return fromMS(n), n != nil, nil
}

// DueLeases lists redeemed calls with no outcome whose lease has lapsed.
func (s Store) DueLeases(ctx context.Context, now time.Time, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM calls WHERE status = 'redeemed' AND outcome_status IS NULL
		AND lease_until <= $1 ORDER BY lease_until LIMIT $2`, ms(now), limit)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: due leases: %w", err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, classify(err)
}

// NextLeaseEnd returns the earliest lease end of a redeemed call with no
// outcome.
func (s Store) NextLeaseEnd(ctx context.Context) (time.Time, bool, error) {
	var n *int64
	if err := s.pool.QueryRow(ctx, `SELECT MIN(lease_until) FROM calls WHERE status = 'redeemed' AND outcome_status IS NULL`).
		Scan(&n); err != nil {
		return time.Time{}, false, classify(fmt.Errorf("pgstore: next lease end: %w", err))
	}
	return fromMS(n), n != nil, nil
}

// unresolvedWhere is the condition of a call waiting for a person, on
// calls c; the partial indexes calls_unresolved and
// calls_unresolved_created have it.
const unresolvedWhere = `c.status = 'redeemed' AND c.outcome_status IN ('unknown','lease_expired') AND c.resolution IS NULL`

// UnresolvedCalls lists calls waiting for a person, oldest outcome first,
// with their approvals.
func (s Store) UnresolvedCalls(ctx context.Context, limit int) ([]*queue.Call, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+qualified+`, `+approvalsColumn+` FROM calls c WHERE `+unresolvedWhere+`
		ORDER BY c.outcome_at, c.seq LIMIT $1`, limit)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: unresolved calls: %w", err))
	}
	defer rows.Close()
	var calls []*queue.Call
	for rows.Next() {
		c, err := scanCallWithApprovals(rows)
		if err != nil {
			return nil, err
		}
		calls = append(calls, c)
	}
	return calls, classify(rows.Err())
}

// CountUnresolved counts the calls waiting for a person.
func (s Store) CountUnresolved(ctx context.Context) (int, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT COUNT(*) FROM calls c WHERE `+unresolvedWhere).Scan(&n); err != nil {
		return 0, classify(fmt.Errorf("pgstore: count unresolved calls: %w", err))
	}
	return int(n), nil
}

// CountPending counts the pending calls, and those due before due.
func (s Store) CountPending(ctx context.Context, due time.Time) (all, before int, err error) {
	var a, b int64
	err = s.pool.QueryRow(ctx, `SELECT COUNT(*), COUNT(*) FILTER (WHERE decide_by < $1)
		FROM calls WHERE status = 'pending' AND plan_id IS NULL`, ms(due)).Scan(&a, &b)
	if err != nil {
		return 0, 0, classify(fmt.Errorf("pgstore: count pending calls: %w", err))
	}
	return int(a), int(b), nil
}

// PendingGroups reads the pending calls (not plan items) grouped by what
// queue.Standing reads of them: a backlog of many calls from few agents
// and tools is a few rows.
func (s Store) PendingGroups(ctx context.Context, due time.Time) ([]queue.PendingGroup, error) {
	rows, err := s.pool.Query(ctx, `SELECT tool, actor, tool_digest, owners, approvers, approvals_required, names,
		COUNT(*), COUNT(*) FILTER (WHERE decide_by < $1)
		FROM (SELECT c.tool, c.actor, c.tool_digest, c.owners, c.approvers, c.approvals_required, c.decide_by,
			COALESCE((SELECT json_agg(json_build_object('operator', a.operator, 'for', a.behalf) ORDER BY a.operator)::text
				FROM approvals a WHERE a.call_id = c.id), '[]') AS names
			FROM calls c WHERE c.status = 'pending' AND c.plan_id IS NULL) p
		GROUP BY tool, actor, tool_digest, owners, approvers, approvals_required, names`, ms(due))
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: pending calls grouped: %w", err))
	}
	defer rows.Close()
	var out []queue.PendingGroup
	for rows.Next() {
		var tool, actor, digest, owners, approvers, names string
		var required int32
		var n, before int64
		if err := rows.Scan(&tool, &actor, &digest, &owners, &approvers, &required, &names, &n, &before); err != nil {
			return nil, classify(fmt.Errorf("pgstore: pending calls grouped: %w", err))
		}
		g, err := store.DecodePendingGroup(tool, actor, digest, owners, approvers, int(required), names, int(n), int(before))
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, classify(rows.Err())
}

// PendingCalls lists pending calls, newest first, with their approvals.
func (s Store) PendingCalls(ctx context.Context, limit int) ([]*queue.Call, error) {
	return s.pendingCalls(ctx, "", limit)
}

// PendingCallsOf lists one tool's pending calls, newest first, with their
// approvals.
func (s Store) PendingCallsOf(ctx context.Context, tool string, limit int) ([]*queue.Call, error) {
	return s.pendingCalls(ctx, tool, limit)
}

// pendingCalls lists pending calls of tool (every tool's when ""), newest
// first, with their approvals.
func (s Store) pendingCalls(ctx context.Context, tool string, limit int) ([]*queue.Call, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+qualified+`, `+approvalsColumn+` FROM calls c
		WHERE c.status = 'pending' AND c.plan_id IS NULL AND ($1 = '' OR c.tool = $1) ORDER BY c.seq DESC LIMIT $2`, tool, limit)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: pending calls: %w", err))
	}
	defer rows.Close()
	var calls []*queue.Call
	for rows.Next() {
		c, err := scanCallWithApprovals(rows)
		if err != nil {
			return nil, err
		}
		calls = append(calls, c)
	}
	return calls, classify(rows.Err())
}

// PendingPage lists one page of pending calls by deadline then id, read
// through the pending index from the key on, with their approvals.
func (s Store) PendingPage(ctx context.Context, after queue.PageKey, limit int) ([]*queue.Call, error) {
	from := int64(math.MinInt64)
	if after.ID != "" {
		from = ms(after.DecideBy)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+qualified+`, `+approvalsColumn+` FROM calls c
		WHERE c.status = 'pending' AND c.plan_id IS NULL AND (c.decide_by, c.id) > ($1, $2) ORDER BY c.decide_by, c.id LIMIT $3`, from, after.ID, limit)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: a page of pending calls: %w", err))
	}
	defer rows.Close()
	var calls []*queue.Call
	for rows.Next() {
		c, err := scanCallWithApprovals(rows)
		if err != nil {
			return nil, err
		}
		calls = append(calls, c)
	}
	return calls, classify(rows.Err())
}

// Blocks lists (actor, tool) pairs blocked by the retry cap.
func (s Store) Blocks(ctx context.Context) ([]queue.Block, error) {
	rows, err := s.pool.Query(ctx, `SELECT actor, tool, count, blocked_at FROM retries WHERE blocked_at IS NOT NULL
		ORDER BY blocked_at DESC, actor, tool`)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: blocks: %w", err))
	}
	defer rows.Close()
	var out []queue.Block
	for rows.Next() {
		var b queue.Block
		var count int32
		var at *int64
		if err := rows.Scan(&b.Actor, &b.Tool, &count, &at); err != nil {
			return nil, classify(err)
		}
		b.Count, b.BlockedAt = int(count), fromMS(at)
		out = append(out, b)
	}
	return out, classify(rows.Err())
}

var _ queue.SweepLocker = Store{}

// TrySweep takes the expiry sweeper's session advisory lock on a
// connection of its own, so that one replica at a time expires calls.
func (s Store) TrySweep(ctx context.Context) (func(), bool, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, classify(fmt.Errorf("pgstore: sweep lock: %w", err))
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, lockSweep).Scan(&got); err != nil {
		conn.Release()
		return nil, false, classify(fmt.Errorf("pgstore: sweep lock: %w", err))
	}
	if !got {
		conn.Release()
		return nil, false, nil
	}
	return func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, lockSweep); err != nil {
			// A session lock must not outlive the sweep: drop the
			// connection, which releases it.
			conn.Hijack().Close(context.Background())
			return
		}
		conn.Release()
	}, true, nil
}

package db

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/highwater"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store"
)

// Store adapts DB to queue.Store.
type Store struct{ *DB }

// Store returns the queue's view of the database.
func (d *DB) Store() Store { return Store{d} }

var (
	_ queue.Store   = Store{}
	_ queue.History = Store{}
	_ audit.Trail   = (*DB)(nil)
)

// Update runs fn in a BEGIN IMMEDIATE transaction, checking inside it that
// the database is still the one opened (store.ErrReplaced otherwise, as
// queue.Store says; the check rides on fn's first read of a call or a
// submission's checks, see withTxState), and commits when fn returns nil. The commit has happened when Update returns
// nil, and what fn registered with AfterCommit has run. The transaction may
// be shared with other writes (group commit): fn's changes are its own,
// rolled back alone when it fails.
func (s Store) Update(ctx context.Context, fn func(queue.Tx) error) error {
	return s.DB.update(ctx, func(ctx context.Context, tx *writeTx) error {
		return runTx(&storeTx{ctx: ctx, tx: tx, db: s.DB}, fn)
	})
}

// runTx runs fn in t, then writes the audit entries it appended.
func runTx[T any](t *storeTx, fn func(T) error) error {
	if err := fn(any(t).(T)); err != nil {
		return err
	}
	return t.flushAudit()
}

// storeTx is one write transaction; it implements queue.Tx and account.Tx.
type storeTx struct {
	ctx context.Context
	tx  *writeTx
	db  *DB
	// stored holds, by call id, the mutable columns of each call as this
	// transaction last read or wrote them.
	stored map[string]mutableRow
	// retries holds the retry states this write has read (Retry).
	retries map[retryKey]queue.RetryState
	// checked holds a submission's checks read by one statement
	// (SubmitChecks) until LatestByDigest and PendingBy ask for them.
	checked *submitChecks
	// entries are the audit rows Append sealed and flushAudit has not
	// written yet (auditColumns each).
	entries []any
}

// submitChecks are the answers SubmitChecks read for one submission. Each
// is handed out once, and none survives a write to the calls table.
type submitChecks struct {
	actor, digest, token string
	limit                int
	latest               int64 // the newest call's seq; 0 when there is none
	pending              int
	latestUsed           bool
	pendingUsed          bool
}

// callColumns are the columns scanCall reads; qualified (history.go) is
// the same under the table alias c.
var callColumns = callColumnsOf("")

// callColumnsOf lists the columns scanCall reads, each prefixed by p (a
// table alias and its dot, or ""): the call's short text columns packed
// into one value first (packedColumns), then the others.
func callColumnsOf(p string) string {
	text := func(col string) string {
		switch col {
		case "submitted_by", "grant_jti", "grant_kid", "redeemed_by", "plan_id":
			return `COALESCE(` + p + col + `, '')`
		}
		return p + col
	}
	var b strings.Builder
	// The lengths in bytes, then the texts: "3,5,…:abcde…".
	for i, col := range packedColumns {
		if i > 0 {
			b.WriteString(` || ',' || `)
		}
		b.WriteString(`octet_length(` + text(col) + `)`)
	}
	b.WriteString(` || ':'`)
	for _, col := range packedColumns {
		b.WriteString(` || ` + text(col))
	}
	for _, col := range strings.Split(unpackedColumns, ",") {
		b.WriteString(", " + p + strings.TrimSpace(col))
	}
	return b.String()
}

// packedColumns are a call's text columns read as one value: each text
// column costs the driver a Go string and an interface box per row, so a
// call's dozen short texts cost two allocations instead of two dozen, the
// fields being parts of one string (unpack). Those that may be NULL are
// read as "", as the call holds them. The long texts (arguments,
// rationale, envelope) stay apart, so that a call's id kept after the
// call (a page's hint, an event) keeps only short texts alive with it.
var packedColumns = []string{"id", "actor", "audience", "tool", "target", "digest", "status", "tool_digest", "notify",
	"owners", "approvers", "submitted_by", "grant_jti", "grant_kid", "redeemed_by", "plan_id"}

// unpackedColumns are the columns read one by one after packedColumns.
const unpackedColumns = `seq, args, rationale, envelope,
	approvals_required, grant_ttl_ms, created_at, decide_by, decided_at, denied_by, denied_channel, deny_reason,
	grant_token, grant_expires_at, redeemed_at, outcome_status, outcome_detail, outcome_at,
	outcome_within_ms, lease_until, resolution, resolved_by, resolved_channel, resolution_note,
	resolution_evidence, resolved_at, require_passkey,
	countered_by, countered_from, edited_by, accepted_at, plan_index`

// unpack splits text packed as callColumnsOf packs it into dst, in
// order: each is a part of text, not a copy.
func unpack(text string, dst ...*string) error {
	lengths, rest, ok := strings.Cut(text, ":")
	for i, d := range dst {
		if !ok {
			break
		}
		var n string
		if i < len(dst)-1 {
			n, lengths, ok = strings.Cut(lengths, ",")
		} else {
			n, lengths = lengths, ""
		}
		size, err := strconv.Atoi(n)
		if err != nil || size < 0 || size > len(rest) {
			ok = false
			break
		}
		*d, rest = rest[:size], rest[size:]
	}
	if !ok || lengths != "" || rest != "" {
		return fmt.Errorf("db: a call's packed columns do not read as %d texts", len(dst))
	}
	return nil
}

type rowScanner interface{ Scan(dest ...any) error }

// callScan holds what scanCall reads besides the call's own fields: one
// value, so that the columns Scan writes through pointers cost one
// allocation, not one each (and apart from the call, which outlives it).
type callScan struct {
	packed, args, status, notify, owners, approvers                    string
	ttl, created, decideBy, outcomeWithin                              int64
	decidedAt, grantExp, redeemedAt, outcomeAt, leaseUntil, resolvedAt sql.NullInt64
	acceptedAt, planIndex                                              sql.NullInt64
	deniedBy, deniedChannel, denyReason, token, outStatus, outDetail   sql.NullString
	resolution, resolvedBy, resolvedChannel, resolutionNote            sql.NullString
	evidence, counteredBy, counteredFrom, editedBy                     sql.NullString
	// approvals and revocation are the columns read after the call's,
	// when the statement has them (scanCallWith).
	approvals  string
	revocation sql.NullString
}

// scanCall reads a row of callColumns.
func scanCall(r rowScanner) (*queue.Call, error) {
	c, _, err := scanCallWith(r, 0)
	return c, err
}

// scanCallWith reads a row of callColumns followed by extra columns (0,
// 1 or 2): the call's approvals (approvalsColumn), then its grant's
// revocation (callReadColumns), returned in the callScan.
func scanCallWith(r rowScanner, extra int) (*queue.Call, *callScan, error) {
	s, c := new(callScan), new(queue.Call)
	dest := []any{&s.packed, &c.Seq, &s.args, &c.Rationale, &c.Envelope,
		&c.ApprovalsRequired, &s.ttl, &s.created, &s.decideBy, &s.decidedAt, &s.deniedBy, &s.deniedChannel, &s.denyReason,
		&s.token, &s.grantExp, &s.redeemedAt, &s.outStatus, &s.outDetail, &s.outcomeAt,
		&s.outcomeWithin, &s.leaseUntil, &s.resolution, &s.resolvedBy, &s.resolvedChannel, &s.resolutionNote,
		&s.evidence, &s.resolvedAt, &c.RequirePasskey,
		&s.counteredBy, &s.counteredFrom, &s.editedBy, &s.acceptedAt, &s.planIndex, &s.approvals, &s.revocation}
	err := r.Scan(dest[:len(dest)-2+extra]...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, queue.ErrNotFound
	}
	if err != nil {
		return nil, nil, fmt.Errorf("db: scan call: %w", err)
	}
	if err := unpack(s.packed, &c.ID, &c.Actor, &c.Audience, &c.Tool, &c.Target, &c.Digest, &s.status, &c.ToolDigest, &s.notify,
		&s.owners, &s.approvers, &c.SubmittedBy, &c.GrantJTI, &c.GrantKID, &c.RedeemedBy, &c.PlanID); err != nil {
		return nil, nil, err
	}
	v, err := canonical.ParseWith([]byte(s.args), canonical.Options{Numbers: canonical.NumbersFor(c.Tool)})
	if err != nil {
		return nil, nil, fmt.Errorf("db: call %s: stored args do not parse: %w", c.ID, err)
	}
	obj, ok := v.(canonical.Object)
	if !ok {
		return nil, nil, fmt.Errorf("db: call %s: stored args are not an object", c.ID)
	}
	c.Args = obj
	c.Notify = splitNames(s.notify)
	if err := store.DecodePeople(c, s.owners, s.approvers); err != nil {
		return nil, nil, err
	}
	c.Status = queue.Status(s.status)
	c.GrantTTL = time.Duration(s.ttl) * time.Millisecond
	c.CreatedAt = time.UnixMilli(s.created).UTC()
	c.DecideBy = time.UnixMilli(s.decideBy).UTC()
	c.DecidedAt = fromMS(s.decidedAt)
	if s.deniedBy.Valid {
		c.Denial = &queue.Denial{By: s.deniedBy.String, Channel: s.deniedChannel.String, Reason: s.denyReason.String, At: c.DecidedAt}
	}
	c.Grant = s.token.String
	c.GrantExpiresAt = fromMS(s.grantExp)
	c.RedeemedAt = fromMS(s.redeemedAt)
	if s.outStatus.Valid {
		c.Outcome = &queue.Outcome{Status: s.outStatus.String, Detail: s.outDetail.String, At: fromMS(s.outcomeAt)}
	}
	c.OutcomeWithin = time.Duration(s.outcomeWithin) * time.Millisecond
	c.CounteredBy, c.CounteredFrom, c.EditedBy = s.counteredBy.String, s.counteredFrom.String, s.editedBy.String
	c.AcceptedAt = fromMS(s.acceptedAt)
	c.PlanIndex = int(s.planIndex.Int64)
	c.LeaseUntil = fromMS(s.leaseUntil)
	if s.resolution.Valid {
		c.Resolution = &queue.Resolution{Verdict: s.resolution.String, By: s.resolvedBy.String, Channel: s.resolvedChannel.String,
			Note: s.resolutionNote.String, Evidence: s.evidence.String, At: fromMS(s.resolvedAt)}
	}
	return c, s, nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// callReadColumns are a call's columns under alias c (qualified), then
// its approvals as one JSON array (as the history's pages read them, with
// each passkey's evidence, unsorted), then its grant's revocation, looked
// up for an approved call only (a revocation is read for no other): what
// loadCall reads with one statement.
var callReadColumns = qualified + `,
	(SELECT json_group_array(json_object('operator', a.operator, 'channel', a.channel, 'at', a.at, 'comment', a.comment,
		'method', a.method, 'digest', a.digest, 'via', a.via, 'presented_page', a.presented_page, 'presented_at', a.presented_at,
		'passkey_id', CASE WHEN a.passkey_id IS NULL THEN NULL ELSE hex(a.passkey_id) END, 'passkey_name', a.passkey_name,
		'evidence', a.evidence, 'for', a.behalf)) FROM approvals a WHERE a.call_id = c.id),
	CASE WHEN c.status = 'approved' THEN (SELECT json_object('jti', r.jti, 'by', r.revoked_by, 'channel', r.channel, 'reason', r.reason, 'at', r.revoked_at)
		FROM grant_revocations r WHERE r.call_id = c.id) END`

// loadCall reads one call, its approvals and its grant's revocation with
// one statement, where it took two or three (the call, its approvals,
// and its revocation when it is approved): a whole flow reads its call
// four times (the approval page, the approval's transaction, the
// long-poll, the redemption's transaction). where names the call by the
// columns of c.
//
// The approvals and the revocation (one at most) come as JSON from
// correlated subqueries, not from joins: joined to the call's row, SQLite
// spent 60–140 µs per execution of the prepared statement (about what a
// fresh prepare costs, every time), where the call alone takes 12 µs and
// the subqueries add 5 µs, about what the approvals' own statement cost.
func loadCall(ctx context.Context, q querier, where string, args ...any) (*queue.Call, error) {
	return scanLoadedCall(q.QueryRowContext(ctx, `SELECT `+callReadColumns+` FROM calls c WHERE `+where, args...))
}

// scanLoadedCall reads a row of callReadColumns.
func scanLoadedCall(r rowScanner) (*queue.Call, error) {
	c, s, err := scanCallWith(r, 2)
	if err != nil {
		return nil, err
	}
	if err := addApprovals(c, s.approvals); err != nil { // sorted, sortApprovals
		return nil, err
	}
	revocation := s.revocation
	// A revocation is set on an approved call only, as it always was.
	if revocation.Valid && c.Status == queue.StatusApproved {
		var r struct {
			JTI, By, Channel, Reason string
			At                       int64
		}
		if err := json.Unmarshal([]byte(revocation.String), &r); err != nil {
			return nil, fmt.Errorf("db: revocation of %s: %w", c.ID, err)
		}
		c.Revoked = &queue.Revocation{CallID: c.ID, JTI: r.JTI, By: r.By, Channel: r.Channel, Reason: r.Reason,
			At: time.UnixMilli(r.At).UTC()}
	}
	return c, nil
}

func (t *storeTx) InsertRevocation(r queue.Revocation) error {
	t.db.mustAdvance() // the high-water mark covers it before it is acknowledged
	if _, err := t.tx.ExecContext(t.ctx, `INSERT INTO grant_revocations (call_id, jti, revoked_by, channel, reason, revoked_at)
		VALUES (?,?,?,?,?,?)`, r.CallID, r.JTI, r.By, r.Channel, r.Reason, ms(r.At)); err != nil {
		return fmt.Errorf("db: record revocation: %w", err)
	}
	return nil
}

func (t *storeTx) Call(id string) (*queue.Call, error) {
	if t.db.txStateRead {
		return t.remember(loadCall(t.ctx, t.tx, `c.id = ?`, id))
	}
	// The transaction's first read of a call carries its state
	// (withTxState): an approval or a redemption then begins with one
	// statement, not two.
	var c *queue.Call
	err := t.db.withTxState(t.ctx, t.tx, `SELECT `+txStateColumns+`, `+callReadColumns+` FROM calls c WHERE c.id = ?`, []any{id},
		func(r rowScanner) (err error) {
			c, err = scanLoadedCall(r)
			return err
		})
	if errors.Is(err, queue.ErrNotFound) {
		// Not found here, or not here because the file is another one.
		if err := t.db.needTxState(t.ctx, t.tx); err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, err // nothing of a row another database may hold
	}
	return t.remember(c, nil)
}

// SubmitChecks reads what a submission checks before it inserts its call
// in one statement: the retry states of (actor, tool) and (actor, any
// tool), the newest call of actor with that digest (LatestByDigest) and
// how many calls token keeps pending, up to limit (PendingBy). The
// answers are kept for those reads, which then run no statement of their
// own; a write to the calls table forgets them.
//
// The statement stays prepared between submissions: its values are bound
// where SQLite's planner does not read them. Planning a subquery with ORDER
// BY or OR (the newest call) that compares a column with a bare ?, SQLite
// looks at the value bound (is it 0 or 1?) and marks the statement to be
// prepared again whenever the binding changes, which go-sqlite3's clearing
// of the bindings before every execution always counts as; +?1 is the same
// value as ?1, the index is still used, and the plan no longer depends on
// it. Likewise its limit is written, not bound (limitClause).
func (t *storeTx) SubmitChecks(actor, tool, digest, token string, limit int) error {
	var count, anyCount, blocked, anyBlocked, latest sql.NullInt64
	var pending int
	query := `
		(SELECT count FROM retries WHERE actor = ?1 AND tool = ?2), (SELECT blocked_at FROM retries WHERE actor = ?1 AND tool = ?2),
		(SELECT count FROM retries WHERE actor = ?1 AND tool = ?3), (SELECT blocked_at FROM retries WHERE actor = ?1 AND tool = ?3),
		(SELECT seq FROM calls WHERE actor = +?1 AND digest = +?4 AND (submitted_by = +?5 OR status = 'denied') ORDER BY seq DESC LIMIT 1),
		(SELECT count(*) FROM (SELECT 1 FROM calls WHERE submitted_by = ?5 AND status = 'pending' AND plan_id IS NULL` + limitClause(limit) + `))`
	args := []any{actor, tool, queue.AnyTool, digest, token}
	scan := func(r rowScanner) error {
		return r.Scan(&count, &blocked, &anyCount, &anyBlocked, &latest, &pending)
	}
	var err error
	if t.db.txStateRead {
		err = scan(t.tx.QueryRowContext(t.ctx, `SELECT`+query, args...))
	} else {
		// A submission's transaction begins with its checks: they carry
		// the transaction's state (withTxState).
		err = t.db.withTxState(t.ctx, t.tx, `SELECT `+txStateColumns+`,`+query, args, scan)
	}
	if err != nil {
		return fmt.Errorf("db: read a submission's checks: %w", err)
	}
	if t.retries == nil {
		t.retries = map[retryKey]queue.RetryState{}
	}
	// A pair without a row is the zero state.
	t.retries[retryKey{actor, tool}] = queue.RetryState{Count: int(count.Int64), BlockedAt: fromMS(blocked)}
	t.retries[retryKey{actor, queue.AnyTool}] = queue.RetryState{Count: int(anyCount.Int64), BlockedAt: fromMS(anyBlocked)}
	t.checked = &submitChecks{actor: actor, digest: digest, token: token, limit: limit, latest: latest.Int64, pending: pending}
	return nil
}

func (t *storeTx) LatestByDigest(actor, digest, token string) (*queue.Call, error) {
	if k := t.checked; k != nil && !k.latestUsed && k.actor == actor && k.digest == digest && k.token == token {
		k.latestUsed = true
		if k.latest == 0 {
			return nil, queue.ErrNotFound
		}
		return t.remember(loadCall(t.ctx, t.tx, `c.seq = ?`, k.latest))
	}
	// The call's seq first, then the call: SQLite prepares a statement
	// with ORDER BY … LIMIT and bound values again at every execution
	// (it may plan it anew for the values), which for every column of a
	// call is most of the cost of the lookup.
	var seq int64
	err := t.tx.QueryRowContext(t.ctx, `SELECT seq FROM calls WHERE actor = ? AND digest = ? AND (submitted_by = ? OR status = 'denied')
		ORDER BY seq DESC LIMIT 1`, actor, digest, token).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, queue.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("db: look up call by digest: %w", err)
	}
	return t.remember(loadCall(t.ctx, t.tx, `c.seq = ?`, seq))
}

// remember keeps the mutable columns of a call as this transaction read
// them, so that UpdateCall writes only the columns that changed.
func (t *storeTx) remember(c *queue.Call, err error) (*queue.Call, error) {
	if err == nil {
		if t.stored == nil {
			t.stored = map[string]mutableRow{}
		}
		t.stored[c.ID] = mutableValues(c)
	}
	return c, err
}

func (t *storeTx) InsertCall(c *queue.Call) error {
	t.checked = nil // the answers of SubmitChecks may change
	args, err := canonical.Encode(c.Args)
	if err != nil {
		return fmt.Errorf("db: encode args of %s: %w", c.ID, err)
	}
	owners, approvers, err := store.EncodePeople(c)
	if err != nil {
		return err
	}
	res, err := t.tx.ExecContext(t.ctx, `INSERT INTO calls (id, actor, audience, tool, target, args, rationale, envelope,
		digest, status, approvals_required, grant_ttl_ms, created_at, decide_by, tool_digest, notify, outcome_within_ms,
		owners, approvers, require_passkey, submitted_by, countered_from, edited_by, plan_id, plan_index)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		c.ID, c.Actor, c.Audience, c.Tool, c.Target, string(args), c.Rationale, c.Envelope, c.Digest, string(c.Status),
		c.ApprovalsRequired, c.GrantTTL.Milliseconds(), ms(c.CreatedAt), ms(c.DecideBy), c.ToolDigest, strings.Join(c.Notify, ","),
		c.OutcomeWithin.Milliseconds(), owners, approvers, c.RequirePasskey, c.SubmittedBy,
		sql.NullString{String: c.CounteredFrom, Valid: c.CounteredFrom != ""}, sql.NullString{String: c.EditedBy, Valid: c.EditedBy != ""},
		sql.NullString{String: c.PlanID, Valid: c.PlanID != ""}, sql.NullInt64{Int64: int64(c.PlanIndex), Valid: c.PlanID != ""})
	if err != nil {
		return fmt.Errorf("db: insert call %s: %w", c.ID, err)
	}
	c.Seq, _ = res.LastInsertId()
	return nil
}

// mutableColumns are the columns UpdateCall writes, in the order of
// mutableValues.
var mutableColumns = []string{"status", "decided_at", "denied_by", "denied_channel", "deny_reason", "grant_token", "grant_jti",
	"grant_kid", "grant_expires_at", "redeemed_at", "outcome_status", "outcome_detail", "outcome_at", "redeemed_by", "lease_until",
	"resolution", "resolved_by", "resolved_channel", "resolution_note", "resolution_evidence", "resolved_at",
	"countered_by", "accepted_at"}

// mutableValue is one value of mutableColumns, comparable with == and
// boxed for the statement only when it is written (arg): a plain string,
// or a nullable string or integer.
type mutableValue struct {
	kind  byte // 's' string, 'S' nullable string, 'I' nullable integer
	valid bool
	s     string
	n     int64
}

func (v mutableValue) arg() any {
	switch v.kind {
	case 's':
		return v.s
	case 'S':
		return sql.NullString{String: v.s, Valid: v.valid}
	}
	return sql.NullInt64{Int64: v.n, Valid: v.valid}
}

// mutableRow is a call's values of mutableColumns.
type mutableRow [23]mutableValue

// mutableValues are c's values of mutableColumns, as bound to the update.
func mutableValues(c *queue.Call) mutableRow {
	str := func(s string, valid bool) mutableValue { return mutableValue{kind: 'S', s: s, valid: valid} }
	opt := func(s string) mutableValue { return str(s, s != "") }
	at := func(t time.Time) mutableValue {
		n := nullMS(t)
		return mutableValue{kind: 'I', n: n.Int64, valid: n.Valid}
	}
	var deniedBy, deniedChannel, reason mutableValue = str("", false), str("", false), str("", false)
	if d := c.Denial; d != nil {
		deniedBy, deniedChannel, reason = str(d.By, true), str(d.Channel, true), str(d.Reason, true)
	}
	outStatus, outDetail, outAt := str("", false), str("", false), at(time.Time{})
	if o := c.Outcome; o != nil {
		outStatus, outDetail, outAt = str(o.Status, true), str(o.Detail, true), at(o.At)
	}
	resolution, resolvedBy, resolvedChannel, note, evidence := str("", false), str("", false), str("", false), str("", false), str("", false)
	resolvedAt := at(time.Time{})
	if r := c.Resolution; r != nil {
		resolution, resolvedBy, resolvedChannel = str(r.Verdict, true), str(r.By, true), str(r.Channel, true)
		note, evidence, resolvedAt = str(r.Note, true), str(r.Evidence, true), at(r.At)
	}
	return mutableRow{{kind: 's', s: string(c.Status), valid: true}, at(c.DecidedAt), deniedBy, deniedChannel, reason,
		opt(c.Grant), opt(c.GrantJTI), opt(c.GrantKID), at(c.GrantExpiresAt), at(c.RedeemedAt), outStatus, outDetail, outAt,
		opt(c.RedeemedBy), at(c.LeaseUntil), resolution, resolvedBy, resolvedChannel, note, evidence, resolvedAt,
		opt(c.CounteredBy), at(c.AcceptedAt)}
}

// UpdateCall writes the call's mutable columns. A call read by this
// transaction has only the columns that changed written: SQLite rewrites
// the entries of every index on a column the UPDATE names, changed or not,
// and the calls table has many (status, outcome and lease indexes for the
// history's filters), so a full update costs several times a narrow one.
func (t *storeTx) UpdateCall(c *queue.Call) error {
	t.checked = nil // the answers of SubmitChecks may change
	vals := mutableValues(c)
	prev, known := t.stored[c.ID]
	set := make([]string, 0, len(vals))
	args := make([]any, 0, len(vals)+1)
	for i, v := range vals {
		if !known || v != prev[i] {
			set = append(set, mutableColumns[i])
			args = append(args, v.arg())
		}
	}
	if len(set) == 0 {
		return nil // the row is as this transaction read it
	}
	res, err := t.tx.ExecContext(t.ctx, `UPDATE calls SET `+strings.Join(set, " = ?, ")+` = ? WHERE id = ?`, append(args, c.ID)...)
	if err != nil {
		return fmt.Errorf("db: update call %s: %w", c.ID, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("db: update call %s: %w", c.ID, queue.ErrNotFound)
	}
	if t.stored != nil {
		t.stored[c.ID] = vals
	}
	return nil
}

func (t *storeTx) AddApproval(callID string, a queue.Approval) error {
	var pkID []byte
	var pkName, evidence sql.NullString
	if a.Passkey != nil {
		pkID = a.Passkey.CredentialID
		pkName = sql.NullString{String: a.Passkey.Name, Valid: true}
		evidence = sql.NullString{String: string(a.Passkey.Evidence), Valid: true}
	}
	var page sql.NullString
	var pageAt sql.NullInt64
	if p := a.Presented; p != nil {
		page, pageAt = sql.NullString{String: p.Page, Valid: true}, sql.NullInt64{Int64: ms(p.At), Valid: true}
	}
	_, err := t.tx.ExecContext(t.ctx, `INSERT INTO approvals (call_id, operator, channel, at, comment, passkey_id, passkey_name, evidence,
		method, digest, via, presented_page, presented_at, behalf)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, callID, a.Operator, a.Channel, ms(a.At), a.Comment, pkID, pkName, evidence,
		a.Method, a.Digest, a.Via, page, pageAt, a.For)
	if err != nil {
		return fmt.Errorf("db: add approval to %s: %w", callID, err)
	}
	return nil
}

func (t *storeTx) ConsumeNonce(jti, callID string, at time.Time) (bool, error) {
	t.db.mustAdvance() // the high-water mark covers it before it is acknowledged
	res, err := t.tx.ExecContext(t.ctx, `INSERT INTO redemptions (jti, call_id, at) VALUES (?,?,?) ON CONFLICT (jti) DO NOTHING`,
		jti, callID, ms(at))
	if err != nil {
		return false, fmt.Errorf("db: consume nonce: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("db: consume nonce: %w", err)
	}
	return n == 1, nil
}

// Retry reads the retry state of (actor, tool). The actor-wide pair
// (actor, queue.AnyTool) is read by the same statement and kept for the
// write, since every check of a pair checks the actor-wide one too (a
// submission reads both); the write's own SetRetry forgets what it changes.
// Nothing else changes the retries while the write runs: it holds the
// write lock, and its write is its own.
func (t *storeTx) PendingBy(token string, limit int) (int, error) {
	if k := t.checked; k != nil && !k.pendingUsed && k.token == token && k.limit == limit {
		k.pendingUsed = true
		return k.pending, nil
	}
	var n int
	err := t.tx.QueryRowContext(t.ctx, `SELECT count(*) FROM (SELECT 1 FROM calls WHERE submitted_by = ? AND status = 'pending' AND plan_id IS NULL`+
		limitClause(limit)+`)`, token).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("db: count the pending calls of a token: %w", err)
	}
	return n, nil
}

func (t *storeTx) Retry(actor, tool string) (queue.RetryState, error) {
	k := retryKey{actor, tool}
	if st, ok := t.retries[k]; ok {
		return st, nil
	}
	q := `SELECT tool, count, blocked_at FROM retries WHERE actor = ? AND tool = ?`
	args := []any{actor, tool}
	if tool != queue.AnyTool {
		if _, ok := t.retries[retryKey{actor, queue.AnyTool}]; !ok {
			// UNION ALL: two probes of the primary key, where tool IN (?, ?)
			// would build a temporary table for the list.
			q += ` UNION ALL SELECT tool, count, blocked_at FROM retries WHERE actor = ? AND tool = ?`
			args = append(args, actor, queue.AnyTool)
		}
	}
	rows, err := t.tx.QueryContext(t.ctx, q, args...)
	if err != nil {
		return queue.RetryState{}, fmt.Errorf("db: read retries: %w", err)
	}
	defer rows.Close()
	// A pair without a row is the zero state.
	got := map[string]queue.RetryState{tool: {}}
	if len(args) > 2 {
		got[queue.AnyTool] = queue.RetryState{}
	}
	for rows.Next() {
		var st queue.RetryState
		var tl string
		var blocked sql.NullInt64
		if err := rows.Scan(&tl, &st.Count, &blocked); err != nil {
			return queue.RetryState{}, fmt.Errorf("db: read retries: %w", err)
		}
		st.BlockedAt = fromMS(blocked)
		got[tl] = st
	}
	if err := rows.Err(); err != nil {
		return queue.RetryState{}, fmt.Errorf("db: read retries: %w", err)
	}
	if t.retries == nil {
		t.retries = map[retryKey]queue.RetryState{}
	}
	for tl, st := range got {
		t.retries[retryKey{actor, tl}] = st
	}
	return t.retries[k], nil
}

// retryKey is an (actor, tool) pair of the retries table.
type retryKey struct{ actor, tool string }

func (t *storeTx) SetRetry(actor, tool string, st queue.RetryState) error {
	t.db.mustAdvance()                       // the high-water mark covers it before it is acknowledged
	delete(t.retries, retryKey{actor, tool}) // read again if asked
	var err error
	if st.Count == 0 && !st.Blocked() {
		_, err = t.tx.ExecContext(t.ctx, `DELETE FROM retries WHERE actor = ? AND tool = ?`, actor, tool)
	} else {
		_, err = t.tx.ExecContext(t.ctx, `INSERT INTO retries (actor, tool, count, blocked_at) VALUES (?,?,?,?)
			ON CONFLICT (actor, tool) DO UPDATE SET count = excluded.count, blocked_at = excluded.blocked_at`,
			actor, tool, st.Count, nullMS(st.BlockedAt))
	}
	if err != nil {
		return fmt.Errorf("db: write retries: %w", err)
	}
	return nil
}

// AfterCommit runs fn after the transaction has committed, before Update
// returns, in the order of the commits; not at all if it does not commit.
func (t *storeTx) AfterCommit(fn func()) {
	t.db.txAfter = append(t.db.txAfter, fn)
}

// Append seals e onto the chain in this write; its row is written with
// the write's other entries by one statement when the write's function
// returns (flushAudit), in the same transaction: nothing in a write reads
// the audit table back, and a write that fails is rolled back whole.
func (t *storeTx) Append(e *audit.Entry) error {
	if t.entries == nil {
		t.entries = make([]any, 0, 2*auditColumns) // an approval appends two
	}
	rows, err := t.db.sealAudit(t.ctx, t.tx, t.entries, e)
	if err != nil {
		return err
	}
	t.entries = rows
	return nil
}

// flushAudit writes the audit rows the write appended.
func (t *storeTx) flushAudit() error {
	rows := t.entries
	t.entries = nil
	for len(rows) > 0 {
		n := min(len(rows)/auditColumns, maxAuditRowsPerInsert)
		if err := insertAudit(t.ctx, t.tx, rows[:n*auditColumns]); err != nil {
			return err
		}
		rows = rows[n*auditColumns:]
	}
	return nil
}

// auditColumns are the values of one audit row; maxAuditRowsPerInsert
// keeps one INSERT's values well under SQLite's limit of bound values.
const (
	auditColumns          = 9
	maxAuditRowsPerInsert = 500
)

// insertAudit writes audit rows (auditColumns values each) by one
// statement.
func insertAudit(ctx context.Context, tx *writeTx, rows []any) error {
	q := `INSERT INTO audit (seq, time, kind, call_id, principal, channel, details, prev_hash, hash) VALUES (?,?,?,?,?,?,?,?,?)`
	if n := len(rows) / auditColumns; n > 1 {
		q += strings.Repeat(`,(?,?,?,?,?,?,?,?,?)`, n-1)
	}
	if _, err := tx.ExecContext(ctx, q, rows...); err != nil {
		return fmt.Errorf("db: append audit entry: %w", err)
	}
	return nil
}

// appendAudit seals e onto the chain inside tx and writes it. Because the
// entry is written by the same transaction as the change it records, a
// crash leaves both or neither.
func (d *DB) appendAudit(ctx context.Context, tx *writeTx, e *audit.Entry) error {
	row, err := d.sealAudit(ctx, tx, make([]any, 0, auditColumns), e)
	if err != nil {
		return err
	}
	return insertAudit(ctx, tx, row)
}

// sealAudit seals e onto the chain's head in the running write
// transaction and appends its row's values to dst.
func (d *DB) sealAudit(ctx context.Context, tx *writeTx, dst []any, e *audit.Entry) ([]any, error) {
	// The chain's head in this transaction: read by the transaction's
	// first statement that needed it (needTxState, under the write lock,
	// so nobody else appends until it commits), moved by each entry it
	// appends, and put back by the writer when a savepoint is rolled back.
	// The details are hashed as the text stored, as verifying reads them
	// back: encoded once, in place in the hashed body.
	if err := d.needTxState(ctx, tx); err != nil {
		return nil, err
	}
	details, err := e.SealText(d.txHead.seq, d.txHead.hash)
	if err != nil {
		return nil, fmt.Errorf("db: seal audit entry: %w", err)
	}
	d.txHead = commitHead{seq: e.Seq, hash: e.Hash}
	if !highwater.MayWait(e) {
		d.mustAdvance()
	}
	return append(dst, e.Seq, e.Time, e.Kind, e.CallID, e.Principal, e.Channel, details, e.PrevHash, e.Hash), nil
}

// Call reads one call.
func (s Store) Call(ctx context.Context, id string) (*queue.Call, error) {
	c, err := loadCall(ctx, s.sql, `c.id = ?`, id)
	return c, classify(err)
}

// CallHead reads what a long-poll checks before it waits: the call's
// status and whose it is, three columns where Call reads some fifty and
// parses the arguments.
func (s Store) CallHead(ctx context.Context, id string) (queue.CallHead, error) {
	var h struct {
		status, actor string
		by            sql.NullString
	}
	err := s.sql.QueryRowContext(ctx, `SELECT status, actor, submitted_by FROM calls WHERE id = ?`, id).Scan(&h.status, &h.actor, &h.by)
	if errors.Is(err, sql.ErrNoRows) {
		return queue.CallHead{}, queue.ErrNotFound
	}
	if err != nil {
		return queue.CallHead{}, classify(fmt.Errorf("db: read the head of call %s: %w", id, err))
	}
	return queue.CallHead{Status: queue.Status(h.status), Actor: h.actor, SubmittedBy: h.by.String}, nil
}

// DueCalls lists pending calls whose deadline has passed. The deadline
// queries name the partial index on pending deadlines: left to itself the
// planner prefers the (status, created) index and reads every pending call.
func (s Store) DueCalls(ctx context.Context, now time.Time, limit int) ([]string, error) {
	rows, err := s.sql.QueryContext(ctx, `SELECT id FROM calls INDEXED BY calls_pending
		WHERE status = 'pending' AND plan_id IS NULL AND decide_by <= ? ORDER BY decide_by`+limitClause(limit),
		ms(now))
	if err != nil {
		return nil, classify(fmt.Errorf("db: due calls: %w", err))
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// NextDeadline returns the earliest decide_by of a pending call.
func (s Store) NextDeadline(ctx context.Context) (time.Time, bool, error) {
	var n sql.NullInt64
	if err := s.sql.QueryRowContext(ctx, `SELECT MIN(decide_by) FROM calls INDEXED BY calls_pending WHERE status = 'pending' AND plan_id IS NULL`).Scan(&n); err != nil {
		return time.Time{}, false, classify(fmt.Errorf("db: next deadline: %w", err))
	}
	return fromMS(n), n.Valid, nil
}

// DueLeases lists redeemed calls with no outcome whose lease has lapsed.
func (s Store) DueLeases(ctx context.Context, now time.Time, limit int) ([]string, error) {
	rows, err := s.sql.QueryContext(ctx, `SELECT id FROM calls INDEXED BY calls_lease
		WHERE status = 'redeemed' AND outcome_status IS NULL AND lease_until <= ? ORDER BY lease_until`+limitClause(limit),
		ms(now))
	if err != nil {
		return nil, classify(fmt.Errorf("db: due leases: %w", err))
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, classify(rows.Err())
}

// NextLeaseEnd returns the earliest lease end of a redeemed call with no
// outcome.
func (s Store) NextLeaseEnd(ctx context.Context) (time.Time, bool, error) {
	var n sql.NullInt64
	if err := s.sql.QueryRowContext(ctx, `SELECT MIN(lease_until) FROM calls INDEXED BY calls_lease
		WHERE status = 'redeemed' AND outcome_status IS NULL`).Scan(&n); err != nil {
		return time.Time{}, false, classify(fmt.Errorf("db: next lease end: %w", err))
	}
	return fromMS(n), n.Valid, nil
}

// unresolvedWhere is the condition of a call waiting for a person, its
// columns prefixed by p; the partial indexes calls_unresolved and
// calls_unresolved_created have it.
func unresolvedWhere(p string) string {
	return p + `status = 'redeemed' AND ` + p + `outcome_status IN ('unknown','lease_expired') AND ` + p + `resolution IS NULL`
}

// UnresolvedCalls lists calls waiting for a person, oldest outcome first,
// with their approvals.
func (s Store) UnresolvedCalls(ctx context.Context, limit int) ([]*queue.Call, error) {
	rows, err := s.sql.QueryContext(ctx, `SELECT `+qualified+`, `+approvalsColumn+` FROM calls c INDEXED BY calls_unresolved
		WHERE `+unresolvedWhere("c.")+` ORDER BY c.outcome_at, c.seq`+limitClause(limit))
	if err != nil {
		return nil, classify(fmt.Errorf("db: unresolved calls: %w", err))
	}
	defer rows.Close()
	var calls []*queue.Call
	for rows.Next() {
		c, s, err := scanCallWith(rows, 1)
		if err != nil {
			return nil, err
		}
		if err := addApprovals(c, s.approvals); err != nil {
			return nil, err
		}
		calls = append(calls, c)
	}
	return calls, classify(rows.Err())
}

// CountUnresolved counts the calls waiting for a person.
func (s Store) CountUnresolved(ctx context.Context) (int, error) {
	var n int
	err := s.sql.QueryRowContext(ctx, `SELECT COUNT(*) FROM calls INDEXED BY calls_unresolved WHERE `+unresolvedWhere("")).Scan(&n)
	if err != nil {
		return 0, classify(fmt.Errorf("db: count unresolved calls: %w", err))
	}
	return n, nil
}

// CountPending counts the pending calls (not plan items, which are decided
// with their plan), and those due before due, in one pass over the pending
// index.
func (s Store) CountPending(ctx context.Context, due time.Time) (all, before int, err error) {
	err = s.sql.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(CASE WHEN decide_by < ? THEN 1 ELSE 0 END), 0)
		FROM calls INDEXED BY calls_pending WHERE status = 'pending' AND plan_id IS NULL`, ms(due)).Scan(&all, &before)
	if err != nil {
		return 0, 0, classify(fmt.Errorf("db: count pending calls: %w", err))
	}
	return all, before, nil
}

// PendingGroups reads the pending calls (not plan items) grouped by what
// queue.Standing reads of them, in one pass over the pending index: a
// backlog of many calls from few agents and tools is a few rows.
func (s Store) PendingGroups(ctx context.Context, due time.Time) ([]queue.PendingGroup, error) {
	rows, err := s.sql.QueryContext(ctx, `SELECT tool, actor, tool_digest, owners, approvers, approvals_required,
		COALESCE((SELECT json_group_array(json_object('operator', a.operator, 'for', a.behalf)) FROM approvals a WHERE a.call_id = c.id), '[]') AS names,
		COUNT(*), COALESCE(SUM(CASE WHEN decide_by < ? THEN 1 ELSE 0 END), 0)
		FROM calls c INDEXED BY calls_pending WHERE status = 'pending' AND plan_id IS NULL
		GROUP BY tool, actor, tool_digest, owners, approvers, approvals_required, names`, ms(due))
	if err != nil {
		return nil, classify(fmt.Errorf("db: pending calls grouped: %w", err))
	}
	defer rows.Close()
	var out []queue.PendingGroup
	for rows.Next() {
		var tool, actor, digest, owners, approvers, names string
		var required, n, before int
		if err := rows.Scan(&tool, &actor, &digest, &owners, &approvers, &required, &names, &n, &before); err != nil {
			return nil, classify(fmt.Errorf("db: pending calls grouped: %w", err))
		}
		g, err := store.DecodePendingGroup(tool, actor, digest, owners, approvers, required, names, n, before)
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, classify(rows.Err())
}

// PendingCalls lists pending calls, newest first, with their approvals,
// in one statement.
func (s Store) PendingCalls(ctx context.Context, limit int) ([]*queue.Call, error) {
	return s.pendingCalls(ctx, "", limit)
}

// PendingCallsOf lists one tool's pending calls, newest first.
func (s Store) PendingCallsOf(ctx context.Context, tool string, limit int) ([]*queue.Call, error) {
	return s.pendingCalls(ctx, tool, limit)
}

// pendingCalls lists pending calls of tool (every tool's when ""), newest
// first, each with its approvals as the history reads them (approvalsColumn:
// all but a passkey's evidence, which a single call's read carries).
func (s Store) pendingCalls(ctx context.Context, tool string, limit int) ([]*queue.Call, error) {
	rows, err := s.sql.QueryContext(ctx, `SELECT `+qualified+`, `+approvalsColumn+` FROM calls c
		WHERE c.status = 'pending' AND c.plan_id IS NULL AND (? = '' OR c.tool = ?) ORDER BY c.seq DESC`+limitClause(limit), tool, tool)
	if err != nil {
		return nil, classify(fmt.Errorf("db: pending calls: %w", err))
	}
	defer rows.Close()
	var calls []*queue.Call
	for rows.Next() {
		c, s, err := scanCallWith(rows, 1)
		if err != nil {
			return nil, err
		}
		if err := addApprovals(c, s.approvals); err != nil {
			return nil, err
		}
		calls = append(calls, c)
	}
	return calls, classify(rows.Err())
}

// PendingPage lists one page of pending calls by deadline then id, read
// through the pending index from the key on, each with its approvals as
// the history reads them (approvalsColumn), in one statement.
func (s Store) PendingPage(ctx context.Context, after queue.PageKey, limit int) ([]*queue.Call, error) {
	from := int64(math.MinInt64)
	if after.ID != "" {
		from = ms(after.DecideBy)
	}
	rows, err := s.sql.QueryContext(ctx, `SELECT `+qualified+`, `+approvalsColumn+` FROM calls c INDEXED BY calls_pending
		WHERE c.status = 'pending' AND c.plan_id IS NULL AND c.decide_by >= ? AND (c.decide_by > ? OR c.id > ?) ORDER BY c.decide_by, c.id`+limitClause(limit),
		from, from, after.ID)
	if err != nil {
		return nil, classify(fmt.Errorf("db: a page of pending calls: %w", err))
	}
	defer rows.Close()
	var calls []*queue.Call
	for rows.Next() {
		c, s, err := scanCallWith(rows, 1)
		if err != nil {
			return nil, err
		}
		if err := addApprovals(c, s.approvals); err != nil {
			return nil, err
		}
		calls = append(calls, c)
	}
	return calls, classify(rows.Err())
}

// Blocks lists (actor, tool) pairs blocked by the retry cap.
func (s Store) Blocks(ctx context.Context) ([]queue.Block, error) {
	rows, err := s.sql.QueryContext(ctx, `SELECT actor, tool, count, blocked_at FROM retries WHERE blocked_at IS NOT NULL ORDER BY blocked_at DESC`)
	if err != nil {
		return nil, classify(fmt.Errorf("db: blocks: %w", err))
	}
	defer rows.Close()
	var out []queue.Block
	for rows.Next() {
		var b queue.Block
		var at sql.NullInt64
		if err := rows.Scan(&b.Actor, &b.Tool, &b.Count, &at); err != nil {
			return nil, err
		}
		b.BlockedAt = fromMS(at)
		out = append(out, b)
	}
	return out, rows.Err()
}

// splitNames reads a comma-separated list of channel names ("" is none).
func splitNames(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// limitClause is " LIMIT n", the limit written into the statement rather
// than bound. SQLite plans a statement by the value bound to its LIMIT and
// marks it to be prepared again whenever another value is bound; and
// go-sqlite3 clears a statement's bindings before binding its next values
// (and when it returns it to its cache), which counts as another value.
// So a statement with LIMIT ? was parsed and planned anew at every
// execution, the pending calls' statement with its approvals (the call
// page's read) costing several times its own execution. A statement is
// kept prepared per text (the connection's statement cache), so a limit
// should be one of a few values (a page size, a configured cap).
func limitClause(n int) string {
	return " LIMIT " + strconv.Itoa(n)
}

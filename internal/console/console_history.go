package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/web/templates"
)

// The history pages: every call with filters and keyset pages, one call's
// timeline of audit entries, streamed exports, and the state of the audit
// chain. Every role may read them; none of them decides anything.

const (
	// historyPath is where the history pages live.
	historyPath = "/history"
	// maxExports bounds the exports streaming at once: each reads the
	// whole trail or every matching call. One account streams one at a
	// time, so that nobody holds them all.
	maxExports           = 2
	maxExportsPerAccount = 1
	// exportWriteWindow is how long one write of an export may take: the
	// deadline moves on with every write, so an export may run for as long
	// as the client keeps reading.
	exportWriteWindow = time.Minute
	// maxFilterBytes bounds a text filter.
	maxFilterBytes = 1024
)

// historyStatuses and historyChannels are the values the filter offers.
var (
	historyStatuses = []string{"pending", "approved", "denied", "expired", "cancelled", "countered", "redeemed"}
	historyChannels = []string{audit.ChannelWeb, audit.ChannelCLI, audit.ChannelAPI}
)

// historyPages serves the history. It is built by routesHistory.
type historyPages struct {
	c       *Console
	chain   *audit.Watcher
	exports *slots // the exports streaming, per account and in all
}

func newHistoryPages(c *Console) *historyPages {
	return &historyPages{c: c, chain: c.chain, exports: newSlots(maxExportsPerAccount, maxExports)}
}

// routesHistory serves the history under auth, a group at /history whose
// middleware already requires a console session:
//
//	GET /history                     calls, newest first, filtered by the query
//	GET /history/calls/:id           one call's proposal and audit timeline
//	GET /history/export/calls.jsonl  the calls matching the filter, streamed
//	GET /history/export/calls.csv
//	GET /history/export/audit.jsonl  the audit trail (within since/until), verifiable offline
func (c *Console) routesHistory(auth *echo.Group) {
	h := newHistoryPages(c)
	auth.GET("", h.list)
	auth.GET("/calls/:id", h.timeline)
	auth.GET("/export/calls.jsonl", h.exportCalls("jsonl"))
	auth.GET("/export/calls.csv", h.exportCalls("csv"))
	auth.GET("/export/audit.jsonl", h.exportAudit)
}

// historyQuery is a parsed history URL: the form as typed, the filter it
// means, and the page size asked for (0 for the default).
type historyQuery struct {
	form   templates.HistoryForm
	filter queue.HistoryFilter
	limit  int
}

// filterError is a filter that cannot be applied, said for people.
type filterError struct{ msg string }

func (e *filterError) Error() string { return e.msg }

// parseHistoryQuery reads the filter from a URL query. Times without a
// zone are UTC; a date alone is midnight UTC.
func parseHistoryQuery(q url.Values) (historyQuery, error) {
	get := func(name string) string { return strings.TrimSpace(q.Get(name)) }
	var hq historyQuery
	hq.form = templates.HistoryForm{
		Actor: get("actor"), Tool: get("tool"), Status: get("status"), Operator: get("operator"),
		Channel: get("channel"), Since: get("since"), Until: get("until"), Digest: get("digest"),
		Outcome: get("outcome"),
	}
	fm := hq.form
	for _, s := range []string{fm.Actor, fm.Tool, fm.Operator, fm.Since, fm.Until, fm.Digest} {
		if len(s) > maxFilterBytes || !utf8.ValidString(s) {
			return hq, &filterError{fmt.Sprintf("a filter must be UTF-8 text of at most %d bytes", maxFilterBytes)}
		}
	}
	f := queue.HistoryFilter{Actor: fm.Actor, Tool: fm.Tool, Status: fm.Status, Operator: fm.Operator, Channel: fm.Channel,
		Outcome: fm.Outcome}
	if fm.Outcome != "" && !slices.Contains(queue.OutcomeFilters, fm.Outcome) {
		return hq, &filterError{"after redemption must be one of " + strings.Join(queue.OutcomeFilters, ", ")}
	}
	if fm.Status != "" && !slices.Contains(historyStatuses, fm.Status) {
		return hq, &filterError{"the status must be one of " + strings.Join(historyStatuses, ", ")}
	}
	if fm.Channel != "" && !slices.Contains(historyChannels, fm.Channel) {
		return hq, &filterError{"the channel must be one of " + strings.Join(historyChannels, ", ")}
	}
	var err error
	if f.Since, err = parseWhen(fm.Since); err != nil {
		return hq, &filterError{"since: " + err.Error()}
	}
	if f.Until, err = parseWhen(fm.Until); err != nil {
		return hq, &filterError{"until: " + err.Error()}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return hq, &filterError{"since must be before until"}
	}
	digest := strings.ToLower(strings.Join(strings.Fields(fm.Digest), ""))
	if len(digest) > 64 || strings.Trim(digest, "0123456789abcdef") != "" {
		return hq, &filterError{"the digest filter must be hex digits (spaces are ignored), at most 64"}
	}
	f.DigestPrefix = digest
	if s := get("after"); s != "" {
		if f.After, err = strconv.ParseInt(s, 10, 64); err != nil || f.After <= 0 {
			return hq, &filterError{"the page cursor is not valid; start again from the newest page"}
		}
	}
	if s := get("limit"); s != "" {
		if hq.limit, err = strconv.Atoi(s); err != nil || hq.limit < 1 || hq.limit > queue.MaxHistoryLimit {
			return hq, &filterError{fmt.Sprintf("the page size must be between 1 and %d", queue.MaxHistoryLimit)}
		}
		f.Limit = hq.limit
	}
	hq.filter = f
	return hq, nil
}

// whenLayouts are the time forms a filter accepts besides RFC 3339; all
// are read as UTC.
var whenLayouts = []string{"2006-01-02T15:04:05.999999999", "2006-01-02T15:04", "2006-01-02 15:04:05.999999999", "2006-01-02 15:04", "2006-01-02"}

func parseWhen(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	for _, l := range whenLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, errors.New("write a time as 2025-03-01T12:00:00 (UTC), 2025-03-01T12:00:00+02:00 or 2025-03-01")
}

// values returns the filter as a URL query, empty fields left out, so that
// a link reproduces the page. withPage keeps the cursor and the page size.
func (hq historyQuery) values(withPage bool) url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	fm := hq.form
	set("actor", fm.Actor)
	set("tool", fm.Tool)
	set("status", fm.Status)
	set("operator", fm.Operator)
	set("channel", fm.Channel)
	set("since", fm.Since)
	set("until", fm.Until)
	set("digest", fm.Digest)
	set("outcome", fm.Outcome)
	if withPage {
		if hq.filter.After > 0 {
			v.Set("after", strconv.FormatInt(hq.filter.After, 10))
		}
		if hq.limit > 0 {
			v.Set("limit", strconv.Itoa(hq.limit))
		}
	}
	return v
}

func withQuery(path string, v url.Values) string {
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

// list serves GET /history.
func (h *historyPages) list(ec echo.Context) error {
	ctx := ec.Request().Context()
	now := h.c.now()
	h.chain.Request(now)
	hq, perr := parseHistoryQuery(ec.QueryParams())
	hv := templates.HistoryView{
		Page: h.c.page(viewerOf(ec), "History", "history", "", now), Form: hq.form,
		Statuses: historyStatuses, Channels: historyChannels, Outcomes: queue.OutcomeFilters, Chain: chainView(h.chain.Status()),
	}
	if head, _, err := h.c.trail.AuditHead(ctx); err == nil {
		hv.Chain.Head = head
	}
	filters := hq.values(false)
	hv.Filtered = len(filters) > 0
	hv.ExportCallsJSONL = withQuery(historyPath+"/export/calls.jsonl", filters)
	hv.ExportCallsCSV = withQuery(historyPath+"/export/calls.csv", filters)
	hv.ExportAuditJSONL, hv.AuditScope = auditExportLink(hq)
	if perr != nil {
		hv.Error = perr.Error()
		return h.c.render(ec, http.StatusBadRequest, templates.HistoryPage(hv))
	}
	calls, next, err := h.c.history.History(ctx, hq.filter)
	if fe := (*queue.FilterError)(nil); errors.As(err, &fe) {
		hv.Error = fe.Reason
		return h.c.render(ec, http.StatusBadRequest, templates.HistoryPage(hv))
	}
	if err != nil {
		return err
	}
	for _, call := range calls {
		hv.Rows = append(hv.Rows, h.row(call, now))
	}
	page := hq.values(false)
	if hq.limit > 0 {
		page.Set("limit", strconv.Itoa(hq.limit))
	}
	if hq.filter.After > 0 {
		hv.NewestURL = withQuery(historyPath, page)
	}
	if next > 0 {
		page.Set("after", strconv.FormatInt(next, 10))
		hv.OlderURL = withQuery(historyPath, page)
	}
	return h.c.render(ec, http.StatusOK, templates.HistoryPage(hv))
}

// auditExportLink is the audit export for a filter: the trail cannot be
// cut by actor or tool and still verify, so only the time range applies.
func auditExportLink(hq historyQuery) (link, scope string) {
	v := url.Values{}
	if hq.form.Since != "" {
		v.Set("since", hq.form.Since)
	}
	if hq.form.Until != "" {
		v.Set("until", hq.form.Until)
	}
	switch {
	case len(v) == 0:
		scope = "the whole trail"
	case hq.form.Until == "":
		scope = "every entry since " + hq.form.Since
	case hq.form.Since == "":
		scope = "every entry before " + hq.form.Until
	default:
		scope = "every entry from " + hq.form.Since + " until " + hq.form.Until
	}
	if len(v) > 0 && (hq.form.Actor != "" || hq.form.Tool != "" || hq.form.Status != "" || hq.form.Operator != "" ||
		hq.form.Channel != "" || hq.form.Digest != "" || hq.form.Outcome != "") {
		scope += "; the other filters do not apply, so that it verifies"
	} else if len(v) == 0 && len(hq.values(false)) > 0 {
		scope += "; filters other than the time range do not apply, so that it verifies"
	}
	return withQuery(historyPath+"/export/audit.jsonl", v), scope
}

// row is a call's line in the history. It shows no summary of the
// arguments, so of a card's view it takes only the digest check and the
// warnings: a stored copy edited to hide a hashed look-alike character
// still warns, and a record whose envelope or actor, tool or target no
// longer matches its digest is marked, as its card would show STOP,
// rather than listed as if its columns were what was hashed.
func (h *historyPages) row(call *queue.Call, now time.Time) templates.HistoryRow {
	var bound canonical.Object
	env, err := queue.HashedEnvelope(call)
	if err == nil {
		bound = env.Args
	}
	r := templates.HistoryRow{
		ID: call.ID, URL: historyPath + "/calls/" + url.PathEscape(call.ID), CreatedAt: call.CreatedAt,
		Status: string(call.Status), Actor: reveal.Of(call.Actor), Tool: reveal.Of(call.Tool), Target: reveal.Of(call.Target),
		Received: len(call.Approvals), Required: call.ApprovalsRequired, Digest: call.Digest,
		Deceptive: queue.DeceptiveWith(call, bound), Integrity: err != nil, GrantState: call.GrantState(now),
	}
	if call.Outcome != nil {
		r.Outcome = call.Outcome.Status
	}
	if call.Resolution != nil {
		r.Verdict = call.Resolution.Verdict
	}
	for _, a := range call.Approvals {
		d := templates.Decider{By: reveal.Of(a.Operator), Verb: "approved", Channel: a.Channel, At: a.At}
		if a.Passkey != nil {
			name := reveal.Of(a.Passkey.Name)
			d.Passkey = &name
		}
		if a.For != "" {
			behalf := reveal.Of(a.For)
			d.For = &behalf
		}
		r.Deciders = append(r.Deciders, d)
	}
	if call.Denial != nil {
		r.Deciders = append(r.Deciders, templates.Decider{By: reveal.Of(call.Denial.By), Verb: "denied", Channel: call.Denial.Channel, At: call.Denial.At})
	}
	return r
}

// timeline serves GET /history/calls/:id.
func (h *historyPages) timeline(ec echo.Context) error {
	ctx := ec.Request().Context()
	now := h.c.now()
	v := viewerOf(ec)
	call, err := h.c.q.Call(ctx, ec.Param("id"))
	if err != nil {
		return err
	}
	entries, err := h.c.trail.Timeline(ctx, call.ID)
	if err != nil {
		return err
	}
	cv, err := h.c.callView(call, v, now)
	if err != nil {
		return err
	}
	tv := templates.TimelineView{
		Page:    h.c.page(v, "Timeline of "+call.ID, "history", "", now),
		Call:    cv,
		Status:  string(call.Status),
		CallURL: "/calls/" + url.PathEscape(call.ID),
	}
	for _, e := range entries {
		tv.Entries = append(tv.Entries, timelineEntry(e, call))
	}
	tv.Lifecycle = lifecycle(entries, call, now, chainView(h.chain.Status()))
	return h.c.render(ec, http.StatusOK, templates.TimelinePage(tv))
}

// entryTitles name the kinds of entries a call's timeline holds.
var entryTitles = map[string]string{
	audit.KindSubmitted:         "Submitted",
	audit.KindRejected:          "Resubmission refused",
	audit.KindApproved:          "Approved",
	audit.KindDenied:            "Denied",
	audit.KindExpired:           "Expired",
	audit.KindCancelled:         "Cancelled",
	audit.KindRevoked:           "Revoked",
	audit.KindGranted:           "Grant minted",
	audit.KindRedeemed:          "Redeemed",
	audit.KindRedemptionRefused: "Redemption refused",
	audit.KindOutcome:           "Outcome reported",
	audit.KindLeaseExtended:     "Lease extended",
	audit.KindLeaseExpired:      "Lease expired",
	audit.KindResolved:          "Resolved by a person",
}

// details reads entry details: a member's text, integer or value.
type details struct{ v any }

func (d details) get(name string) (any, bool) { return canonical.Lookup(d.v, "/"+name) }

func (d details) str(name string) (string, bool) {
	x, ok := d.get(name)
	s, isStr := x.(string)
	return s, ok && isStr
}

func (d details) num(name string) (int64, bool) {
	x, ok := d.get(name)
	n, isNum := x.(int64)
	return n, ok && isNum
}

// timelineEntry lays out one audit entry. Everything read from it is
// revealed text; the facts name what the entry's kind records, and the
// whole details follow as a tree, so nothing recorded is left out.
func timelineEntry(e audit.Entry, call *queue.Call) templates.TimelineEntry {
	te := templates.TimelineEntry{
		Seq: e.Seq, Kind: e.Kind, Title: entryTitles[e.Kind], RawTime: e.Time,
		Principal: reveal.Of(e.Principal), Channel: e.Channel, Hash: e.Hash,
	}
	if te.Title == "" {
		te.Title = e.Kind
	}
	te.Time, _ = time.Parse(time.RFC3339Nano, e.Time)
	d := details{e.Details}
	text := func(label, name string, mono, agent bool) {
		if s, ok := d.str(name); ok {
			te.Facts = append(te.Facts, templates.Fact{Label: label, Value: reveal.Of(s), Mono: mono, Agent: agent})
		}
	}
	plain := func(label, s string) {
		te.Facts = append(te.Facts, templates.Fact{Label: label, Value: templates.Plain(s)})
	}
	digest := func(label string) {
		s, ok := d.str("digest")
		if !ok {
			return
		}
		te.Facts = append(te.Facts, templates.Fact{Label: label, Value: reveal.Of(s), Mono: true})
		if s != call.Digest {
			plain("Warning", "this digest differs from the call's digest "+call.Digest)
		}
	}
	stamp := func(label, name string) {
		if s, ok := d.str(name); ok {
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				plain(label, t.UTC().Format("2006-01-02 15:04:05 UTC"))
				return
			}
			te.Facts = append(te.Facts, templates.Fact{Label: label, Value: reveal.Of(s), Mono: true})
		}
	}
	unix := func(label, name string) {
		if n, ok := d.num(name); ok {
			plain(label, time.Unix(n, 0).UTC().Format("2006-01-02 15:04:05 UTC"))
		}
	}
	switch e.Kind {
	case audit.KindSubmitted:
		digest("Digest")
		stamp("Decide by", "decide_by")
		if n, ok := d.num("approvals_required"); ok {
			plain("Approvals required", strconv.FormatInt(n, 10))
		}
	case audit.KindApproved:
		r, ok1 := d.num("received")
		q, ok2 := d.num("required")
		if ok1 && ok2 {
			plain("Approvals", strconv.FormatInt(r, 10)+" of "+strconv.FormatInt(q, 10))
		}
		digest("Digest approved")
		if m, _ := d.str("method"); m == "passkey" {
			name, _ := d.str("passkey/name")
			te.Facts = append(te.Facts, templates.Fact{Label: "Approved", Value: reveal.Of("with a passkey (" + name + "), the signature kept as evidence")})
		} else if e.Channel == audit.ChannelWeb {
			plain("Approved", "by click")
		}
	case audit.KindDenied:
		text("Reason", "reason", false, true)
		digest("Digest denied")
	case audit.KindGranted:
		text("Key id", "kid", true, false)
		text("Grant id", "jti", true, false)
		unix("Issued", "iat")
		unix("Expires", "exp")
		digest("Digest")
	case audit.KindRedeemed:
		text("Grant id", "jti", true, false)
		text("Token", "token", true, false)
		stamp("Lease until", "lease_until")
	case audit.KindLeaseExtended:
		stamp("Lease until", "lease_until")
		text("Token", "token", true, false)
	case audit.KindLeaseExpired:
		stamp("Lease ended", "lease_until")
		text("Token", "token", true, false)
	case audit.KindResolved:
		text("Verdict", "verdict", false, false)
		text("Note", "note", false, true)
		text("Evidence", "evidence", true, true)
		text("Outcome it resolves", "outcome", false, false)
	case audit.KindRedemptionRefused:
		text("Reason", "reason", true, false)
		text("Grant id", "jti", true, false)
	case audit.KindOutcome:
		text("Status", "status", false, false)
		text("Detail", "detail", false, true)
		if r, ok := d.str("replaces"); ok {
			plain("Replaces", r+": the report came after the lease ended")
		} else if late, ok := d.get("late"); ok && late == true {
			plain("Late", "the report came after the lease ended")
		}
	case audit.KindExpired:
		stamp("Decide by", "decide_by")
	case audit.KindRejected:
		if codes, ok := d.get("codes"); ok {
			if list, ok := codes.([]any); ok {
				var parts []string
				for _, c := range list {
					if s, ok := c.(string); ok {
						parts = append(parts, s)
					}
				}
				te.Facts = append(te.Facts, templates.Fact{Label: "Codes", Value: reveal.Of(strings.Join(parts, ", ")), Mono: true})
			}
		}
		digest("Digest")
	}
	if checks, ok := d.get("checks"); ok {
		list, _ := checks.([]any)
		for _, c := range list {
			cd := details{c}
			name, _ := cd.str("name")
			state := "not-reached"
			if ok, found := cd.get("ok"); found {
				switch ok {
				case true:
					state = "ok"
				case false:
					state = "failed"
				}
			}
			te.Checks = append(te.Checks, templates.Check{Name: name, State: state})
		}
	}
	if o, isObj := e.Details.(canonical.Object); e.Details != nil && (!isObj || len(o) > 0) {
		tree := treeBuilder{warn: func(string, string, templates.Text) {}}.node(e.Details, "", nil, -1)
		te.Details = &tree
	}
	return te
}

// exportCalls serves the calls matching the filter as JSONL or CSV.
func (h *historyPages) exportCalls(format string) echo.HandlerFunc {
	ctype := map[string]string{"jsonl": "application/x-ndjson; charset=utf-8", "csv": "text/csv; charset=utf-8"}[format]
	return func(ec echo.Context) error {
		hq, err := parseHistoryQuery(ec.QueryParams())
		if err != nil {
			return problem.New(http.StatusBadRequest, "bad_filter", "%s", err.Error())
		}
		f := hq.filter
		f.After, f.Limit, f.At = 0, 0, h.c.now()
		release, err := h.acquireExport(ec)
		if err != nil {
			return err
		}
		defer release()
		w := newAttachment(ec, ctype, "countersign-calls-"+h.c.now().UTC().Format("20060102T150405Z")+"."+format)
		return w.finish(h.c.history.ExportCalls(ec.Request().Context(), f, w, format), h.c.log)
	}
}

// exportAudit serves the audit trail, between since and until when they
// are set, as the JSONL that `console audit verify --file` checks.
func (h *historyPages) exportAudit(ec echo.Context) error {
	hq, err := parseHistoryQuery(ec.QueryParams())
	if err != nil {
		return problem.New(http.StatusBadRequest, "bad_filter", "%s", err.Error())
	}
	release, err := h.acquireExport(ec)
	if err != nil {
		return err
	}
	defer release()
	w := newAttachment(ec, "application/x-ndjson; charset=utf-8", "countersign-audit-"+h.c.now().UTC().Format("20060102T150405Z")+".jsonl")
	_, err = h.c.trail.ExportAudit(ec.Request().Context(), w, audit.ExportOptions{Since: hq.filter.Since, Until: hq.filter.Until, Format: "jsonl",
		Signer: h.c.cfg.AuditSigner})
	return w.finish(err, h.c.log)
}

// acquireExport holds an export's place for the viewer until release.
func (h *historyPages) acquireExport(ec echo.Context) (release func(), err error) {
	release, err = h.exports.take(viewerOf(ec).user.Name)
	switch {
	case errors.Is(err, errOwnerSlotsFull):
		return nil, problem.New(http.StatusTooManyRequests, "exports_busy",
			"one of your exports is still downloading; try again when it has finished")
	case err != nil:
		return nil, problem.New(http.StatusTooManyRequests, "exports_busy",
			"%d exports are already running; try again when one has finished", maxExports)
	}
	return release, nil
}

// attachment writes an export as a download. The headers are sent with
// the first bytes, so an export that fails before writing anything is
// answered with an ordinary error. Each write extends the connection's
// write deadline, so a long export is not cut off by the server's write
// timeout while the client keeps reading.
type attachment struct {
	ec       echo.Context
	rc       *http.ResponseController
	ctype    string
	filename string
	started  bool
}

func newAttachment(ec echo.Context, ctype, filename string) *attachment {
	return &attachment{ec: ec, rc: http.NewResponseController(ec.Response()), ctype: ctype, filename: filename}
}

func (a *attachment) start() {
	if a.started {
		return
	}
	a.started = true
	h := a.ec.Response().Header()
	h.Set("Content-Type", a.ctype)
	h.Set("Content-Disposition", `attachment; filename="`+a.filename+`"`)
	h.Set("Cache-Control", "no-store")
	a.ec.Response().WriteHeader(http.StatusOK)
}

func (a *attachment) Write(p []byte) (int, error) {
	a.start()
	_ = a.rc.SetWriteDeadline(time.Now().Add(exportWriteWindow))
	return a.ec.Response().Write(p)
}

// finish ends the response after the export returned err. A failure after
// bytes were sent aborts the connection, so that the client sees a failed
// download rather than a file that looks complete.
func (a *attachment) finish(err error, log *slog.Logger) error {
	if err == nil {
		a.start()
		_ = a.rc.Flush()
		return nil
	}
	if !a.started {
		if fe := (*queue.FilterError)(nil); errors.As(err, &fe) {
			return problem.New(http.StatusBadRequest, "bad_filter", "%s", fe.Reason)
		}
		return err
	}
	if !errors.Is(err, context.Canceled) {
		log.Error("export failed after it started; the download is cut off",
			slog.String("file", a.filename), slog.Any("error", err))
	}
	panic(http.ErrAbortHandler)
}

// chainView is the chain's status as the history page shows it.
func chainView(s audit.ChainStatus) templates.ChainStatus {
	return templates.ChainStatus{State: s.State, Count: s.Count, CheckpointSeq: s.CheckpointSeq, Checkpoints: s.Checkpoints,
		BadSeq: s.BadSeq, Reason: s.Reason, At: s.At, Took: s.Took, Running: s.Running}
}

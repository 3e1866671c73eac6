package server

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// metrics are the server's Prometheus series, on a registry of its own.
type metrics struct {
	reg           *prometheus.Registry
	proposals     *prometheus.CounterVec
	problems      *prometheus.CounterVec
	decisions     *prometheus.CounterVec
	redemptions   *prometheus.CounterVec
	submitSeconds prometheus.Histogram
	waitSeconds   prometheus.Histogram
	redeemSeconds prometheus.Histogram
	outcomes      *prometheus.CounterVec
	leasesExpired prometheus.Counter
	heartbeats    prometheus.Counter
	resolutions   *prometheus.CounterVec
	responses     *prometheus.CounterVec
	// decisionSeconds and approvals are added for the dashboard: time to
	// decision by tool, approvals by method and whether a person saw them.
	decisionSeconds *prometheus.HistogramVec
	approvals       *prometheus.CounterVec
}

// decisionBuckets span a rule's instant approval to a call left until it
// expires (seconds).
var decisionBuckets = []float64{0.01, 0.1, 1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600}

// maxPendingCounted bounds the pending calls countersign_pending_calls
// reads at a scrape.
const maxPendingCounted = 1000

func newMetrics(q *queue.Service, waits *TokenWaits, live Live, writes WriteCounter) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.proposals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "countersign_proposals_total",
		Help: "Proposals by outcome: created, duplicate, rejected, refused (audience, retry limit, previously denied), error."}, []string{"outcome"})
	m.problems = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "countersign_proposal_problems_total",
		Help: "Problems found in rejected proposals, by problem code."}, []string{"code"})
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "countersign_decisions_total",
		Help: "Operator decisions by kind (approved, granted, denied) and channel."}, []string{"decision", "channel"})
	m.redemptions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "countersign_redemptions_total",
		Help: "Redemptions by result: accepted or the rejection reason."}, []string{"reason"})
	buckets := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	m.submitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "countersign_submit_seconds",
		Help: "Time to handle a proposal.", Buckets: buckets})
	m.waitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "countersign_wait_seconds",
		Help: "How long long-polls waited.", Buckets: buckets})
	m.redeemSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "countersign_redemption_seconds",
		Help: "Time to check and consume a grant.", Buckets: buckets})
	waiters := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "countersign_open_waiters",
		Help: "Agents currently long-polling for a decision."}, func() float64 { return float64(q.Waiting()) })
	waitsRefused := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "countersign_waits_refused_total",
		Help: "Long-polls refused with 429 too_many_waits, and MCP tools/call requests answered too_many_waits without a hold, because their token already held its maximum open."},
		func() float64 { return float64(waits.Refused()) })
	mostWaits := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "countersign_open_waiters_per_token_max",
		Help: "The most long-polls and held MCP tools/call requests any one API token holds open now."}, func() float64 { return float64(waits.Most()) })
	evalErrors := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "countersign_policy_eval_errors_total",
		Help: "Rule evaluations that failed or hit the cost limit; each such call went to people."}, func() float64 {
		if p := q.Policy(); p != nil {
			return float64(p.EvalErrors())
		}
		return 0
	})
	m.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "countersign_outcomes_total",
		Help: "Outcomes reported by executors, by status (succeeded, failed, unknown) and whether they came after the lease ended."},
		[]string{"status", "late"})
	m.leasesExpired = prometheus.NewCounter(prometheus.CounterOpts{Name: "countersign_leases_expired_total",
		Help: "Redeemed calls whose executor neither reported nor sent a heartbeat within outcome_within."})
	m.heartbeats = prometheus.NewCounter(prometheus.CounterOpts{Name: "countersign_lease_heartbeats_total",
		Help: "Heartbeats that extended an executor's lease."})
	m.resolutions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "countersign_resolutions_total",
		Help: "Unknown or expired outcomes resolved by a person, by verdict (executed, not_executed)."}, []string{"verdict"})
	unresolved := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "countersign_unresolved_calls",
		Help: "Redeemed calls whose outcome is unknown or lease_expired and that nobody has resolved (-1 when the count cannot be read)."},
		func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			n, err := q.CountUnresolved(ctx)
			if err != nil {
				return -1
			}
			return float64(n)
		})
	m.responses = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "countersign_http_responses_total",
		Help: "HTTP responses by status: 401, 403, 404, 429 on their own (a run of 401s is someone guessing tokens or passwords), the rest by class (2xx, 3xx, 4xx, 5xx)."},
		[]string{"status"})
	m.decisionSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "countersign_decision_seconds",
		Help:    "Time from a call's submission to its decision, by tool and decision: granted (its approvals complete), denied, expired (undecided at its deadline) or cancelled.",
		Buckets: decisionBuckets}, []string{"tool", "decision"})
	m.approvals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "countersign_approvals_total",
		Help: "Approvals by method (passkey, click, batch, command, policy, allowance, counter) and human: true (a person saw the call, proven), false (a rule or an allowance, automated) or unattested (a person's name, nothing proving what they saw)."},
		[]string{"method", "human"})
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "countersign_pending_calls",
		Help: "Calls waiting for a decision: the queue's depth (at most " + strconv.Itoa(maxPendingCounted) + " are counted; -1 when the count cannot be read)."},
		func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			calls, err := q.PendingCalls(ctx, maxPendingCounted)
			if err != nil {
				return -1
			}
			return float64(len(calls))
		})
	m.reg.MustRegister(m.decisionSeconds, m.approvals, pending)
	m.reg.MustRegister(m.proposals, m.problems, m.decisions, m.redemptions, m.submitSeconds, m.waitSeconds,
		m.redeemSeconds, waiters, evalErrors, waitsRefused, mostWaits,
		m.outcomes, m.leasesExpired, m.heartbeats, m.resolutions, unresolved, m.responses,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if writes != nil {
		if ct, ok := writes.(CommitTimer); ok {
			m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "countersign_store_commit_seconds_total",
				Help: "Time this process's write transactions spent committing, the sync to disk included; ÷ countersign_store_commits_total is the mean commit latency."},
				ct.CommitSeconds))
		}
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "countersign_store_commits_total",
			Help: "Write transactions committed by this process."}, func() float64 {
			c, _ := writes.WriteCounts()
			return float64(c)
		}), prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "countersign_store_writes_total",
			Help: "Writes committed by this process; several share one transaction under load (group commit), so writes ÷ commits is the average group."},
			func() float64 {
				_, w := writes.WriteCounts()
				return float64(w)
			}))
	}
	if st, ok := writes.(StatementCounter); ok {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "countersign_store_statements_total",
			Help: "SQL statements run by this process's database connections, reads and writes, BEGIN and COMMIT included (SQLite)."},
			func() float64 { return float64(st.Statements()) }))
	}
	if fc, ok := writes.(FrameCounter); ok {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "countersign_store_wal_frames_total",
			Help: "Pages this process appended to SQLite's write-ahead log, one frame each: what its commits' syncs write (SQLite)."},
			func() float64 { return float64(fc.WALFrames()) }))
	}
	if live != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "countersign_live_listener_connected",
			Help: "1 while the listener for other replicas' changes is connected to PostgreSQL, else 0."}, func() float64 {
			if live.Connected() {
				return 1
			}
			return 0
		}), prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "countersign_live_listener_reconnects_total",
			Help: "Times the listener for other replicas' changes reconnected and caught up."}, func() float64 {
			return float64(live.Reconnects())
		}))
	}
	return m
}

// WriteCounter counts the store's committed write transactions and the
// writes they held (db.DB, pgstore.DB).
type WriteCounter interface {
	WriteCounts() (commits, writes int64)
}

// CommitTimer is the time the store's commits took (db.DB, pgstore.DB).
type CommitTimer interface {
	CommitSeconds() float64
}

// FrameCounter counts the frames the store's commits appended to the
// write-ahead log (db.DB); the server exports the count when the
// WriteCounter is one.
type FrameCounter interface {
	WALFrames() int64
}

// StatementCounter counts the SQL statements the store has run (db.DB);
// the server exports the count when the WriteCounter is one.
type StatementCounter interface {
	Statements() int64
}

// Live is the state of a replica's listener for the changes other
// replicas commit (pgstore.Listener).
type Live interface {
	Connected() bool
	Reconnects() int64
}

func (m *metrics) handler() echo.HandlerFunc {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return func(c echo.Context) error {
		h.ServeHTTP(c.Response(), c.Request())
		return nil
	}
}

// proposal counts one submission's outcome.
func (m *metrics) proposal(err error, d time.Duration) {
	m.submitSeconds.Observe(d.Seconds())
	var pe *queue.ProposalError
	switch {
	case err == nil:
		return // counted from the submitted event, or as duplicate below
	case errors.As(err, &pe):
		m.proposals.WithLabelValues("rejected").Inc()
		for _, p := range pe.Problems {
			m.problems.WithLabelValues(p.Code).Inc()
		}
	case errors.Is(err, queue.ErrAudienceNotAllow), errors.Is(err, queue.ErrRetryLimit), errors.Is(err, queue.ErrPreviouslyDenied),
		errors.As(err, new(*queue.PolicyDeniedError)), errors.As(err, new(*queue.FrozenError)):
		m.proposals.WithLabelValues("refused").Inc()
		m.problems.WithLabelValues(ErrorOf(err).Code).Inc()
	default:
		m.proposals.WithLabelValues("error").Inc()
	}
}

// observe counts committed changes.
func (m *metrics) observe(ev queue.Event) {
	if ev.Remote {
		return // another replica counts its own
	}
	switch ev.Kind {
	case audit.KindSubmitted:
		m.proposals.WithLabelValues("created").Inc()
	case audit.KindApproved, audit.KindGranted, audit.KindDenied:
		ch := ""
		if ev.Call != nil {
			if ev.Call.Denial != nil {
				ch = ev.Call.Denial.Channel
			} else if n := len(ev.Call.Approvals); n > 0 {
				ch = ev.Call.Approvals[n-1].Channel
			}
		}
		m.decisions.WithLabelValues(ev.Kind, ch).Inc()
		if c := ev.Call; c != nil {
			// Each approval emits approved, or granted when it completes
			// the call; a counter-proposal's acceptance by its agent
			// emits granted after its approvals, and adds none.
			if n := len(c.Approvals); n > 0 && ev.Kind != audit.KindDenied {
				a := c.Approvals[n-1]
				if ev.Kind == audit.KindApproved || c.AcceptedAt.IsZero() || !a.At.Before(c.AcceptedAt) {
					m.approvals.WithLabelValues(a.Method, a.Human()).Inc()
				}
			}
			if ev.Kind == audit.KindGranted || ev.Kind == audit.KindDenied {
				m.decisionSeconds.WithLabelValues(c.Tool, ev.Kind).Observe(time.Since(c.CreatedAt).Seconds())
			}
		}
	case audit.KindRedeemed:
		m.redemptions.WithLabelValues("accepted").Inc()
	case audit.KindExpired, audit.KindCancelled:
		if c := ev.Call; c != nil {
			m.decisionSeconds.WithLabelValues(c.Tool, ev.Kind).Observe(time.Since(c.CreatedAt).Seconds())
		}
	case audit.KindRedemptionRefused:
		m.redemptions.WithLabelValues(ev.Reason).Inc()
	case audit.KindOutcome:
		if c := ev.Call; c != nil && c.Outcome != nil {
			late := "false"
			if !c.LeaseUntil.IsZero() && !c.Outcome.At.Before(c.LeaseUntil) {
				late = "true"
			}
			m.outcomes.WithLabelValues(c.Outcome.Status, late).Inc()
		}
	case audit.KindLeaseExpired:
		m.leasesExpired.Inc()
	case audit.KindLeaseExtended:
		m.heartbeats.Inc()
	case audit.KindResolved:
		if c := ev.Call; c != nil && c.Resolution != nil {
			m.resolutions.WithLabelValues(c.Resolution.Verdict).Inc()
		}
	}
}

// statusLabel is the status label of countersign_http_responses_total.
func statusLabel(status int) string {
	switch status {
	case 401, 403, 404, 429:
		return strconv.Itoa(status)
	}
	return strconv.Itoa(status/100) + "xx"
}

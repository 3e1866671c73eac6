package notify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DispatcherConfig holds a dispatcher's collaborators.
type DispatcherConfig struct {
	Outbox   Outbox
	Channels map[string]Channel
	// Timeouts bounds each channel's attempts (DefaultTimeout when absent).
	Timeouts map[string]time.Duration
	Retry    RetryPolicy
	Lease    time.Duration
	Keep     time.Duration
	// Owner names this dispatcher in leases; default host, pid and a
	// random suffix.
	Owner string
	// Workers is how many rows are sent at once (default 4); Batch how
	// many are claimed at a time (default 32).
	Workers int
	Batch   int
	// IdleWake bounds a sleep with nothing due, so rows written by another
	// process on the same database are found (default 1 min). Rows written
	// by this process wake the dispatcher at once through Kick.
	IdleWake time.Duration
	Now      func() time.Time
	// Names returns, per delivery, how the people an event names are shown
	// to people (account.Service.PublicNames); nil hides single-sign-on
	// principals (HidePrincipals). The dispatcher sets each by_name field
	// with it before sending, so the webhook body carries them beside the
	// identifiers and Slack, email and push name people by them.
	Names func(ctx context.Context) func(string) string
	// Jitter returns a number in [0, 1); default math/rand.
	Jitter   func() float64
	Logger   *slog.Logger
	Registry prometheus.Registerer
	// Tracer makes a span of each attempt (internal/tracing), a child of
	// the write that enqueued the notification when it is known; nil makes
	// none.
	Tracer SendTracer
}

// SendTracer makes the span of one attempt to send a notification;
// StartSend's function ends it with the attempt's error.
type SendTracer interface {
	StartSend(ctx context.Context, eventID, channel, kind string) (context.Context, func(error))
}

// Dispatcher delivers outbox rows after commit: it claims due rows, sends
// each on its channel, and records the result, retrying failures with
// exponential backoff and jitter until the row is delivered or its give-up
// time has passed. It sleeps until the next row is due, or until Kick.
type Dispatcher struct {
	cfg     DispatcherConfig
	log     *slog.Logger
	kick    chan struct{}
	metrics *dispatchMetrics
}

// NewDispatcher returns a dispatcher; Run starts it.
func NewDispatcher(cfg DispatcherConfig) *Dispatcher {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	clock := cfg.Now
	cfg.Now = func() time.Time { return clock().UTC().Truncate(time.Millisecond) }
	if cfg.Jitter == nil {
		cfg.Jitter = mrand.Float64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Retry.First <= 0 {
		cfg.Retry.First = DefaultFirstRetry
	}
	if cfg.Retry.MaxInterval < cfg.Retry.First {
		cfg.Retry.MaxInterval = max(DefaultMaxInterval, cfg.Retry.First)
	}
	if cfg.Retry.GiveUpAfter <= 0 {
		cfg.Retry.GiveUpAfter = DefaultGiveUpAfter
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Keep <= 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 32
	}
	if cfg.IdleWake <= 0 {
		cfg.IdleWake = time.Minute
	}
	if cfg.Owner == "" {
		cfg.Owner = defaultOwner()
	}
	return &Dispatcher{cfg: cfg, log: cfg.Logger, kick: make(chan struct{}, 1), metrics: newDispatchMetrics(cfg.Registry)}
}

func defaultOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Collectors are the dispatcher's Prometheus series, for a registry of
// the caller's when DispatcherConfig.Registry was nil.
func (d *Dispatcher) Collectors() []prometheus.Collector {
	return []prometheus.Collector{d.metrics.results, d.metrics.latency}
}

// Kick wakes the dispatcher: rows were just committed. It never blocks.
func (d *Dispatcher) Kick() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends. Attempts in flight when ctx ends are
// recorded as failed and due at once, so a restart sends them without
// waiting for their lease to run out.
func (d *Dispatcher) Run(ctx context.Context) {
	nextPrune := time.Time{}
	failures := 0
	for {
		now := d.cfg.Now()
		if !now.Before(nextPrune) {
			if n, err := d.cfg.Outbox.Prune(ctx, now.Add(-d.cfg.Keep)); err != nil && ctx.Err() == nil {
				d.log.Warn("prune outbox", slog.Any("error", err))
			} else if n > 0 {
				d.log.Debug("pruned outbox", slog.Int("rows", n))
			}
			nextPrune = now.Add(time.Hour)
		}
		n, err := d.Dispatch(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := d.cfg.IdleWake
		switch {
		case err != nil:
			failures++
			wait = min(time.Duration(failures)*time.Second, d.cfg.IdleWake)
			d.log.Error("dispatch notifications", slog.Any("error", err))
		case n >= d.cfg.Batch:
			failures = 0
			continue // more may be due
		default:
			failures = 0
			next, ok, err := d.cfg.Outbox.NextDue(ctx)
			if err != nil {
				d.log.Error("next due notification", slog.Any("error", err))
				wait = time.Second
			} else if ok {
				wait = min(max(next.Sub(d.cfg.Now()), 0)+5*time.Millisecond, d.cfg.IdleWake)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-d.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// Dispatch claims one batch of due rows, sends them and records the
// results; it returns how many rows it claimed.
func (d *Dispatcher) Dispatch(ctx context.Context) (int, error) {
	now := d.cfg.Now()
	claimed, skipped, err := d.cfg.Outbox.Claim(ctx, d.cfg.Owner, now, d.cfg.Lease, d.cfg.Batch)
	if err != nil {
		return 0, fmt.Errorf("notify: claim: %w", err)
	}
	for _, s := range skipped {
		d.metrics.result(s.Channel, "skipped")
	}
	sem := make(chan struct{}, d.cfg.Workers)
	var wg sync.WaitGroup
	for _, row := range claimed {
		wg.Add(1)
		sem <- struct{}{}
		go func(row Delivery) {
			defer wg.Done()
			defer func() { <-sem }()
			d.deliver(ctx, row)
		}(row)
	}
	wg.Wait()
	return len(claimed), nil
}

func (d *Dispatcher) deliver(ctx context.Context, row Delivery) {
	attempt := row.Attempts + 1
	res := Result{Seq: row.Seq}
	receipt, err := d.send(ctx, row, attempt)
	res.At = d.cfg.Now()
	switch {
	case err == nil:
		res.Delivered, res.Receipt = true, receipt
	case ctx.Err() != nil:
		// Shutting down: due again at once, for whoever runs next.
		res.Error, res.RetryAt = "interrupted by shutdown: "+printable(errorText(err)), res.At
	default:
		res.Error = printable(errorText(err))
		res.Receipt = sentOf(err)
		giveUp := row.ScheduledAt.Add(d.cfg.Retry.GiveUpAfter)
		if isPermanent(err) || !res.At.Before(giveUp) {
			res.Dead = true
		} else {
			wait := max(d.Backoff(attempt), min(retryAfterOf(err), d.cfg.Retry.MaxInterval))
			// Stores keep milliseconds; round up so no attempt comes early.
			res.RetryAt = res.At.Add(wait).Add(time.Millisecond - 1).Truncate(time.Millisecond)
			if res.RetryAt.After(giveUp) {
				res.RetryAt = giveUp // one last attempt at the give-up time
			}
		}
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if ferr := d.cfg.Outbox.Finish(fctx, d.cfg.Owner, res); ferr != nil {
		if errors.Is(ferr, ErrLeaseLost) {
			d.log.Warn("notification lease lost: another dispatcher took the row over", slog.Int64("seq", row.Seq),
				slog.String("channel", row.Channel))
			return
		}
		d.log.Error("record notification attempt", slog.Int64("seq", row.Seq), slog.Any("error", ferr))
		return
	}
	switch {
	case res.Delivered:
		d.metrics.result(row.Channel, "delivered")
		d.metrics.latency.WithLabelValues(row.Channel).Observe(res.At.Sub(row.DueAt).Seconds())
	case res.Dead:
		d.metrics.result(row.Channel, "dead")
		d.log.Warn("notification dead", slog.Int64("seq", row.Seq), slog.String("channel", row.Channel),
			slog.String("event", row.EventID), slog.String("kind", row.Kind), slog.Int("attempts", attempt),
			slog.String("error", res.Error))
	default:
		d.metrics.result(row.Channel, "failed")
		d.log.Info("notification failed, will retry", slog.Int64("seq", row.Seq), slog.String("channel", row.Channel),
			slog.String("event", row.EventID), slog.Int("attempt", attempt), slog.Time("retry_at", res.RetryAt),
			slog.String("error", res.Error))
	}
}

func (d *Dispatcher) send(ctx context.Context, row Delivery, attempt int) (receipt string, err error) {
	if d.cfg.Tracer != nil {
		var end func(error)
		ctx, end = d.cfg.Tracer.StartSend(ctx, row.EventID, row.Channel, row.Kind)
		defer func() { end(err) }()
	}
	ch, ok := d.cfg.Channels[row.Channel]
	if !ok {
		return "", Permanent(fmt.Errorf("no channel named %q is configured (any more)", row.Channel))
	}
	ev, err := ParseEvent(row.Body)
	if err != nil {
		return "", Permanent(err)
	}
	m := Message{Event: ev, Body: row.Body, Attempt: attempt}
	if row.State == StatePending && row.Attempts > 0 {
		m.Sent = row.Receipt
	}
	names := HidePrincipals
	if d.cfg.Names != nil {
		names = d.cfg.Names(ctx)
	}
	if m.Event.Named(names) {
		// The stored body with the by_name fields added, as the webhook
		// posts and signs it.
		if m.Body, err = json.Marshal(m.Event); err != nil {
			return "", Permanent(fmt.Errorf("encode the event: %w", err))
		}
	}
	if ru, ok := ch.(receiptUser); ok && ru.usesReceipt() && row.CallID != "" {
		if m.Receipt, err = d.cfg.Outbox.Receipt(ctx, row.Channel, row.CallID); err != nil {
			return "", fmt.Errorf("read the call's earlier message: %w", err)
		}
	}
	timeout := d.cfg.Timeouts[row.Channel]
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return ch.Send(sctx, m)
}

// Backoff is the wait after the attempt-th failed attempt: First doubled
// attempt-1 times, at most MaxInterval, jittered to between half and all
// of that.
func (d *Dispatcher) Backoff(attempt int) time.Duration {
	r := d.cfg.Retry
	base := float64(r.First) * math.Pow(2, float64(max(attempt-1, 0)))
	base = min(base, float64(r.MaxInterval))
	return time.Duration(base/2 + d.cfg.Jitter()*base/2)
}

// Deliveries lists outbox rows for the admin page.
func (d *Dispatcher) Deliveries(ctx context.Context, q Query) ([]Delivery, error) {
	return d.cfg.Outbox.Deliveries(ctx, q)
}

// Retry makes a row due now, audited as done by the admin by, and wakes
// the dispatcher.
func (d *Dispatcher) Retry(ctx context.Context, seq int64, by string) error {
	if err := d.cfg.Outbox.Retry(ctx, seq, d.cfg.Now(), by); err != nil {
		return err
	}
	d.Kick()
	return nil
}

// Channels lists the configured channel names.
func (d *Dispatcher) Channels() []string {
	out := make([]string, 0, len(d.cfg.Channels))
	for n := range d.cfg.Channels {
		out = append(out, n)
	}
	return out
}

type dispatchMetrics struct {
	results *prometheus.CounterVec
	latency *prometheus.HistogramVec
}

func newDispatchMetrics(reg prometheus.Registerer) *dispatchMetrics {
	m := &dispatchMetrics{
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "countersign_notifications_total",
			Help: "Notification delivery attempts by channel and result: delivered, failed (retried later), dead, skipped (the call was decided before a reminder or escalation came due)."},
			[]string{"channel", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "countersign_notification_delay_seconds",
			Help:    "Time from a notification's due time to its delivery, retries included.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 21600, 86400}},
			[]string{"channel"}),
	}
	if reg != nil {
		reg.MustRegister(m.results, m.latency)
	}
	return m
}

func (m *dispatchMetrics) result(channel, result string) {
	m.results.WithLabelValues(channel, result).Inc()
}

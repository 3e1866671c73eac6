package console

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/web/static"
	"github.com/countersign/countersign/web/templates"
)

// Notifications is what the console serves about notifications: the
// admin's deliveries page and, with a push channel, browsers' Web Push
// subscriptions.
type Notifications struct {
	// Deliveries lists and retries outbox rows (the dispatcher).
	Deliveries Deliveries
	// Channels describes the configured channels, for the page.
	Channels []NotificationChannel
	// Push, when set, lets operators subscribe browsers; Subscriptions
	// keeps what they subscribe.
	Push          Push
	Subscriptions PushSubscriptions
}

// NotificationChannel is one configured channel as the page lists it.
type NotificationChannel struct {
	Name, Type, Detail string
}

// Deliveries is the outbox as the admin sees it.
type Deliveries interface {
	Deliveries(ctx context.Context, q notify.Query) ([]notify.Delivery, error)
	// Retry makes a delivery due now, audited as done by the admin by.
	Retry(ctx context.Context, seq int64, by string) error
}

// Push is the Web Push channel: its key, and its allowlist of push
// services.
type Push interface {
	PublicKey() string
	Allowed(endpoint string) error
}

// PushSubscriptions stores browsers' subscriptions, bounded per account
// and in all, each endpoint bound to the account that registered it; adding
// and removing are audited in the transaction of the change.
type PushSubscriptions interface {
	SavePushSubscription(ctx context.Context, s notify.Subscription) error
	DeleteAccountPushSubscription(ctx context.Context, account, endpoint string, now time.Time) error
}

const deliveriesPerPage = 100

func (c *Console) routesNotify(e *echo.Echo) {
	e.GET("/admin/deliveries", c.deliveriesPage, c.requireSession, c.requireAdmin)
	e.POST("/admin/deliveries/:seq/retry", c.retryDelivery, c.requireSession, c.requireCSRF, c.requireAdmin)
	// The service worker is served from the root so that its scope is the
	// whole console.
	e.GET("/sw.js", echo.WrapHandler(static.Plain("sw.js")))
	e.GET("/push/key", c.pushKey, c.requireSession, c.requireDecider)
	e.POST("/push/subscribe", c.pushSubscribe, c.requireSession, c.requireCSRF, c.requireDecider)
	e.POST("/push/unsubscribe", c.pushUnsubscribe, c.requireSession, c.requireCSRF, c.requireDecider)
}

func (c *Console) deliveriesPage(ec echo.Context) error {
	return c.renderDeliveries(ec, http.StatusOK, ec.QueryParam("done"), "")
}

func (c *Console) renderDeliveries(ec echo.Context, status int, msg, errMsg string) error {
	v := viewerOf(ec)
	dv := templates.DeliveriesView{Page: c.page(v, "Notification deliveries", "admin", "", c.now()),
		Message: msg, Error: errMsg,
		States: []string{string(notify.StatePending), string(notify.StateDelivered), string(notify.StateDead), string(notify.StateSkipped)}}
	n := c.cfg.Notifications
	if n == nil || n.Deliveries == nil {
		return c.render(ec, status, templates.DeliveriesPage(dv))
	}
	dv.Configured = true
	for _, ch := range n.Channels {
		dv.Channels = append(dv.Channels, templates.ChannelRow{Name: ch.Name, Type: ch.Type, Detail: ch.Detail})
	}
	q := notify.Query{Channel: ec.QueryParam("channel"), State: notify.State(ec.QueryParam("state")), Limit: deliveriesPerPage}
	dv.Channel, dv.State = q.Channel, string(q.State)
	if b := ec.QueryParam("before"); b != "" {
		before, err := strconv.ParseInt(b, 10, 64)
		if err != nil || before <= 0 {
			return problem.New(http.StatusBadRequest, "bad_request", "before must be a row number")
		}
		q.Before = before
	}
	rows, err := n.Deliveries.Deliveries(ec.Request().Context(), q)
	if err != nil {
		return err
	}
	now := c.now()
	for _, r := range rows {
		row := templates.DeliveryRow{Seq: r.Seq, Kind: r.Kind, Channel: r.Channel, CallID: r.CallID, State: string(r.State),
			InFlight: r.Leased(now), Attempts: r.Attempts, LastError: r.LastError, At: r.At, DueAt: r.DueAt,
			LastAttempt: r.LastAttemptAt, Done: r.DeliveredAt}
		row.CanRetry = r.State == notify.StateDead || (r.State == notify.StatePending && !row.InFlight && r.Attempts > 0)
		dv.Rows = append(dv.Rows, row)
	}
	if len(rows) == deliveriesPerPage {
		older := url.Values{"before": {strconv.FormatInt(rows[len(rows)-1].Seq, 10)}}
		if q.Channel != "" {
			older.Set("channel", q.Channel)
		}
		if q.State != "" {
			older.Set("state", string(q.State))
		}
		dv.Older = older.Encode()
	}
	return c.render(ec, status, templates.DeliveriesPage(dv))
}

func (c *Console) retryDelivery(ec echo.Context) error {
	n := c.cfg.Notifications
	if n == nil || n.Deliveries == nil {
		return c.renderDeliveries(ec, http.StatusNotFound, "", "no notification channel is configured")
	}
	seq, err := strconv.ParseInt(ec.Param("seq"), 10, 64)
	if err != nil {
		return c.renderDeliveries(ec, http.StatusBadRequest, "", "no such delivery")
	}
	err = n.Deliveries.Retry(ec.Request().Context(), seq, viewerOf(ec).user.Name)
	switch {
	case errors.Is(err, notify.ErrNoDelivery):
		return c.renderDeliveries(ec, http.StatusNotFound, "", "no delivery #"+ec.Param("seq"))
	case errors.Is(err, notify.ErrNotRetryable):
		return c.renderDeliveries(ec, http.StatusConflict, "", "delivery #"+ec.Param("seq")+" was delivered, skipped or is being sent right now")
	case err != nil:
		return err
	}
	c.log.Info("notification retried by an admin", "seq", seq, "admin", viewerOf(ec).user.Name)
	// Back to the list with GET, so a reload does not retry again.
	return ec.Redirect(http.StatusSeeOther, "/admin/deliveries?done="+url.QueryEscape("Delivery #"+ec.Param("seq")+" is due again now."))
}

func (c *Console) pushOf() (Push, PushSubscriptions, bool) {
	n := c.cfg.Notifications
	if n == nil || n.Push == nil || n.Subscriptions == nil {
		return nil, nil, false
	}
	return n.Push, n.Subscriptions, true
}

// pushKey tells the page whether Web Push is on, and with which key to
// subscribe.
func (c *Console) pushKey(ec echo.Context) error {
	p, _, ok := c.pushOf()
	if !ok {
		return problem.New(http.StatusNotFound, "not_found", "Web Push is not configured on this console")
	}
	ec.Response().Header().Set("Cache-Control", "no-store")
	return ec.JSON(http.StatusOK, map[string]string{"key": p.PublicKey()})
}

// pushSubscribe stores the browser's subscription for the operator. The
// endpoint must be an https address of a push service on the allowlist:
// the console never posts to an address a subscriber chose.
func (c *Console) pushSubscribe(ec echo.Context) error {
	p, subs, ok := c.pushOf()
	if !ok {
		return problem.New(http.StatusNotFound, "not_found", "Web Push is not configured on this console")
	}
	form := ec.Request().PostForm
	s := notify.Subscription{Endpoint: form.Get("endpoint"), P256dh: form.Get("p256dh"), Auth: form.Get("auth"),
		Account: viewerOf(ec).user.Name, CreatedAt: c.now()}
	if len(s.Endpoint) > 2048 {
		return problem.New(http.StatusBadRequest, "bad_request", "the push endpoint is longer than 2048 bytes")
	}
	if err := p.Allowed(s.Endpoint); err != nil {
		return problem.New(http.StatusBadRequest, "push_service_not_allowed", "%s; an admin can add the service to the push channel's allow list", err)
	}
	if !keyOfLength(s.P256dh, 65) || !keyOfLength(s.Auth, 16) {
		return problem.New(http.StatusBadRequest, "bad_request", "p256dh must be a 65-byte P-256 key and auth a 16-byte secret, base64url")
	}
	err := subs.SavePushSubscription(ec.Request().Context(), s)
	switch {
	case errors.Is(err, notify.ErrTooManyPushSubscriptions):
		return problem.New(http.StatusConflict, "too_many_push_subscriptions",
			"this account already has %d browsers subscribed, the most it may have; remove an old device first: turn notifications off in a browser you no longer use (a subscription its push service reports gone is removed by itself)",
			notify.MaxPushSubscriptionsPerAccount)
	case errors.Is(err, notify.ErrPushSubscriptionsFull):
		return problem.New(http.StatusServiceUnavailable, "push_subscriptions_full",
			"the console keeps at most %d push subscriptions and has no room for another; ask an admin", notify.MaxPushSubscriptions)
	case errors.Is(err, notify.ErrPushEndpointTaken):
		return problem.New(http.StatusConflict, "push_endpoint_taken",
			"this browser's push subscription is registered to another account; sign that account out of notifications in this browser (or let the browser renew its subscription) and subscribe again")
	case err != nil:
		return err
	}
	return ec.JSON(http.StatusOK, map[string]string{"status": "subscribed"})
}

func (c *Console) pushUnsubscribe(ec echo.Context) error {
	_, subs, ok := c.pushOf()
	if !ok {
		return problem.New(http.StatusNotFound, "not_found", "Web Push is not configured on this console")
	}
	if err := subs.DeleteAccountPushSubscription(ec.Request().Context(), viewerOf(ec).user.Name, ec.Request().PostForm.Get("endpoint"), c.now()); err != nil {
		return err
	}
	return ec.JSON(http.StatusOK, map[string]string{"status": "unsubscribed"})
}

func keyOfLength(s string, n int) bool {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	return err == nil && len(b) == n
}

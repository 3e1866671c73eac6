package console

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/web/templates"
)

// maxClientMessage bounds what a page may send on its socket. Pages send
// nothing meaningful; anything larger closes the socket.
const maxClientMessage = 4 << 10

// serveWS upgrades an authenticated, same-origin request to the page's
// socket. The session was checked by requireSession before this runs; the
// Origin is checked here, before the upgrade.
func (c *Console) serveWS(ec echo.Context) error {
	r := ec.Request()
	v := viewerOf(ec)
	origin := r.Header.Get("Origin")
	if origin == "" || !c.allowedOrigin(r, origin) {
		return problem.New(http.StatusForbidden, "forbidden", "refused: the socket must be opened by the console's own pages")
	}
	if !websocket.IsWebSocketUpgrade(r) {
		return problem.New(http.StatusBadRequest, "bad_request", "this is the console's WebSocket endpoint")
	}
	callID, view := ec.QueryParam("call"), ec.QueryParam("view")
	if view != "" && (view != viewUnresolved || callID != "") {
		return problem.New(http.StatusBadRequest, "bad_request", "unknown view")
	}
	if callID != "" {
		if _, err := c.q.Call(r.Context(), callID); err != nil {
			return err
		}
	}
	release, err := c.sockets.take(v.user.Name)
	switch {
	case errors.Is(err, errOwnerSlotsFull):
		return problem.New(http.StatusTooManyRequests, "too_many_sockets",
			"this account has %d console pages open with live updates; close some tabs, then reload this page", c.cfg.MaxSocketsPerAccount)
	case err != nil:
		return problem.New(http.StatusServiceUnavailable, "unavailable",
			"the console has as many pages open with live updates as it serves; reload this page in a minute")
	}
	up := websocket.Upgrader{
		ReadBufferSize: 1024, WriteBufferSize: 8192, HandshakeTimeout: 10 * time.Second,
		CheckOrigin: func(r *http.Request) bool { return c.allowedOrigin(r, r.Header.Get("Origin")) },
	}
	c.connMu.Lock()
	if c.closing {
		c.connMu.Unlock()
		release()
		return problem.New(http.StatusServiceUnavailable, "unavailable", "the console is restarting; retry in a few seconds")
	}
	c.wg.Add(2)
	c.connMu.Unlock()
	conn, err := up.Upgrade(ec.Response(), r, nil)
	if err != nil {
		c.wg.Add(-2)
		release()
		return nil // the upgrader has answered
	}
	cl := &client{conn: conn, send: make(chan []byte, c.cfg.SendBuffer), full: make(chan struct{}, 1), viewer: v, callID: callID, view: view,
		release: release}
	if callID == "" && view == "" {
		cl.queue = parseQueueQuery(ec.QueryParams())
	}
	if !c.hub.add(cl) {
		conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseServiceRestart, "restarting"),
			time.Now().Add(time.Second))
		conn.Close()
		c.wg.Add(-2)
		release()
		return nil
	}
	// The snapshot is read after the client is registered, so no change
	// committed in between is missed: it is either in the snapshot or
	// queued behind it (and the fragments are idempotent).
	first, err := c.snapshot(cl)
	if err != nil {
		c.log.Warn("console: socket snapshot", "error", err)
		first = nil
	}
	go c.writePump(cl, first)
	go c.readPump(cl)
	return nil
}

// snapshot renders the first message of a socket: what needs people
// (counted again if anything changed since the page was read), then the
// whole queue, or the call's status.
func (c *Console) snapshot(cl *client) ([]byte, error) {
	counts := *c.needsOf(cl.viewer, true)
	needs, err := renderBytes(templates.NeedsNav(counts, true))
	if err != nil {
		return nil, err
	}
	c.hub.sentNeeds(cl, counts)
	page, err := c.snapshotPage(cl)
	if err != nil {
		return nil, err
	}
	return append(needs, page...), nil
}

// snapshotPage renders the page's part of a socket's first message.
func (c *Console) snapshotPage(cl *client) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	now := c.now()
	if cl.view == viewUnresolved {
		uv, err := c.unresolvedView(ctx, cl.viewer, now)
		if err != nil {
			return nil, err
		}
		return renderBytes(templates.UnresolvedSync(uv))
	}
	if cl.callID != "" {
		call, err := c.q.Call(ctx, cl.callID)
		if err != nil {
			return nil, err
		}
		return renderBytes(templates.StatusPush(c.statusView(call, cl.viewer, now)))
	}
	qv, err := c.queueView(ctx, cl.viewer, now, cl.queue)
	if err != nil {
		return nil, err
	}
	return renderBytes(templates.QueueSync(qv))
}

// writePump is the only goroutine that writes to the connection: queued
// fragments, pings, and the close frame when the hub closes the channel.
func (c *Console) writePump(cl *client, first []byte) {
	defer c.wg.Done()
	defer cl.conn.Close()
	ping := time.NewTicker(c.cfg.PingInterval)
	defer ping.Stop()
	write := func(msg []byte) error {
		if err := cl.conn.SetWriteDeadline(time.Now().Add(c.cfg.WriteTimeout)); err != nil {
			return err
		}
		return cl.conn.WriteMessage(websocket.TextMessage, msg)
	}
	closeFrame := func() {
		code, text := cl.closeCode, cl.closeText
		if code == 0 {
			code = websocket.CloseNormalClosure
		}
		cl.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text),
			time.Now().Add(c.cfg.WriteTimeout))
	}
	if first != nil {
		if err := write(first); err != nil {
			c.hub.remove(cl)
			return
		}
	}
	var last time.Time // when the last message was written
	var buf []byte     // the last message's bytes, reused for the next
	for {
		select {
		case msg, ok := <-cl.send:
			if !ok {
				closeFrame()
				return
			}
			var hold time.Duration
			if time.Since(last) < busyWithin {
				hold = coalesceWindow
			}
			var closed bool
			var err error
			buf, closed, err = c.writeBatch(cl, buf, msg, hold)
			last = time.Now()
			if err != nil {
				c.hub.remove(cl)
				return
			}
			if closed {
				closeFrame()
				return
			}
		case <-ping.C:
			if err := cl.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.cfg.WriteTimeout)); err != nil {
				c.hub.remove(cl)
				return
			}
		}
	}
}

// maxBatch bounds how many queued fragments are joined into one message.
const maxBatch = 64

// A socket written to less than busyWithin ago holds a fragment for up to
// coalesceWindow, for the ones that follow it. An idle socket is written
// to at once; a busy one (many changes per second, each otherwise a write
// system call per socket) sends at most one message per window.
const (
	coalesceWindow = 5 * time.Millisecond
	busyWithin     = 20 * time.Millisecond
)

// writeBatch writes msg, and the fragments that follow it within the
// window (none when hold is zero), as one WebSocket message: one frame
// and one write instead of one per fragment. Each fragment is a set of
// top-level out-of-band elements, and the page applies the elements of a
// message in order, so joining them changes nothing on the page. closed
// reports that the hub closed the channel while it was being drained.
//
// A hold sleeps first and then takes everything queued, rather than
// receiving each fragment as it comes: on a busy console every change goes
// to every open page, and waking each page's pump for every fragment cost
// more than the write the window saves. The hub signals cl.full when the
// channel is half full, which ends the hold early, so a burst is written
// before it could overflow the channel (a full channel drops the socket).
//
// The message is joined in buf, which is returned for the next message:
// WriteMessage keeps nothing of what it is given once it returns (it
// copies the start into the connection's own buffer and writes the rest
// before returning), and only this goroutine writes. A busy socket does
// not grow a new buffer fragment by fragment for every message.
func (c *Console) writeBatch(cl *client, buf, msg []byte, hold time.Duration) (_ []byte, closed bool, err error) {
	if hold > 0 {
		cl.wait(hold)
	}
	batch := append(buf[:0], msg...)
drain:
	for n := 1; n < maxBatch; n++ {
		select {
		case more, ok := <-cl.send:
			if !ok {
				closed = true
				break drain
			}
			batch = append(batch, more...)
		default:
			break drain
		}
	}
	if cap(batch) > maxReusedBatch {
		buf = nil
	} else {
		buf = batch[:0]
	}
	if err := cl.conn.SetWriteDeadline(time.Now().Add(c.cfg.WriteTimeout)); err != nil {
		return buf, false, err
	}
	return buf, closed, cl.conn.WriteMessage(websocket.TextMessage, batch)
}

// holdStarted, set only by tests, is called when a write pump's hold has
// begun.
var holdStarted func()

// wait returns after hold, or as soon as cl.send is half full. Only the
// write pump calls it; its timer is made once per socket.
func (cl *client) wait(hold time.Duration) {
	select {
	case <-cl.full: // signalled for fragments already taken
	default:
	}
	if len(cl.send) >= cap(cl.send)/2 {
		return // the hub signalled before the drain above, or will not again
	}
	if cl.hold == nil {
		cl.hold = time.NewTimer(hold)
	} else {
		cl.hold.Reset(hold)
	}
	if holdStarted != nil {
		holdStarted()
	}
	select {
	case <-cl.hold.C:
	case <-cl.full:
		cl.hold.Stop()
	}
}

// maxReusedBatch bounds the buffer a socket keeps between messages.
const maxReusedBatch = 256 << 10

// readPump is the only goroutine that reads: it enforces the read limit
// and the pong deadline, and discards what pages send.
func (c *Console) readPump(cl *client) {
	defer c.wg.Done()
	defer cl.release()
	defer c.hub.remove(cl)
	conn := cl.conn
	wait := 2 * c.cfg.PingInterval
	conn.SetReadLimit(maxClientMessage)
	conn.SetReadDeadline(time.Now().Add(wait))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(wait)) })
	for {
		if _, _, err := conn.ReadMessage(); err != nil {
			return
		}
	}
}

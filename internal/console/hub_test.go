package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gorilla/websocket"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/queue"
)

func TestWSUpgradeRefusals(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	anon := e.browser()
	b := e.browser()
	b.login("olivia", rolePassword)
	host := strings.TrimPrefix(e.url, "http://")
	port := host[strings.LastIndex(host, ":")+1:]
	tests := []struct {
		name   string
		b      *consoleBrowser
		path   string
		origin string
		want   int
	}{
		{"unauthenticated", anon, "/ws", e.url, http.StatusUnauthorized},
		{"missing origin", b, "/ws", "", http.StatusForbidden},
		{"cross origin", b, "/ws", "http://evil.example", http.StatusForbidden},
		{"another port", b, "/ws", "http://127.0.0.1:1", http.StatusForbidden},
		{"another scheme", b, "/ws", "https://" + host, http.StatusForbidden},
		{"localhost alias", b, "/ws", "http://localhost:" + port, http.StatusForbidden},
		{"null origin", b, "/ws", "null", http.StatusForbidden},
		{"unknown call", b, "/ws?call=call_nope", e.url, http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, resp, err := tt.b.dial(tt.path, tt.origin)
			if err == nil {
				conn.Close()
				t.Fatal("the upgrade succeeded")
			}
			if resp == nil || resp.StatusCode != tt.want {
				t.Errorf("status = %v, want %d (%v)", resp, tt.want, err)
			}
		})
	}
	if n := e.c.hub.clientCount(); n != 0 {
		t.Errorf("registered sockets after refusals = %d", n)
	}
	// A plain GET without the upgrade is refused too.
	req, _ := http.NewRequest("GET", e.url+"/ws", nil)
	req.Header.Set("Origin", e.url)
	if p := b.do(req); p.status != http.StatusBadRequest {
		t.Errorf("non-upgrade GET /ws = %d, want 400", p.status)
	}
	// The page's own origin works.
	conn, first := b.mustDial("/ws")
	defer conn.Close()
	if !strings.Contains(first, `id="queue-list"`) {
		t.Errorf("first message = %.200q, want the queue", first)
	}
}

func TestWSPushesCommittedChanges(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	e.addUser("otto", account.RoleOperator, rolePassword)
	op, aud := e.browser(), e.browser()
	op.login("olivia", rolePassword)
	aud.login("aude", rolePassword)
	opConn, opFirst := op.mustDial("/ws")
	audConn, _ := aud.mustDial("/ws")
	if fragmentDoc(t, opFirst).Find(`[data-testid="call-card"]`).Length() != 0 {
		t.Fatal("the first message shows cards in an empty queue")
	}

	call := e.submit("agent:deployer", "deploy-host", conDeployBody)
	for _, tc := range []struct {
		conn   *websocket.Conn
		decide bool
	}{{opConn, true}, {audConn, false}} {
		msg := wsReadUntil(t, tc.conn, call.ID)
		doc := fragmentDoc(t, msg)
		if doc.Find(`[hx-swap-oob="afterbegin:#queue-list"] [data-testid="call-card"]`).Length() != 1 {
			t.Errorf("new call fragment = %.300q, want a card inserted at the top", msg)
		}
		// A delete swap of an id the page does not have yet is an htmx
		// error in the browser: the page's script removes a copy instead.
		if doc.Find(`[hx-swap-oob="delete"]`).Length() != 0 {
			t.Error("the insert carries a delete swap of the new card's id")
		}
		if got := doc.Find(`[data-testid="card-decide"]`).Length() == 1; got != tc.decide {
			t.Errorf("decide link in the pushed card = %v, want %v", got, tc.decide)
		}
		if doc.Find(`[data-testid="card-view"]`).Length() == 1 == tc.decide {
			t.Error("view link wrong for the role")
		}
	}

	otto := e.browser()
	otto.login("otto", rolePassword)
	callConn, callFirst := otto.mustDial("/ws?call=" + call.ID)
	st := fragmentDoc(t, callFirst)
	if st.Find(`#status[hx-swap-oob="true"]`).Length() != 1 || st.Find(`[data-testid="approve-form"]`).Length() != 1 {
		t.Fatalf("call socket's first message = %.300q, want the status block with decide controls", callFirst)
	}

	if _, err := e.q.ApproveWith(context.Background(), queue.ApproveInput{Operator: "olivia", Channel: audit.ChannelWeb,
		CallID: call.ID, Digest: call.Digest, Presented: e.q.Present(present.PageCall, "olivia", call)}); err != nil {
		t.Fatal(err)
	}
	msg := wsReadUntil(t, opConn, call.ID)
	if doc := fragmentDoc(t, msg); doc.Find(`#call-`+call.ID+`[hx-swap-oob="true"] [data-testid="card-quorum"]`).Text() != "1 of 2 approvals" {
		t.Errorf("after one approval the queue got %.300q, want the card replaced with 1 of 2", msg)
	}
	wsReadUntil(t, audConn, call.ID)
	msg = wsReadUntil(t, callConn, `id="status"`)
	doc := fragmentDoc(t, msg)
	if doc.Find(`[data-testid="quorum"]`).Text() != "1 of 2" || doc.Find(`[data-testid="approve-form"]`).Length() != 1 {
		t.Errorf("call page status after one approval = %.400q", msg)
	}
	csrf, _ := doc.Find(`input[name="csrf"]`).Attr("value")
	if csrf != otto.csrf() {
		t.Error("the pushed decide form does not carry the viewer's own CSRF token")
	}

	if _, err := e.q.ApproveWith(context.Background(), queue.ApproveInput{Operator: "otto", Channel: audit.ChannelWeb,
		CallID: call.ID, Digest: call.Digest, Presented: e.q.Present(present.PageCall, "otto", call)}); err != nil {
		t.Fatal(err)
	}
	for _, conn := range []*websocket.Conn{opConn, audConn} {
		msg := wsReadUntil(t, conn, call.ID)
		if fragmentDoc(t, msg).Find(`#call-`+call.ID+`[hx-swap-oob="delete"]`).Length() != 1 || strings.Contains(msg, "afterbegin") {
			t.Errorf("after approval the queue got %.300q, want the card removed", msg)
		}
	}
	msg = wsReadUntil(t, callConn, `id="status"`)
	doc = fragmentDoc(t, msg)
	if doc.Find(`[data-testid="status-value"]`).Text() != "approved" || doc.Find(`[data-testid="decide"]`).Length() != 0 {
		t.Errorf("call page status after approval = %.400q", msg)
	}

	// Retry blocks appear and disappear live, with a clear form only for
	// those who may clear.
	blockPair(t, e, "agent:flaky", "payments-host")
	opMsg := wsReadUntil(t, opConn, "agent:flaky")
	audMsg := wsReadUntil(t, audConn, "agent:flaky")
	if fragmentDoc(t, opMsg).Find(`[data-testid="clear-form"]`).Length() != 1 {
		t.Errorf("operator's block fragment = %.300q, want a clear form", opMsg)
	}
	if fragmentDoc(t, audMsg).Find(`[data-testid="clear-form"]`).Length() != 0 {
		t.Error("auditor's block fragment has a clear form")
	}
	if err := e.q.ClearRetry(context.Background(), "olivia", audit.ChannelWeb, "agent:flaky", "payments.refund"); err != nil {
		t.Fatal(err)
	}
	id := blockDOMID("agent:flaky", "payments.refund")
	if msg := wsReadUntil(t, audConn, id); !strings.Contains(msg, `hx-swap-oob="delete"`) {
		t.Errorf("after clearing: %q, want the block removed", msg)
	}
}

// Only committed changes are pushed: a refused decision sends nothing.
func TestWSNothingForRefusedDecision(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	b := e.browser()
	b.login("aude", rolePassword)
	conn, _ := b.mustDial("/ws")
	if _, err := e.q.Approve(context.Background(), "olivia", audit.ChannelWeb, call.ID, strings.Repeat("0", 64)); err == nil {
		t.Fatal("a wrong digest was accepted")
	}
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, msg, err := conn.ReadMessage(); err == nil {
		t.Errorf("a refused decision pushed %.200q", msg)
	}
}

func TestWSReconnectResyncs(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	b.login("olivia", rolePassword)
	conn, _ := b.mustDial("/ws")
	gone := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	wsReadUntil(t, conn, gone.ID)
	conn.Close()
	// While the page is away: one call decided, one new.
	if _, err := e.q.Deny(context.Background(), "adam", audit.ChannelWeb, gone.ID, "no"); err != nil {
		t.Fatal(err)
	}
	fresh := e.submit("agent:deployer", "deploy-host", conDeployBody)
	_, first := b.mustDial("/ws")
	doc := fragmentDoc(t, first)
	list := doc.Find(`#queue-list[hx-swap-oob="true"]`)
	if list.Length() != 1 {
		t.Fatalf("first message after reconnect = %.200q, want the whole queue", first)
	}
	var ids []string
	list.Find(`[data-testid="call-card"]`).Each(func(_ int, s *goquerySelection) { ids = append(ids, s.AttrOr("data-call", "")) })
	if len(ids) != 1 || ids[0] != fresh.ID {
		t.Errorf("queue after reconnect = %v, want only %s", ids, fresh.ID)
	}
}

func TestWSOversizedMessageClosesSocket(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	b.login("olivia", rolePassword)
	conn, _ := b.mustDial("/ws")
	if err := conn.WriteMessage(websocket.TextMessage, []byte("small and ignored")); err != nil {
		t.Fatal(err)
	}
	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	wsReadUntil(t, conn, call.ID) // still open after a small message
	if err := conn.WriteMessage(websocket.TextMessage, make([]byte, maxClientMessage+1)); err != nil {
		t.Fatal(err)
	}
	if code, _ := wsReadClose(t, conn); code != websocket.CloseMessageTooBig {
		t.Errorf("close code = %d, want %d", code, websocket.CloseMessageTooBig)
	}
	waitFor(t, "the socket to unregister", func() bool { return e.c.hub.clientCount() == 0 })
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A socket that never reads is dropped once its buffer fills, while every
// other socket keeps receiving every change.
func TestWSSlowClientDropped(t *testing.T) {
	// The write timeout is far longer than the test, so the socket that
	// never reads leaves by the full buffer, not by a blocked write timing
	// out on a slow machine.
	e := newConsoleEnv(t, func(c *Config) { c.SendBuffer = 8; c.WriteTimeout = 5 * time.Minute })
	addRoleUsers(e)
	b := e.browser()
	b.login("olivia", rolePassword)
	slow, _ := b.mustDial("/ws")
	const fast = 3
	var got [fast]atomic.Int64
	var wg sync.WaitGroup
	for i := range fast {
		conn, _ := b.mustDial("/ws")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, msg, err := conn.ReadMessage()
				if err != nil {
					return
				}
				// A busy socket may carry several fragments in one message.
				got[i].Add(int64(strings.Count(string(msg), "afterbegin")))
			}
		}()
		defer conn.Close()
	}
	waitFor(t, "sockets to register", func() bool { return e.c.hub.clientCount() == fast+1 })
	target := strings.Repeat("t", 16<<10)
	now := e.clock.Now()
	sent := int64(0)
	for e.c.hub.clientCount() == fast+1 {
		if sent == 5000 {
			t.Fatal("5000 changes and the socket that never reads was not dropped")
		}
		sent++
		e.c.hub.publish(queue.Event{Kind: audit.KindSubmitted, Call: &queue.Call{
			ID: fmt.Sprintf("call_slow%05d", sent), Actor: "agent:x", Tool: "x.y", Target: target,
			Status: queue.StatusPending, ApprovalsRequired: 1, CreatedAt: now, DecideBy: now.Add(time.Hour)}})
		waitFor(t, "fast sockets to receive", func() bool {
			for i := range fast {
				if got[i].Load() < sent {
					return e.c.hub.clientCount() < fast
				}
			}
			return true
		})
	}
	if n := e.c.hub.clientCount(); n != fast {
		t.Fatalf("sockets after the drop = %d, want the %d fast ones", n, fast)
	}
	// The fast sockets keep receiving after the drop.
	for range 3 {
		sent++
		e.c.hub.publish(queue.Event{Kind: audit.KindSubmitted, Call: &queue.Call{
			ID: fmt.Sprintf("call_slow%05d", sent), Actor: "agent:x", Tool: "x.y", Target: "t",
			Status: queue.StatusPending, ApprovalsRequired: 1, CreatedAt: now, DecideBy: now.Add(time.Hour)}})
	}
	waitFor(t, "fast sockets to receive everything", func() bool {
		for i := range fast {
			if got[i].Load() != sent {
				return false
			}
		}
		return true
	})
	t.Logf("dropped the socket that never reads after %d changes", sent-3)
	// The metric counts every message queued for a socket, and the drop.
	if n := testutil.ToFloat64(e.c.pushes.WithLabelValues("dropped")); n != 1 {
		t.Errorf("countersign_live_pushes_total{result=dropped} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(e.c.pushes.WithLabelValues("sent")); n < float64(fast*sent) {
		t.Errorf("countersign_live_pushes_total{result=sent} = %v, want at least %d", n, fast*sent)
	}
	// The dropped socket ends: its page would reconnect and resync.
	slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, _, err := slow.ReadMessage(); err != nil {
			if isTimeout(err) {
				t.Error("the dropped socket was not closed")
			}
			if ce, ok := err.(*websocket.CloseError); ok && ce.Code != websocket.CloseTryAgainLater && ce.Code != websocket.CloseAbnormalClosure {
				t.Errorf("dropped socket close code %d, want one the page reconnects after", ce.Code)
			}
			break
		}
	}
}

func settleGoroutines(t *testing.T, want int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	n := runtime.NumGoroutine()
	for n > want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

// stableGoroutines waits until the goroutine count stops changing.
func stableGoroutines() int {
	n := runtime.NumGoroutine()
	for stable := 0; stable < 10; {
		time.Sleep(20 * time.Millisecond)
		if m := runtime.NumGoroutine(); m == n {
			stable++
		} else {
			n, stable = m, 0
		}
	}
	return n
}

func TestWSNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	b.login("olivia", rolePassword)
	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	warm, _ := b.mustDial("/ws")
	warm.Close()
	waitFor(t, "the warm-up socket to go", func() bool { return e.c.hub.clientCount() == 0 })
	b.client.CloseIdleConnections()
	base := stableGoroutines()

	var conns []*websocket.Conn
	for i := range 12 {
		path := "/ws"
		if i%2 == 1 {
			path = "/ws?call=" + call.ID
		}
		c, _ := b.mustDial(path)
		conns = append(conns, c)
	}
	other := e.browser()
	other.login("aude", rolePassword)
	var logoutConns []*websocket.Conn
	for range 4 {
		c, _ := other.mustDial("/ws")
		logoutConns = append(logoutConns, c)
	}
	e.submit("agent:deployer", "deploy-host", conDeployBody)
	for _, c := range conns[:6] {
		c.Close()
	}
	for _, c := range conns[6:9] {
		c.WriteMessage(websocket.TextMessage, make([]byte, maxClientMessage+1))
	}
	for _, c := range conns[9:] {
		c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, ""), time.Now().Add(time.Second))
	}
	if p := other.post("/logout", url.Values{"csrf": {other.csrf()}}); p.status != http.StatusSeeOther {
		t.Fatalf("logout = %d", p.status)
	}
	for _, c := range append(conns[6:], logoutConns...) {
		wsReadClose(t, c)
		c.Close()
	}
	waitFor(t, "every socket to unregister", func() bool { return e.c.hub.clientCount() == 0 })
	b.client.CloseIdleConnections()
	other.client.CloseIdleConnections()
	if n := settleGoroutines(t, base); n > base {
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines = %d after closing every socket, want at most %d\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}

	// Shutting down stops the hub, the sweeper and every socket.
	last, _ := b.mustDial("/ws")
	e.stop()
	if code, _ := wsReadClose(t, last); code != websocket.CloseServiceRestart {
		t.Errorf("close code at shutdown = %d, want %d so pages reconnect", code, websocket.CloseServiceRestart)
	}
	last.Close()
	b.client.CloseIdleConnections()
	if n := settleGoroutines(t, before); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines = %d after shutdown, want at most %d\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// TestWSQueueRemovalOnce: a call leaving the queue is removed from the
// queue pages once, by the change that took it off (the approval), not
// again by the grant, a revocation or the redemption that follow; the
// call's own page still gets every change. A queue page opened after the
// removal does not show the call.
func TestWSQueueRemovalOnce(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	e.addUser("alice", account.RoleOperator, rolePassword)
	op := e.browser()
	op.login("olivia", rolePassword)
	queueConn, _ := op.mustDial("/ws")
	c := e.redeemedCall("INV-77")
	late, lateFirst := op.mustDial("/ws")
	if strings.Contains(lateFirst, c.ID) {
		t.Fatalf("a queue page opened after the call left the queue shows it: %.300q", lateFirst)
	}

	// A second call, approved and revoked, then a third submitted: each
	// socket's messages come in order, so once the third call's card
	// arrives, every push about the first two has been read.
	ctx := context.Background()
	body := `{"tool":"payments.refund","target":"invoice:INV-78","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}}`
	d, _, err := e.q.Submit(ctx, agentBilling, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	callConn, _ := op.mustDial("/ws?call=" + d.ID)
	if _, err := e.q.Approve(ctx, "alice", audit.ChannelCLI, d.ID, d.Digest); err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.RevokeGrant(ctx, "alice", audit.ChannelCLI, d.ID, "wrong invoice"); err != nil {
		t.Fatal(err)
	}
	last := e.submit("agent:deployer", "deploy-host", conDeployBody)
	removals := func(conn *websocket.Conn, ids ...string) map[string]int {
		n := map[string]int{}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			_, msg, err := conn.ReadMessage()
			if err != nil {
				t.Fatalf("waiting for the card of %s: %v", last.ID, err)
			}
			doc := fragmentDoc(t, string(msg))
			for _, id := range ids {
				n[id] += doc.Find(`#call-` + id + `[hx-swap-oob="delete"]`).Length()
			}
			if strings.Contains(string(msg), last.ID) {
				return n
			}
		}
	}
	if n := removals(queueConn, c.ID, d.ID); n[c.ID] != 1 || n[d.ID] != 1 {
		t.Fatalf("removals pushed to the queue page: %v, want one per call", n)
	}
	if n := removals(late, c.ID, d.ID); n[c.ID] != 0 || n[d.ID] != 1 {
		t.Fatalf("removals pushed to the queue page opened later: %v, want none of the call it never showed, one of the next", n)
	}
	// The call's own page gets the grant and the revocation.
	wsReadUntil(t, callConn, `revoked`)
}

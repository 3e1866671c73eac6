package console

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestWriteBatchReusesItsBufferSafely: the write pump joins each message
// in the buffer of the one before, so every message must arrive as it was
// joined: a shorter one after a longer one carries none of its bytes, a
// fragment joined into the buffer changes no message already written, and
// the fragments the hub queued keep their bytes.
func TestWriteBatchReusesItsBufferSafely(t *testing.T) {
	conn, peer := socketPair(t, websocket.Upgrader{WriteBufferSize: 64}) // messages longer than the connection's own buffer
	var err error

	c := &Console{cfg: Config{WriteTimeout: 10 * time.Second}}
	cl := &client{conn: conn, send: make(chan []byte, maxBatch)}
	// Each fragment has room to spare, as a hub's buffer may: joining
	// into it would write over what follows it there.
	frag := func(name string, n int) []byte {
		f := []byte(`<div id="` + name + `" hx-swap-oob="true">` + strings.Repeat(name[:1], n) + `</div>`)
		return append(make([]byte, 0, len(f)+4096), f...)
	}
	batches := [][][]byte{
		{frag("a", 3000), frag("b", 500), frag("c", 20)}, // grows the buffer
		{frag("d", 10)},                 // shorter: in the same buffer
		{frag("e", 100), frag("f", 40)}, // longer again, still within its capacity
		{frag("g", 1)},
	}
	var orig [][]byte // a copy of every fragment as the hub queued it
	for _, batch := range batches {
		for _, f := range batch {
			orig = append(orig, append([]byte(nil), f[:cap(f)]...))
		}
	}
	var buf []byte
	for i, batch := range batches {
		for _, f := range batch[1:] {
			cl.send <- f
		}
		var closed bool
		buf, closed, err = c.writeBatch(cl, buf, batch[0], 0)
		if err != nil || closed {
			t.Fatalf("batch %d: closed %v, %v", i, closed, err)
		}
		if i == 1 && cap(buf) == 0 {
			t.Fatal("the buffer is not kept for the next message")
		}
		_, got, err := peer.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if want := bytes.Join(batch, nil); !bytes.Equal(got, want) {
			t.Fatalf("message %d: %d bytes %.80q…, want %d bytes %.80q…", i, len(got), got, len(want), want)
		}
	}
	// What the hub queued is untouched, the room after it too: the buffer
	// is never the array of a fragment, which the hub may have queued for
	// other sockets as well.
	i := 0
	for _, batch := range batches {
		for _, f := range batch {
			if !bytes.Equal(f[:cap(f)], orig[i]) {
				t.Fatalf("fragment %d or the room after it changed when it was written: %.80q", i, f)
			}
			i++
		}
	}
}

// TestWriteBatchHoldEndsWhenHalfFull: a busy socket's hold sleeps without
// taking fragments, so a burst must end it before the channel could
// overflow (which would drop the socket): with an hour's hold, the batch
// is written as soon as the hub has queued half the channel, with every
// fragment in order, and what is queued after that waits for the next
// batch. Without the signal this test waits for the hour and fails by its
// deadline.
func TestWriteBatchHoldEndsWhenHalfFull(t *testing.T) {
	conn, peer := socketPair(t, websocket.Upgrader{})

	c := &Console{cfg: Config{WriteTimeout: 10 * time.Second}}
	const size = 8
	cl := &client{conn: conn, send: make(chan []byte, size), full: make(chan struct{}, 1)}
	frag := func(i int) []byte { return []byte(`<i id="f` + strconv.Itoa(i) + `"></i>`) }
	// A signal left from fragments a batch already took does not end the
	// next hold by itself.
	cl.full <- struct{}{}

	type result struct {
		closed bool
		err    error
	}
	done := make(chan result, 1)
	started := make(chan struct{}, 1)
	holdStarted = func() { started <- struct{}{} }
	defer func() { holdStarted = nil }()
	go func() {
		_, closed, err := c.writeBatch(cl, nil, frag(0), time.Hour)
		done <- result{closed, err}
	}()
	<-started // the pump sleeps now, and takes nothing until the hold ends
	var want []byte
	want = append(want, frag(0)...)
	for i := 1; i <= size/2; i++ {
		if !cl.offer(frag(i)) {
			t.Fatalf("fragment %d refused by a channel of %d", i, size)
		}
		want = append(want, frag(i)...)
	}
	r := <-done
	if r.err != nil || r.closed {
		t.Fatalf("closed %v, %v", r.closed, r.err)
	}
	if err := peer.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, got, err := peer.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("message %q, want %q", got, want)
	}
	if len(cl.send) != 0 {
		t.Fatalf("%d fragments left in the channel", len(cl.send))
	}

	// Fewer than half: the hold runs its course (a short one here), and
	// takes what was queued.
	cl.offer(frag(11))
	cl.offer(frag(12))
	if _, closed, err := c.writeBatch(cl, nil, frag(10), time.Millisecond); err != nil || closed {
		t.Fatalf("closed %v, %v", closed, err)
	}
	_, got, err = peer.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	if want := string(frag(10)) + string(frag(11)) + string(frag(12)); string(got) != want {
		t.Fatalf("message %q, want %q", got, want)
	}
}

// socketPair is a real WebSocket over 127.0.0.1: the server's end, upgraded
// with up, and the peer that reads what it writes. Both close with the test.
func socketPair(t *testing.T, up websocket.Upgrader) (conn, peer *websocket.Conn) {
	t.Helper()
	accepted := make(chan *websocket.Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		accepted <- conn
	}))
	t.Cleanup(srv.Close)
	peer, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	conn = <-accepted
	t.Cleanup(func() { conn.Close() })
	return conn, peer
}

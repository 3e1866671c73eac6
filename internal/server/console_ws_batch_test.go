package server

import (
	"bytes"
	"net/http"
	"net/http/httptest"
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
	up := websocket.Upgrader{WriteBufferSize: 64} // messages longer than the connection's own buffer
	accepted := make(chan *websocket.Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		accepted <- conn
	}))
	defer srv.Close()
	peer, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	conn := <-accepted
	defer conn.Close()

	c := &console{cfg: ConsoleConfig{WriteTimeout: 10 * time.Second}}
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

package console

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

// One account keeps at most MaxSocketsPerAccount sockets open over all its
// sessions, and the console at most MaxSockets: the next is refused before
// the upgrade, with an answer that says what to do, and another account is
// not affected by the first's share. A closed socket gives its place back.
func TestSocketsPerAccountAreBounded(t *testing.T) {
	e := newConsoleEnvWith(t, func(ec *envConfig) {
		ec.Console.MaxSocketsPerAccount = 3
		ec.Console.MaxSockets = 5
	})
	addRoleUsers(e)
	first, second := e.browser(), e.browser()
	first.login("aude", rolePassword) // an auditor is enough to open sockets
	second.login("aude", rolePassword)
	refused := func(b *consoleBrowser, status int, code string) {
		t.Helper()
		conn, resp, err := b.dial("/ws", e.url)
		if err == nil {
			conn.Close()
			t.Fatalf("a socket over the bound was opened")
		}
		if resp == nil || resp.StatusCode != status {
			t.Fatalf("refused socket: %v, response %+v; want status %d", err, resp, status)
		}
		body, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(body), `"`+code+`"`) {
			t.Errorf("refused socket's answer %s, want the code %s", body, code)
		}
	}
	var aude []*websocket.Conn
	for _, b := range []*consoleBrowser{first, second, first} {
		conn, _ := b.mustDial("/ws")
		aude = append(aude, conn)
	}
	refused(second, http.StatusTooManyRequests, "too_many_sockets")
	refused(first, http.StatusTooManyRequests, "too_many_sockets")

	other := e.browser()
	other.login("olivia", rolePassword)
	other.mustDial("/ws")
	other.mustDial("/ws")
	waitFor(t, "five sockets", func() bool { return e.c.hub.clientCount() == 5 })
	refused(other, http.StatusServiceUnavailable, "unavailable")

	aude[0].Close()
	waitFor(t, "the closed socket's place given back", func() bool { return e.c.hub.clientCount() == 4 })
	waitFor(t, "a socket of aude's again", func() bool {
		conn, _, err := second.dial("/ws", e.url)
		if err == nil {
			t.Cleanup(func() { conn.Close() })
		}
		return err == nil
	})
}

func TestSocketBoundsDefaults(t *testing.T) {
	var cfg Config
	cfg.defaults()
	if cfg.MaxSocketsPerAccount != 64 || cfg.MaxSockets != 4096 {
		t.Errorf("socket bounds default to %d per account and %d in all, want 64 and 4096", cfg.MaxSocketsPerAccount, cfg.MaxSockets)
	}
}

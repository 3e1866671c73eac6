package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// httpConn is one persistent HTTP/1.1 connection to a console, used by one
// goroutine at a time: an agent's or an approver's. Requests are written from
// one reused buffer and answers read with one bufio.Reader into one reused
// body buffer, with no goroutine per connection; net/http's client, with its
// read and write goroutines per connection and its header maps per request,
// cost loadgen more CPU per flow than it leaves the console it measures.
//
// It speaks the HTTP/1.1 the console writes: Content-Length or chunked
// bodies, keep-alive unless the answer says Connection: close. A connection
// that fails is closed and dialled again by the next request; a request on
// a reused connection that fails before any byte of its answer arrived is
// sent once more on a fresh one: the console closes connections idle for
// longer than its idle timeout, and a request written as it does so is
// never read. (A console that read the request and died before answering
// would see it twice: a submission comes back as the same call, a
// redemption is refused as replayed and counted as an error.)
type httpConn struct {
	addr    string // host:port to dial
	host    string // the Host header
	origin  string // scheme://host, for Origin
	headers string // fixed header lines (Authorization, User-Agent), each ending in \r\n
	cookies map[string]string
	timeout time.Duration

	ctx   context.Context
	conn  net.Conn
	r     *bufio.Reader
	stop  func() bool
	wbuf  []byte
	body  []byte
	clMu  sync.Mutex // guards conn for the context's AfterFunc
	close bool       // the last answer asked to close the connection
}

// errTransport marks an answer that is not HTTP, or a connection that
// broke.
var errTransport = errors.New("transport")

// newHTTPConn returns a connection to base (http://host:port) whose
// requests end when ctx ends. headers are added to every request.
func newHTTPConn(ctx context.Context, base string, headers string, timeout time.Duration) (*httpConn, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("not an http:// address: %s", base)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return &httpConn{addr: addr, host: u.Host, origin: "http://" + u.Host, headers: headers,
		cookies: map[string]string{}, timeout: timeout, ctx: ctx, wbuf: make([]byte, 0, 1024), body: make([]byte, 0, 16<<10)}, nil
}

func (h *httpConn) dial() error {
	if err := h.ctx.Err(); err != nil {
		return err
	}
	var d net.Dialer
	c, err := d.DialContext(h.ctx, "tcp", h.addr)
	if err != nil {
		return err
	}
	if h.r == nil {
		h.r = bufio.NewReaderSize(c, 16<<10)
	} else {
		h.r.Reset(c)
	}
	h.clMu.Lock()
	h.conn = c
	h.clMu.Unlock()
	// The context's end unblocks a request under way: one callback per
	// connection, not per request.
	h.stop = context.AfterFunc(h.ctx, func() {
		h.clMu.Lock()
		if h.conn == c {
			c.SetDeadline(time.Unix(1, 0))
		}
		h.clMu.Unlock()
	})
	return nil
}

// Close closes the connection; the next request dials again.
func (h *httpConn) Close() {
	h.clMu.Lock()
	c := h.conn
	h.conn = nil
	h.clMu.Unlock()
	if c != nil {
		c.Close()
	}
	if h.stop != nil {
		h.stop()
		h.stop = nil
	}
}

// do sends one request and returns the answer's status and body. The body
// is valid until the next request on h. ctype is the body's Content-Type
// ("" for none). extra holds further header lines, each ending in \r\n.
func (h *httpConn) do(method, path, ctype string, body []byte, extra string, timeout time.Duration) (int, []byte, error) {
	for attempt := 0; ; attempt++ {
		fresh := false
		if h.conn == nil {
			if err := h.dial(); err != nil {
				return 0, nil, err
			}
			fresh = true
		}
		status, got, err := h.roundTrip(method, path, ctype, body, extra, timeout)
		if err == nil {
			if h.close {
				h.Close()
			}
			return status, h.body, nil
		}
		h.Close()
		if ctxErr := h.ctx.Err(); ctxErr != nil {
			return 0, nil, ctxErr
		}
		if fresh || got || attempt > 0 {
			return 0, nil, err
		}
	}
}

// roundTrip writes the request and reads the answer; got reports whether
// any byte of the answer arrived.
func (h *httpConn) roundTrip(method, path, ctype string, body []byte, extra string, timeout time.Duration) (status int, got bool, err error) {
	if timeout <= 0 {
		timeout = h.timeout
	}
	if err := h.conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, false, err
	}
	w := h.wbuf[:0]
	w = append(w, method...)
	w = append(w, ' ')
	w = append(w, path...)
	w = append(w, " HTTP/1.1\r\nHost: "...)
	w = append(w, h.host...)
	w = append(w, "\r\n"...)
	w = append(w, h.headers...)
	w = append(w, extra...)
	if len(h.cookies) > 0 {
		w = append(w, "Cookie: "...)
		first := true
		for k, v := range h.cookies {
			if !first {
				w = append(w, "; "...)
			}
			first = false
			w = append(w, k...)
			w = append(w, '=')
			w = append(w, v...)
		}
		w = append(w, "\r\n"...)
	}
	if body != nil {
		w = append(w, "Content-Type: "...)
		w = append(w, ctype...)
		w = append(w, "\r\nContent-Length: "...)
		w = strconv.AppendInt(w, int64(len(body)), 10)
		w = append(w, "\r\n"...)
	}
	w = append(w, "\r\n"...)
	w = append(w, body...)
	h.wbuf = w
	if _, err := h.conn.Write(w); err != nil {
		return 0, false, err
	}
	return h.readAnswer()
}

var (
	hContentLength    = []byte("content-length")
	hTransferEncoding = []byte("transfer-encoding")
	hConnection       = []byte("connection")
	hSetCookie        = []byte("set-cookie")
	vChunked          = []byte("chunked")
	vClose            = []byte("close")
)

// readAnswer reads a status line, the headers it needs and the body.
func (h *httpConn) readAnswer() (status int, got bool, err error) {
	line, err := h.r.ReadSlice('\n')
	if err != nil {
		return 0, len(line) > 0, err
	}
	// HTTP/1.1 200 OK
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, true, errTransport
	}
	if status = digits(line[9:12]); status < 100 || (len(line) > 12 && line[12] != ' ' && line[12] != '\r' && line[12] != '\n') {
		return 0, true, errTransport
	}
	length, chunked := -1, false
	h.close = line[7] == '0'
	for {
		line, err = h.r.ReadSlice('\n')
		if err != nil {
			return 0, true, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, true, errTransport
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, hContentLength):
			if length = digits(value); length < 0 {
				return 0, true, errTransport
			}
		case bytes.EqualFold(name, hTransferEncoding):
			chunked = bytes.EqualFold(value, vChunked)
		case bytes.EqualFold(name, hConnection):
			h.close = bytes.EqualFold(value, vClose)
		case bytes.EqualFold(name, hSetCookie):
			kv, _, _ := bytes.Cut(value, []byte(";"))
			if k, v, ok := bytes.Cut(kv, []byte("=")); ok {
				if len(v) == 0 {
					delete(h.cookies, string(k))
				} else {
					h.cookies[string(k)] = string(v)
				}
			}
		}
	}
	h.body = h.body[:0]
	switch {
	case status == 204 || status == 304 || status/100 == 1:
		// No body, whatever the headers say.
	case chunked:
		err = h.readChunked()
	case length >= 0:
		h.body = grow(h.body, length)
		_, err = io.ReadFull(h.r, h.body)
	default:
		// No length: the body runs to the connection's end.
		h.close = true
		h.body, err = readAll(h.r, h.body)
	}
	if err != nil {
		return 0, true, err
	}
	if len(h.body) > maxAnswerBytes {
		return 0, true, errTransport
	}
	return status, true, nil
}

const maxAnswerBytes = 8 << 20

func (h *httpConn) readChunked() error {
	for {
		line, err := h.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if err != nil || n < 0 || int(n) > maxAnswerBytes-len(h.body) {
			return errTransport
		}
		if n == 0 {
			// Trailers, up to the empty line.
			for {
				line, err := h.r.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return nil
				}
			}
		}
		at := len(h.body)
		h.body = grow(h.body, at+int(n))
		if _, err := io.ReadFull(h.r, h.body[at:]); err != nil {
			return err
		}
		if _, err := h.r.Discard(2); err != nil {
			return err
		}
	}
}

// digits reads a decimal number of at most 9 digits, or returns -1.
func digits(b []byte) int {
	if len(b) == 0 || len(b) > 9 {
		return -1
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// grow returns b resized to n bytes, reusing its array when it can.
func grow(b []byte, n int) []byte {
	if cap(b) >= n {
		return b[:n]
	}
	nb := make([]byte, n, max(n, 2*cap(b)))
	copy(nb, b)
	return nb
}

func readAll(r io.Reader, b []byte) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) > maxAnswerBytes {
			return b, errTransport
		}
	}
}

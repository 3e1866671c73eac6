package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"testing"
)

// FuzzReadAnswer reads arbitrary bytes as a console's answer: the reader
// never panics nor returns a body over its bound, and where net/http reads
// the same bytes as a complete answer framed by a length or by chunks, both
// read the same status and the same body.
func FuzzReadAnswer(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nTrailer: 1\r\n\r\n",
		"HTTP/1.1 303 See Other\r\nLocation: /\r\nSet-Cookie: s=abc; Path=/; HttpOnly\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nto the end",
		"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the end",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"garbage",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h := &httpConn{r: bufio.NewReader(bytes.NewReader(data)), cookies: map[string]string{}}
		status, _, err := h.readAnswer()
		if err != nil {
			return
		}
		if status < 100 || status > 999 {
			t.Fatalf("status %d", status)
		}
		if len(h.body) > maxAnswerBytes {
			t.Fatalf("a body of %d bytes", len(h.body))
		}
		res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(data)), nil)
		if err != nil || res.ProtoMinor != 1 || (res.ContentLength < 0 && !chunkedOnly(res.TransferEncoding)) {
			return
		}
		body, err := io.ReadAll(res.Body)
		if err != nil {
			return
		}
		if res.StatusCode != status || !bytes.Equal(body, h.body) {
			t.Fatalf("read %d %q; net/http reads %d %q", status, h.body, res.StatusCode, body)
		}
	})
}

func chunkedOnly(te []string) bool { return len(te) == 1 && te[0] == "chunked" }

package server

import (
	"crypto/rand"
	"sync/atomic"
)

// requestIDs makes the X-Request-ID of requests that come without one:
// 32 letters and digits, a prefix drawn at random when the server starts
// followed by a counter, so that an id is unique in the process and ids of
// two processes differ. An id tells log lines apart; it is no secret.
type requestIDs struct {
	prefix [requestIDPrefix]byte
	n      atomic.Uint64
}

const (
	requestIDLen    = 32
	requestIDPrefix = 20
	requestIDChars  = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

func newRequestIDs() *requestIDs {
	g := new(requestIDs)
	rand.Read(g.prefix[:]) // never fails (crypto/rand)
	for i, b := range g.prefix {
		g.prefix[i] = requestIDChars[int(b)%len(requestIDChars)]
	}
	return g
}

// next returns a new id: one allocation, the string.
func (g *requestIDs) next() string {
	var b [requestIDLen]byte
	copy(b[:], g.prefix[:])
	n := g.n.Add(1)
	for i := requestIDLen - 1; i >= requestIDPrefix; i-- {
		b[i] = requestIDChars[n%uint64(len(requestIDChars))]
		n /= uint64(len(requestIDChars))
	}
	return string(b[:])
}

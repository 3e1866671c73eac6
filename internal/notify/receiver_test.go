package notify_test

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// swReceiver verifies Standard Webhooks the way the specification tells a
// receiver to, written from the specification and not from the signer
// under test: the signed content is "{webhook-id}.{webhook-timestamp}.{body}",
// v1 is base64(HMAC-SHA256) with the base64 key after "whsec_", v1a is a
// base64 Ed25519 signature checked with the key after "whpk_", the header
// may carry several space-separated signatures of which one must match,
// and a timestamp more than five minutes away from now is refused.
type swReceiver struct {
	secret    []byte            // nil: v1 not accepted
	publicKey ed25519.PublicKey // nil: v1a not accepted
	now       func() time.Time
}

var errNoMatch = errors.New("no signature matches")

func newSWReceiver(whsec, whpk string) *swReceiver {
	r := &swReceiver{now: time.Now}
	if whsec != "" {
		k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(whsec, "whsec_"))
		if err != nil {
			panic(err)
		}
		r.secret = k
	}
	if whpk != "" {
		k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(whpk, "whpk_"))
		if err != nil {
			panic(err)
		}
		r.publicKey = k
	}
	return r
}

// verify checks one delivery and returns the message id.
func (r *swReceiver) verify(h http.Header, body []byte) (string, error) {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return "", errors.New("missing webhook headers")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", fmt.Errorf("bad timestamp %q", ts)
	}
	if d := r.now().Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return "", fmt.Errorf("timestamp %s is %s away from now", ts, d)
	}
	signed := []byte(id + "." + ts + "." + string(body))
	for _, s := range strings.Fields(sigs) {
		version, value, ok := strings.Cut(s, ",")
		if !ok {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(value)
		if err != nil {
			continue
		}
		switch version {
		case "v1":
			if r.secret == nil {
				continue
			}
			m := hmac.New(sha256.New, r.secret)
			m.Write(signed)
			if hmac.Equal(m.Sum(nil), raw) {
				return id, nil
			}
		case "v1a":
			if r.publicKey != nil && ed25519.Verify(r.publicKey, signed, raw) {
				return id, nil
			}
		}
	}
	return "", errNoMatch
}

// hookServer is a receiver endpoint: it verifies every request, answers
// with the status fail returns for the request's number (1-based), and
// records what it accepted, deduplicating by the webhook id as a receiver
// should.
type hookServer struct {
	rx   *swReceiver
	fail func(n int) int // 0 means accept

	mu       sync.Mutex
	requests int
	refused  []error
	accepted map[string][]byte
	order    []string
	arrived  chan string
}

func newHookServer(rx *swReceiver, fail func(int) int) *hookServer {
	if fail == nil {
		fail = func(int) int { return 0 }
	}
	return &hookServer{rx: rx, fail: fail, accepted: map[string][]byte{}, arrived: make(chan string, 1024)}
}

func (s *hookServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.requests++
	n := s.requests
	s.mu.Unlock()
	if code := s.fail(n); code != 0 {
		w.WriteHeader(code)
		fmt.Fprintf(w, "failing on purpose (request %d)", n)
		return
	}
	id, err := s.rx.verify(r.Header, body)
	if err != nil {
		s.mu.Lock()
		s.refused = append(s.refused, err)
		s.mu.Unlock()
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	s.mu.Lock()
	if _, dup := s.accepted[id]; !dup {
		s.accepted[id] = body
		s.order = append(s.order, id)
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
	s.arrived <- id
}

func (s *hookServer) snapshot() (requests int, accepted map[string][]byte, order []string, refused []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	acc := map[string][]byte{}
	for k, v := range s.accepted {
		acc[k] = v
	}
	return s.requests, acc, append([]string(nil), s.order...), append([]error(nil), s.refused...)
}

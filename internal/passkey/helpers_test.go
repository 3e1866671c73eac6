package passkey

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/go-webauthn/webauthn/webauthn"
)

// peekSession reads a ceremony's session data and puts it back, for the
// recordings.
func peekSession(t *testing.T, svc *Service, id string) webauthn.SessionData {
	t.Helper()
	ctx := context.Background()
	data, expires, err := svc.ceremonies.Take(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.ceremonies.Put(ctx, id, data, expires); err != nil {
		t.Fatal(err)
	}
	var c ceremony
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return c.Session
}

// install keeps c under id as if a Begin had issued it. The in-memory
// store fails only when full, which the replays never fill.
func install(svc *Service, id string, c ceremony, expires time.Time) {
	data, err := json.Marshal(c)
	if err == nil {
		err = svc.ceremonies.Put(context.Background(), id, data, expires)
	}
	if err != nil {
		panic(err)
	}
}

package server

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/testkit/sqlitekit"
)

func TestAuditCheckpointRoute(t *testing.T) {
	k := sqlitekit.NewQueue(t)
	d, keys, q := k.DB, k.Keys, k.Service
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(Config{Queue: q, Accounts: account.NewService(d.Accounts(), nil), Audit: d, Ping: d.Ping, Keys: keys, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(s.Routes(), "GET /api/v1/audit/checkpoint") {
		s.routesAudit(s.echo)
	}
	get := func() (int, []byte, http.Header) {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/audit/checkpoint", nil))
		return rec.Code, rec.Body.Bytes(), rec.Header()
	}

	code, body, _ := get()
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	if err := json.Unmarshal(body, &e); code != http.StatusNotFound || err != nil || e.Error.Code != "no_checkpoint" {
		t.Fatalf("before any checkpoint: %d %s, want 404 no_checkpoint", code, body)
	}

	ctx := context.Background()
	if _, _, err := accountsOf(d).CreateToken(ctx, "agent:a", "payments-host", "", "test", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	signer := audit.NewSigner(ed25519.NewKeyFromSeed(make([]byte, 32)))
	want, err := d.Checkpoint(ctx, signer)
	if err != nil {
		t.Fatal(err)
	}
	// No Authorization header: the route is public.
	code, body, h := get()
	if code != http.StatusOK {
		t.Fatalf("checkpoint = %d %s, want 200", code, body)
	}
	var fields map[string]any
	if err := json.Unmarshal(body, &fields); err != nil {
		t.Fatal(err)
	}
	var names []string
	for k := range fields {
		names = append(names, k)
	}
	slices.Sort(names)
	if w := []string{"head", "kid", "public_key", "seq", "signature", "time"}; !slices.Equal(names, w) {
		t.Errorf("members = %v, want %v", names, w)
	}
	got, err := audit.ReadCheckpoints(strings.NewReader(string(body)))
	if err != nil || len(got) != 1 || got[0] != want {
		t.Fatalf("served %+v, %v; want %+v", got, err, want)
	}
	if err := got[0].Verify(); err != nil || got[0].KID != signer.KID() {
		t.Errorf("served checkpoint does not verify under the audit key: %v", err)
	}
	if cc := h.Get("Cache-Control"); cc != "no-cache" {
		t.Errorf("Cache-Control = %q, want no-cache", cc)
	}
	// The served checkpoint matches the chain.
	res, err := d.Verify(ctx, audit.VerifyOptions{Checkpoints: got, TrustedKeys: []string{signer.PublicKey()}})
	if err != nil || !res.OK || res.CheckpointSeq != want.Seq {
		t.Errorf("Verify with the served checkpoint = %+v, %v", res, err)
	}
}

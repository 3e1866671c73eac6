package passkey

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The replay tests check the finish side and the offline verifier against
// assertions that Chromium's virtual authenticator really produced
// (testdata/recorded.json, written by TestBrowserCeremonies).

func loadRecording(t *testing.T) recording {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "recorded.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r recording
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r recording) assertion(t *testing.T, name string) recorded {
	t.Helper()
	for _, a := range r.Assertions {
		if a.Name == name {
			return a
		}
	}
	t.Fatalf("no recorded assertion %q", name)
	return recorded{}
}

type replay struct {
	rec  recording
	svc  *Service
	user User
	now  time.Time
}

func newReplay(t *testing.T) *replay {
	t.Helper()
	rec := loadRecording(t)
	r := &replay{rec: rec, now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	svc, err := New(Config{RPID: rec.RPID, Origins: []string{rec.Origin}, Now: func() time.Time { return r.now }})
	if err != nil {
		t.Fatal(err)
	}
	r.svc = svc
	var c Credential
	if err := json.Unmarshal(rec.Credential, &c.Credential); err != nil {
		t.Fatal(err)
	}
	c.Name = "virtual key"
	r.user = User{Handle: rec.User.Handle, Name: rec.User.Name, Credentials: []Credential{c}}
	return r
}

// begin installs a recorded ceremony as if BeginApproval had issued it.
func (r *replay) begin(a recorded, binding Binding) string {
	id := strings.Repeat("x", 8) + a.Name + binding.CallID
	install(r.svc, id, ceremony{Kind: kindApprove, Handle: r.user.Handle, Binding: binding, Session: a.Session}, r.now.Add(CeremonyTTL))
	return id
}

func (r *replay) withCount(n uint32) User {
	u := r.user
	c := u.Credentials[0]
	c.Authenticator.SignCount = n
	u.Credentials = []Credential{c}
	return u
}

func TestReplayApprove(t *testing.T) {
	r := newReplay(t)
	a := r.rec.assertion(t, "approve")
	ap, err := r.svc.FinishApproval(context.Background(), r.begin(a, a.Binding), r.user, a.Binding, a.Response)
	if err != nil {
		t.Fatal(err)
	}
	ev := ap.Evidence
	if ev.Format != EvidenceFormat || ev.RPID != "localhost" || ev.Origin != r.rec.Origin || ev.Binding() != a.Binding ||
		ev.CredentialName != "virtual key" || string(ev.CredentialID) != string(r.user.Credentials[0].ID) {
		t.Errorf("evidence = %+v", ev)
	}
	if ev.SignCount <= r.user.Credentials[0].Authenticator.SignCount {
		t.Errorf("sign count %d, stored %d", ev.SignCount, r.user.Credentials[0].Authenticator.SignCount)
	}
	if got := ap.Credential.Authenticator.SignCount; got != ev.SignCount {
		t.Errorf("stored count becomes %d, want %d", got, ev.SignCount)
	}
	if err := Verify(ev, a.Binding); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

func TestReplayRefusals(t *testing.T) {
	rec := loadRecording(t)
	approve := rec.assertion(t, "approve")
	var approveCount uint32
	{
		r := newReplay(t)
		ap, err := r.svc.FinishApproval(context.Background(), r.begin(approve, approve.Binding), r.user, approve.Binding, approve.Response)
		if err != nil {
			t.Fatal(err)
		}
		approveCount = ap.Evidence.SignCount
	}
	other := rec.assertion(t, "approve_other_call")
	cases := []struct {
		name   string
		run    func(r *replay) error
		reason Reason
	}{
		{"user verification missing", func(r *replay) error {
			a := rec.assertion(t, "uv_missing")
			_, err := r.svc.FinishApproval(context.Background(), r.begin(a, a.Binding), r.user, a.Binding, a.Response)
			return err
		}, ReasonUserVerification},
		{"bogus signature", func(r *replay) error {
			a := rec.assertion(t, "bogus_signature")
			_, err := r.svc.FinishApproval(context.Background(), r.begin(a, a.Binding), r.user, a.Binding, a.Response)
			return err
		}, ReasonSignature},
		{"sign count backwards", func(r *replay) error {
			_, err := r.svc.FinishApproval(context.Background(), r.begin(approve, approve.Binding), r.withCount(approveCount+1), approve.Binding, approve.Response)
			return err
		}, ReasonSignCount},
		{"sign count equal above zero", func(r *replay) error {
			_, err := r.svc.FinishApproval(context.Background(), r.begin(approve, approve.Binding), r.withCount(approveCount), approve.Binding, approve.Response)
			return err
		}, ReasonSignCount},
		{"call changed between begin and finish", func(r *replay) error {
			a := rec.assertion(t, "call_changed")
			changed := a.Binding
			changed.Digest = strings.Repeat("cd", 32)
			_, err := r.svc.FinishApproval(context.Background(), r.begin(a, a.Binding), r.user, changed, a.Response)
			return err
		}, ReasonCallChanged},
		{"challenge signed for another call", func(r *replay) error {
			// The ceremony claims c_01, the authenticator signed c_02's challenge.
			_, err := r.svc.FinishApproval(context.Background(), r.begin(other, approve.Binding), r.user, approve.Binding, other.Response)
			return err
		}, ReasonChallenge},
		{"challenge not issued by us", func(r *replay) error {
			a := approve
			a.Session.Challenge = other.Session.Challenge
			_, err := r.svc.FinishApproval(context.Background(), r.begin(a, a.Binding), r.user, a.Binding, a.Response)
			return err
		}, ReasonChallenge},
		{"ceremony expired", func(r *replay) error {
			id := r.begin(approve, approve.Binding)
			r.now = r.now.Add(CeremonyTTL)
			_, err := r.svc.FinishApproval(context.Background(), id, r.user, approve.Binding, approve.Response)
			return err
		}, ReasonCeremony},
		{"finished twice", func(r *replay) error {
			id := r.begin(approve, approve.Binding)
			if _, err := r.svc.FinishApproval(context.Background(), id, r.user, approve.Binding, approve.Response); err != nil {
				return err
			}
			_, err := r.svc.FinishApproval(context.Background(), id, r.user, approve.Binding, approve.Response)
			return err
		}, ReasonCeremony},
		{"another operator finishes", func(r *replay) error {
			id := r.begin(approve, approve.Binding)
			mallory := r.user
			mallory.Handle = NewHandle()
			_, err := r.svc.FinishApproval(context.Background(), id, mallory, approve.Binding, approve.Response)
			return err
		}, ReasonCeremony},
		{"passkey removed", func(r *replay) error {
			id := r.begin(approve, approve.Binding)
			u := r.user
			u.Credentials = nil
			_, err := r.svc.FinishApproval(context.Background(), id, u, approve.Binding, approve.Response)
			return err
		}, ReasonCredential},
		{"unknown ceremony", func(r *replay) error {
			_, err := r.svc.FinishApproval(context.Background(), "nope", r.user, approve.Binding, approve.Response)
			return err
		}, ReasonCeremony},
		{"malformed answer", func(r *replay) error {
			_, err := r.svc.FinishApproval(context.Background(), r.begin(approve, approve.Binding), r.user, approve.Binding, []byte(`{"id":"x"}`))
			return err
		}, ReasonMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wantReason(t, c.run(newReplay(t)), c.reason)
		})
	}
}

func approvedEvidence(t *testing.T) Evidence {
	t.Helper()
	r := newReplay(t)
	a := r.rec.assertion(t, "approve")
	ap, err := r.svc.FinishApproval(context.Background(), r.begin(a, a.Binding), r.user, a.Binding, a.Response)
	if err != nil {
		t.Fatal(err)
	}
	return ap.Evidence
}

func TestVerifyRefusesTampering(t *testing.T) {
	good := approvedEvidence(t)
	b := good.Binding()
	flip := func(p B64, i int) B64 { q := append(B64(nil), p...); q[i] ^= 0x01; return q }
	r := newReplay(t)
	otherKey := func() B64 {
		// Another P-256 key: the one from the registration's attestation
		// object is the same, so take a key the recording does not hold.
		k := append(B64(nil), r.user.Credentials[0].PublicKey...)
		k[len(k)-1] ^= 0x55
		return k
	}()
	cases := []struct {
		name string
		edit func(e *Evidence, b *Binding)
	}{
		{"signature", func(e *Evidence, _ *Binding) { e.Signature = flip(e.Signature, len(e.Signature)-2) }},
		{"authenticator data", func(e *Evidence, _ *Binding) { e.AuthenticatorData = flip(e.AuthenticatorData, 36) }},
		{"UV bit cleared", func(e *Evidence, _ *Binding) {
			e.AuthenticatorData = append(B64(nil), e.AuthenticatorData...)
			e.AuthenticatorData[32] &^= 0x04
		}},
		{"client data", func(e *Evidence, _ *Binding) {
			e.ClientDataJSON = B64(strings.Replace(string(e.ClientDataJSON), `"webauthn.get"`, `"webauthn.get" `, 1))
		}},
		{"public key", func(e *Evidence, _ *Binding) { e.PublicKey = otherKey }},
		{"digest in the entry", func(_ *Evidence, b *Binding) { b.Digest = strings.Repeat("cd", 32) }},
		{"call id in the entry", func(_ *Evidence, b *Binding) { b.CallID = "c_02" }},
		{"operator in the entry", func(_ *Evidence, b *Binding) { b.Operator = "mallory" }},
		{"digest in evidence and entry alike", func(e *Evidence, b *Binding) {
			e.Digest = strings.Repeat("cd", 32)
			b.Digest = e.Digest
		}},
		{"rp id", func(e *Evidence, _ *Binding) { e.RPID = "example.com" }},
		{"origin", func(e *Evidence, _ *Binding) { e.Origin = "http://localhost:1" }},
		{"sign count", func(e *Evidence, _ *Binding) { e.SignCount++ }},
		{"format", func(e *Evidence, _ *Binding) { e.Format = "v0" }},
		{"empty signature", func(e *Evidence, _ *Binding) { e.Signature = nil }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, bb := good, b
			c.edit(&e, &bb)
			err := Verify(e, bb)
			if !errors.Is(err, ErrEvidence) {
				t.Errorf("Verify = %v, want ErrEvidence", err)
			}
			if err != nil && strings.Contains(err.Error(), "<nil>") {
				t.Errorf("Verify = %q: the reason formats a nil error", err)
			}
		})
	}
	if err := Verify(good, b); err != nil {
		t.Fatalf("the untouched evidence: %v", err)
	}
}

// Evidence of the refused assertions does not verify either: the offline
// verifier is not weaker than the finish side.
func TestVerifyRefusesRecordedBadAssertions(t *testing.T) {
	good := approvedEvidence(t)
	rec := loadRecording(t)
	for _, name := range []string{"uv_missing", "bogus_signature"} {
		a := rec.assertion(t, name)
		var resp struct {
			Response struct {
				ClientDataJSON    B64 `json:"clientDataJSON"`
				AuthenticatorData B64 `json:"authenticatorData"`
				Signature         B64 `json:"signature"`
			} `json:"response"`
		}
		if err := json.Unmarshal(a.Response, &resp); err != nil {
			t.Fatal(err)
		}
		e := good
		e.ClientDataJSON, e.AuthenticatorData, e.Signature = resp.Response.ClientDataJSON, resp.Response.AuthenticatorData, resp.Response.Signature
		e.SignCount = uint32(e.AuthenticatorData[33])<<24 | uint32(e.AuthenticatorData[34])<<16 | uint32(e.AuthenticatorData[35])<<8 | uint32(e.AuthenticatorData[36])
		if err := Verify(e, a.Binding); !errors.Is(err, ErrEvidence) {
			t.Errorf("%s: Verify = %v, want ErrEvidence", name, err)
		}
	}
}

// The worked example of docs/passkeys.md is testdata/evidence.json; it
// verifies, and its JSON round-trips unchanged.
func TestEvidenceExample(t *testing.T) {
	path := filepath.Join("testdata", "evidence.json")
	if os.Getenv("COUNTERSIGN_RECORD_PASSKEYS") == "1" {
		b, _ := json.MarshalIndent(approvedEvidence(t), "", "  ")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var e Evidence
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	if err := Verify(e, e.Binding()); err != nil {
		t.Fatalf("the worked example does not verify: %v", err)
	}
	again, _ := json.MarshalIndent(e, "", "  ")
	if string(again)+"\n" != string(raw) {
		t.Errorf("evidence JSON does not round-trip:\n%s\nwant\n%s", again, raw)
	}
}

func TestChallenge(t *testing.T) {
	b := Binding{CallID: "c_01", Digest: strings.Repeat("ab", 32), Operator: "alice"}
	canon, err := b.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"call_id":"c_01","digest":"` + strings.Repeat("ab", 32) + `","operator":"alice"}`
	if string(canon) != want {
		t.Fatalf("Canonical = %s, want %s", canon, want)
	}
	sum := sha256.Sum256([]byte("countersign/v1/approval:" + want))
	c1, err := NewChallenge(b)
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := NewChallenge(b)
	if len(c1) != 64 || string(c1[32:]) != string(sum[:]) {
		t.Fatalf("challenge = %x, want 32 random bytes then %x", c1, sum)
	}
	if string(c1[:32]) == string(c2[:32]) {
		t.Error("two challenges share their random part")
	}
	if err := CheckChallenge(c1, b); err != nil {
		t.Error(err)
	}
	for _, other := range []Binding{
		{CallID: "c_02", Digest: b.Digest, Operator: b.Operator},
		{CallID: b.CallID, Digest: strings.Repeat("ac", 32), Operator: b.Operator},
		{CallID: b.CallID, Digest: b.Digest, Operator: "bob"},
	} {
		if err := CheckChallenge(c1, other); !errors.Is(err, ErrChallengeBinding) {
			t.Errorf("CheckChallenge for %+v = %v", other, err)
		}
	}
	if err := CheckChallenge(c1[:63], b); !errors.Is(err, ErrChallengeBinding) {
		t.Errorf("short challenge: %v", err)
	}
	// Escaping follows RFC 8785, so any JCS library recomputes it.
	q := Binding{CallID: `c"1\`, Digest: b.Digest, Operator: "alice"}
	canon, _ = q.Canonical()
	if !strings.HasPrefix(string(canon), `{"call_id":"c\"1\\",`) {
		t.Errorf("Canonical = %s", canon)
	}
	if _, err := (Binding{CallID: "c", Digest: "not hex", Operator: "a"}).Canonical(); err == nil {
		t.Error("a binding with a malformed digest was accepted")
	}
}

func TestCheckSignCount(t *testing.T) {
	cases := []struct {
		stored, got uint32
		ok          bool
	}{
		{0, 0, true}, {0, 1, true}, {5, 6, true}, {5, 100, true},
		{5, 5, false}, {5, 4, false}, {5, 0, false}, {1, 0, false},
	}
	for _, c := range cases {
		err := checkSignCount(c.stored, c.got)
		if (err == nil) != c.ok {
			t.Errorf("%d → %d: err = %v, want ok %v", c.stored, c.got, err, c.ok)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"YubiKey 5", "Pixel 8 — work", "a"} {
		if err := CheckName(ok); err != nil {
			t.Errorf("CheckName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", 65), "a\nb", "a\x00", "a\u0085"} {
		if err := CheckName(bad); err == nil {
			t.Errorf("CheckName(%q) accepted", bad)
		}
	}
}

func TestNewRefusesOriginOffRPID(t *testing.T) {
	if _, err := New(Config{RPID: "approvals.example.com", Origins: []string{"https://evil.example"}}); err == nil {
		t.Error("an origin off the RP ID was accepted")
	}
	if _, err := New(Config{RPID: "example.com", Origins: []string{"https://approvals.example.com"}}); err != nil {
		t.Errorf("a subdomain origin: %v", err)
	}
	if _, err := New(Config{RPID: "example.com", Origins: []string{"https://badexample.com"}}); err == nil {
		t.Error("a look-alike suffix was accepted")
	}
}

// Two services over one ceremony store are two replicas: a prompt opened on
// one is finished on the other, and only once.
func TestReplayFinishOnAnotherReplica(t *testing.T) {
	r := newReplay(t)
	other, err := New(Config{RPID: r.rec.RPID, Origins: []string{r.rec.Origin}, Now: func() time.Time { return r.now },
		Ceremonies: r.svc.ceremonies})
	if err != nil {
		t.Fatal(err)
	}
	a := r.rec.assertion(t, "approve")
	id := r.begin(a, a.Binding)
	if _, err := other.FinishApproval(context.Background(), id, r.user, a.Binding, a.Response); err != nil {
		t.Fatalf("finish on the other replica: %v", err)
	}
	_, err = r.svc.FinishApproval(context.Background(), id, r.user, a.Binding, a.Response)
	wantReason(t, err, ReasonCeremony)
}

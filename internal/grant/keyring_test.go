package grant

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testkit"
)

// TestMain lets a test run this binary as a second process that rotates
// the keys of a directory, as `console keys rotate` does beside a server.
func TestMain(m *testing.M) {
	if dir := os.Getenv("GRANT_TEST_ROTATE_DIR"); dir != "" {
		os.Exit(rotateInChild(dir))
	}
	os.Exit(m.Run())
}

func rotateInChild(dir string) int {
	k, err := OpenKeyring(dir, testIssuer, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	n := 1
	fmt.Sscan(os.Getenv("GRANT_TEST_ROTATIONS"), &n)
	for range n {
		ki, err := k.Rotate()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(ki.KID)
	}
	return 0
}

func TestOpenKeyringCreatesAKey(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, dir := MustKeyring(t, clk)

	assertMode(t, dir, 0o700|os.ModeDir)
	assertMode(t, filepath.Join(dir, indexFile), 0o600)
	keys := k.Keys()
	if len(keys) != 1 {
		t.Fatalf("Keys() = %d keys, want 1", len(keys))
	}
	ki := keys[0]
	if ki.State != StateCurrent || !ki.Created.Equal(t0) || !ki.RotatedAt.IsZero() || !ki.RetiredAt.IsZero() {
		t.Errorf("first key = %+v, want current, created %v, never rotated", ki, t0)
	}
	if !ValidKID(ki.KID) || len(ki.KID) != 16 {
		t.Errorf("kid = %q, want 16 base64url characters", ki.KID)
	}
	assertMode(t, filepath.Join(dir, ki.KID+seedExt), 0o600)
	if got, want := dirNames(t, dir), sorted(".lock", ki.KID+".pem", "keys.json"); !slices.Equal(got, want) {
		t.Errorf("directory holds %v, want %v", got, want)
	}

	// Opening again finds the same key; nothing new is made.
	k2, err := OpenKeyring(dir, testIssuer, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	if got := k2.Keys(); len(got) != 1 || got[0].KID != ki.KID {
		t.Errorf("reopened Keys() = %+v, want only %s", got, ki.KID)
	}
	cur, err := k2.SigningKey()
	if err != nil || cur.KID != ki.KID {
		t.Errorf("SigningKey() = %s, %v, want %s", cur.KID, err, ki.KID)
	}
}

// TestOpenExistingAndCreateKeyring: OpenExistingKeyring makes nothing
// where there is no keyring (not the directory, not a lock file) and
// opens one that is there; CreateKeyring makes one once and then refuses,
// leaving the keys as they were.
func TestOpenExistingAndCreateKeyring(t *testing.T) {
	clk := testkit.NewClock(t0)
	parent := t.TempDir()
	missing := filepath.Join(parent, "keys")
	if _, err := OpenExistingKeyring(missing, testIssuer, clk.Now); !errors.Is(err, ErrNoKeyring) {
		t.Fatalf("OpenExistingKeyring on a missing directory = %v, want ErrNoKeyring", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("OpenExistingKeyring made %s: %v", missing, err)
	}
	empty := filepath.Join(parent, "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenExistingKeyring(empty, testIssuer, clk.Now); !errors.Is(err, ErrNoKeyring) {
		t.Fatalf("OpenExistingKeyring on an empty directory = %v, want ErrNoKeyring", err)
	}
	if got := dirNames(t, empty); len(got) != 0 {
		t.Fatalf("OpenExistingKeyring left %v in an empty directory, want nothing", got)
	}

	k, err := CreateKeyring(missing, testIssuer, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	assertMode(t, missing, 0o700|os.ModeDir)
	first := k.Keys()
	if len(first) != 1 || first[0].State != StateCurrent {
		t.Fatalf("a created keyring holds %+v, want one current key", first)
	}
	before := dirNames(t, missing)
	if _, err := CreateKeyring(missing, testIssuer, clk.Now); !errors.Is(err, ErrKeyringExists) {
		t.Fatalf("CreateKeyring again = %v, want ErrKeyringExists", err)
	}
	if got := dirNames(t, missing); !slices.Equal(got, before) {
		t.Errorf("a refused CreateKeyring changed the directory: %v, was %v", got, before)
	}
	k2, err := OpenExistingKeyring(missing, testIssuer, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	if got := k2.Keys(); len(got) != 1 || got[0].KID != first[0].KID {
		t.Errorf("OpenExistingKeyring found %+v, want only %s", got, first[0].KID)
	}
	if cur, err := k2.SigningKey(); err != nil || cur.KID != first[0].KID {
		t.Errorf("SigningKey() = %s, %v, want %s", cur.KID, err, first[0].KID)
	}
}

func TestOpenKeyringRefusesOpenPermissions(t *testing.T) {
	clk := testkit.NewClock(t0)
	t.Run("directory", func(t *testing.T) {
		dir := t.TempDir() + "/keys"
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenKeyring(dir, testIssuer, clk.Now); err == nil {
			t.Error("OpenKeyring on a 0755 directory succeeded, want an error")
		}
	})
	t.Run("private key", func(t *testing.T) {
		k, dir := MustKeyring(t, clk)
		kid := k.Keys()[0].KID
		if err := os.Chmod(filepath.Join(dir, kid+seedExt), 0o640); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenKeyring(dir, testIssuer, clk.Now); err == nil {
			t.Error("OpenKeyring with a 0640 private key succeeded, want an error")
		}
	})
	t.Run("index", func(t *testing.T) {
		_, dir := MustKeyring(t, clk)
		if err := os.Chmod(filepath.Join(dir, indexFile), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenKeyring(dir, testIssuer, clk.Now); err == nil {
			t.Error("OpenKeyring with a 0644 index succeeded, want an error")
		}
	})
	t.Run("empty issuer", func(t *testing.T) {
		if _, err := OpenKeyring(t.TempDir(), "", clk.Now); err == nil {
			t.Error("OpenKeyring with no issuer succeeded, want an error")
		}
	})
}

func TestOpenKeyringRefusesABadIndex(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, dir := MustKeyring(t, clk)
	kid := k.Keys()[0].KID
	good, err := os.ReadFile(filepath.Join(dir, indexFile))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"not JSON":        "keys",
		"duplicate":       strings.Replace(string(good), `"v":1`, `"v":1,"v":1`, 1),
		"unknown member":  strings.Replace(string(good), `"kid"`, `"use":"sig","kid"`, 1),
		"no keys":         `{"keys":[],"v":1}`,
		"other version":   strings.Replace(string(good), `"v":1`, `"v":2`, 1),
		"current rotated": strings.Replace(string(good), `"kid"`, `"rotated_at":"2030-01-01T00:00:00Z","kid"`, 1),
		"bad kid":         strings.Replace(string(good), kid, "../"+kid, 1),
		// A next key that repeats the current one, or was rotated, or sits
		// out of order.
		"next repeats a kid": strings.Replace(string(good), `],"v":1`, `],"next":`+entryOf(good)+`,"v":1`, 1),
		"next rotated": strings.Replace(string(good), `],"v":1`, `],"next":`+strings.Replace(strings.Replace(entryOf(good), kid, "AAAAAAAAAAAAAAAA", 1),
			`"kid"`, `"rotated_at":"2030-01-01T00:00:00Z","kid"`, 1)+`,"v":1`, 1),
		"next not an object": strings.Replace(string(good), `],"v":1`, `],"next":"x","v":1`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, indexFile), []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := OpenKeyring(dir, testIssuer, clk.Now); err == nil {
				t.Errorf("OpenKeyring with index %s succeeded, want an error", data)
			}
		})
	}
}

// entryOf is the first key entry of an index.
func entryOf(index []byte) string {
	s := string(index)
	return s[strings.Index(s, "[")+1 : strings.Index(s, "}")+1]
}

func TestRotation(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, dir := MustKeyring(t, clk)
	f := newFixture(t)
	first := k.Keys()[0].KID

	early, kidA := MustMint(t, k, f) // iat t0, exp t0+300
	T := clk.Advance(10 * time.Second)
	clk.Set(T.Add(-time.Second))
	last, _ := MustMint(t, k, f) // iat T-1, exp T+299: the last grant key A signs
	clk.Set(T)
	ki, err := k.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if kidA != first || ki.KID == first || ki.State != StateCurrent || !ki.Created.Equal(T) {
		t.Fatalf("Rotate() = %+v, want a new current key created at %v (old %s)", ki, T, first)
	}
	fresh, kidB := MustMint(t, k, f)
	if kidB != ki.KID {
		t.Errorf("Mint after Rotate signed with %s, want %s", kidB, ki.KID)
	}

	// The old key's private half is gone; its public half verifies on.
	if _, err := os.Stat(filepath.Join(dir, first+seedExt)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("private key of the rotated key: Stat = %v, want it deleted", err)
	}
	assertMode(t, filepath.Join(dir, kidB+seedExt), 0o600)
	assertMode(t, filepath.Join(dir, indexFile), 0o600)
	assertMode(t, dir, 0o700|os.ModeDir)

	retire := T.Add(MaxTTL)
	wantKeys := func(now time.Time, want ...string) {
		t.Helper()
		clk.Set(now)
		var got []string
		for _, ki := range k.Keys() {
			s := ki.KID + ":" + ki.State
			if ki.State != StateCurrent {
				if !ki.RotatedAt.Equal(T) || !ki.RetiredAt.Equal(retire) {
					t.Errorf("%s rotated %v retires %v, want %v and %v", ki.KID, ki.RotatedAt, ki.RetiredAt, T, retire)
				}
			}
			got = append(got, s)
		}
		if !slices.Equal(got, want) {
			t.Errorf("at %v Keys() = %v, want %v", now.Sub(T), got, want)
		}
		var jwks []string
		for _, jk := range parseJWKS(t, k.JWKS()) {
			jwks = append(jwks, jk.KID)
		}
		var wantJWKS []string
		for _, s := range want {
			if kid, state, _ := strings.Cut(s, ":"); state != StateRetired {
				wantJWKS = append(wantJWKS, kid)
			}
		}
		if !slices.Equal(jwks, wantJWKS) {
			t.Errorf("at %v JWKS kids = %v, want %v", now.Sub(T), jwks, wantJWKS)
		}
	}
	wantKeys(T, kidB+":current", kidA+":verifying")
	wantKeys(retire.Add(-time.Nanosecond), kidB+":current", kidA+":verifying")
	wantKeys(retire, kidB+":current", kidA+":retired")

	runVerifyCases(t, k, f, []verifyCase{
		{name: "old key, early grant, before its exp", token: early, now: T, passed: 9},
		{name: "old key, early grant, after its exp", token: early, now: retire.Add(-time.Second), passed: 8, reason: ReasonExpired},
		{name: "old key, last grant, T+298 s", token: last, now: retire.Add(-2 * time.Second), passed: 9},
		{name: "old key, last grant, T+299 s", token: last, now: retire.Add(-time.Second), passed: 8, reason: ReasonExpired},
		{name: "old key, last grant, T+300 s", token: last, now: retire, passed: 1, reason: ReasonUnknownKey},
		{name: "old key, early grant, T+300 s", token: early, now: retire, passed: 1, reason: ReasonUnknownKey},
		{name: "new key", token: fresh, now: retire.Add(-time.Second), passed: 9},
	})

	// A second rotation leaves two rotated keys; the retired one stays
	// listed.
	clk.Set(retire.Add(time.Minute))
	kc, err := k.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	clk.Set(retire.Add(2 * time.Minute))
	got := k.Keys()
	if len(got) != 3 || got[0].KID != kc.KID || got[1].State != StateVerifying || got[2].State != StateRetired {
		t.Errorf("after two rotations Keys() = %+v", got)
	}
	if names := dirNames(t, dir); !slices.Equal(names, sorted(".lock", kc.KID+".pem", "keys.json")) {
		t.Errorf("directory holds %v, want only the current private key", names)
	}
}

func TestJWKSShape(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(t, clk)
	ki := k.Keys()[0]
	want := fmt.Sprintf(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"%s","kid":"%s","alg":"EdDSA","use":"sig"}]}`,
		enc(ki.PublicKey), ki.KID)
	if got := string(k.JWKS()); got != want {
		t.Errorf("JWKS\n got %s\nwant %s", got, want)
	}
	if len(ki.PublicKey) != 32 {
		t.Errorf("public key is %d bytes, want 32", len(ki.PublicKey))
	}
}

func parseJWKS(t *testing.T, b []byte) []JWK {
	t.Helper()
	var set struct{ Keys []JWK }
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatalf("JWKS %s: %v", b, err)
	}
	return set.Keys
}

func TestSecondKeyringSeesRotation(t *testing.T) {
	clk := testkit.NewClock(t0)
	server, dir := MustKeyring(t, clk)
	f := newFixture(t)
	cli, err := OpenKeyring(dir, testIssuer, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	old := server.Keys()[0].KID

	ki, err := cli.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	// Mint looks at the directory every time: the very next grant uses
	// the new key.
	token, kid := MustMint(t, server, f)
	if kid != ki.KID {
		t.Errorf("server minted with %s after another keyring rotated to %s (old %s)", kid, ki.KID, old)
	}
	if r := cli.Verify(token, f.ctx, f.call, t0); r.Reason != "" {
		t.Errorf("the rotating keyring refused the server's grant: %s", checksString(r))
	}

	// A grant signed with a key this keyring has not seen yet makes it
	// look at once.
	ki2, err := cli.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	token2, _ := MustMint(t, cli, f)
	if r := server.Verify(token2, f.ctx, f.call, t0); r.Reason != "" {
		t.Errorf("server refused a grant of the new key %s: %s", ki2.KID, checksString(r))
	}

	// Keys and JWKS pick up a rotation once RefreshInterval has passed
	// (the next look at the directory); the deadline only stops a test that
	// would never see it, however loaded the machine.
	ki3, err := cli.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(RefreshInterval + 30*time.Second)
	for server.Keys()[0].KID != ki3.KID {
		if time.Now().After(deadline) {
			t.Fatalf("server Keys() still shows %s 30 s after the refresh interval (%v) that followed a rotation to %s", server.Keys()[0].KID, RefreshInterval, ki3.KID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRotationInAnotherProcess rotates from a second OS process while this
// one mints: every grant is signed by a key that verifies for the whole of
// the grant's life, and the grant minted after the other process finished
// uses its last key.
func TestRotationInAnotherProcess(t *testing.T) {
	dir := t.TempDir() + "/keys"
	k, err := OpenKeyring(dir, testIssuer, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)

	const rotations = 20
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GRANT_TEST_ROTATE_DIR="+dir, fmt.Sprintf("GRANT_TEST_ROTATIONS=%d", rotations))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	type minted struct {
		token, kid string
		exp        int64
	}
	var grants []minted
	done := make(chan []string)
	go func() {
		var kids []string
		s := bufio.NewScanner(out)
		for s.Scan() {
			kids = append(kids, s.Text())
		}
		done <- kids
	}()
	var kids []string
mint:
	for {
		select {
		case kids = <-done:
			break mint
		default:
		}
		token, kid, err := k.Mint(f.claims())
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, minted{token, kid, payloadOf(t, token)[3].Value.(int64)})
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rotating process: %v", err)
	}
	if len(kids) != rotations {
		t.Fatalf("other process printed %d kids, want %d", len(kids), rotations)
	}
	_, kid := MustMint(t, k, f)
	if kid != kids[len(kids)-1] {
		t.Errorf("Mint after the other process rotated used %s, want %s", kid, kids[len(kids)-1])
	}

	retires := map[string]time.Time{}
	for _, ki := range k.Keys() {
		retires[ki.KID] = ki.RetiredAt
	}
	for _, g := range grants {
		r, ok := retires[g.kid]
		if !ok {
			t.Fatalf("grant signed with %s, which is not in the index", g.kid)
		}
		if !r.IsZero() && g.exp > r.Unix() {
			t.Errorf("grant of %s expires at %d, after its key retires at %d", g.kid, g.exp, r.Unix())
		}
		if res := k.Verify(g.token, f.ctx, f.call, time.Now()); res.Reason != "" {
			t.Errorf("grant of %s: %s", g.kid, checksString(res))
		}
	}
	t.Logf("%d grants minted during %d rotations in another process", len(grants), rotations)
}

// TestConcurrentMintVerifyRotate races minting, verifying, listing and
// rotating on two keyrings over one directory.
func TestConcurrentMintVerifyRotate(t *testing.T) {
	dir := t.TempDir() + "/keys"
	a, err := OpenKeyring(dir, testIssuer, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenKeyring(dir, testIssuer, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	stop := make(chan struct{})
	for i := range 4 {
		k := []*Keyring{a, b}[i%2]
		other := []*Keyring{a, b}[(i+1)%2]
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				token, _, err := k.Mint(f.claims())
				if err != nil {
					errs <- err.Error()
					return
				}
				if r := other.Verify(token, f.ctx, f.call, time.Now()); r.Reason != "" {
					errs <- checksString(r)
					return
				}
				_ = k.JWKS()
			}
		})
	}
	for i := range 10 {
		if _, err := []*Keyring{a, b}[i%2].Rotate(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if got := len(a.Keys()); got != 11 {
		t.Errorf("after 10 rotations Keys() has %d keys, want 11", got)
	}
}

func TestMissingPrivateKey(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, dir := MustKeyring(t, clk)
	f := newFixture(t)
	kid := k.Keys()[0].KID
	if err := os.Remove(filepath.Join(dir, kid+seedExt)); err != nil {
		t.Fatal(err)
	}
	k2, err := OpenKeyring(dir, testIssuer, clk.Now)
	if err != nil {
		t.Fatalf("OpenKeyring without the private key: %v", err)
	}
	if _, _, err := k2.Mint(f.claims()); err == nil {
		t.Error("Mint without a private key succeeded")
	}
	if _, err := k2.SigningKey(); err == nil {
		t.Error("SigningKey without a private key succeeded")
	}
	if _, err := k2.Rotate(); err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	if _, _, err := k2.Mint(f.claims()); err != nil {
		t.Errorf("Mint after Rotate: %v", err)
	}
	// The first keyring picks the new key up too.
	if _, kid2, err := k.Mint(f.claims()); err != nil || kid2 == kid {
		t.Errorf("first keyring Mint = %s, %v, want the new key", kid2, err)
	}
}

func TestMintFillsAndRefuses(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(t, clk)
	f := newFixture(t)

	token, _ := MustMint(t, k, f)
	p := payloadOf(t, token)
	names := make([]string, len(p))
	for i, m := range p {
		names[i] = m.Name
	}
	if want := []string{"aud", "call_id", "digest", "exp", "iat", "iss", "jti", "sub", "target", "tool"}; !slices.Equal(names, want) {
		t.Errorf("claims %v, want %v", names, want)
	}
	c := f.claims()
	c.JTI, c.IssuedAt, c.ExpiresAt = strings.Repeat("ab", 16), t0.Unix()-10, t0.Unix()+60
	token, _, err := k.Mint(c)
	if err != nil {
		t.Fatal(err)
	}
	r := k.Verify(token, f.ctx, f.call, t0)
	if r.Claims == nil || r.Claims.JTI != c.JTI || r.Claims.IssuedAt != c.IssuedAt || r.Claims.ExpiresAt != c.ExpiresAt {
		t.Errorf("given claims not kept: %+v", r.Claims)
	}

	tests := map[string]func(*Claims){
		"other issuer":      func(c *Claims) { c.Issuer = "elsewhere" },
		"no subject":        func(c *Claims) { c.Subject = "" },
		"no audience":       func(c *Claims) { c.Audience = "" },
		"no call id":        func(c *Claims) { c.CallID = "" },
		"no tool":           func(c *Claims) { c.Tool = "" },
		"no target":         func(c *Claims) { c.Target = "" },
		"bad digest":        func(c *Claims) { c.Digest = "abc" },
		"bad jti":           func(c *Claims) { c.JTI = "not-hex" },
		"lifetime 301 s":    func(c *Claims) { c.IssuedAt, c.ExpiresAt = t0.Unix()-1, t0.Unix()+300 },
		"exp too late":      func(c *Claims) { c.IssuedAt, c.ExpiresAt = t0.Unix()+100, t0.Unix()+301 },
		"exp before iat":    func(c *Claims) { c.IssuedAt, c.ExpiresAt = t0.Unix(), t0.Unix()-1 },
		"invalid UTF-8":     func(c *Claims) { c.Target = "cus_\xff" },
		"negative lifetime": func(c *Claims) { c.ExpiresAt = -5 },
	}
	for name, edit := range tests {
		t.Run(name, func(t *testing.T) {
			c := f.claims()
			edit(&c)
			if token, _, err := k.Mint(c); err == nil {
				t.Errorf("Mint(%+v) = %s, want an error", c, token)
			}
		})
	}
}

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode() & (os.ModeDir | os.ModePerm); got != want {
		t.Errorf("%s mode %v, want %v", filepath.Base(path), got, want)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}

// A prepared key whose private key went missing is refused at activation
// and replaced by the next Prepare.
func TestPreparedKeyWithoutPrivateKey(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, dir := MustKeyring(t, clk)
	cur := k.Keys()[0].KID
	next, err := k.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, next.KID+seedExt)); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Activate(); err == nil {
		t.Fatal("activated a key without its private key")
	}
	if ks := k.Keys(); ks[1].KID != cur || ks[1].State != StateCurrent {
		t.Fatalf("after the refused activation: %+v", ks)
	}
	again, err := k.Prepare()
	if err != nil || again.KID == next.KID {
		t.Fatalf("Prepare after the loss = %+v, %v; want a new key", again, err)
	}
	if ki, err := k.Activate(); err != nil || ki.KID != again.KID {
		t.Fatalf("Activate = %+v, %v", ki, err)
	}
	f := newFixture(t)
	if _, kid := MustMint(t, k, f); kid != again.KID {
		t.Fatalf("signs with %s, want %s", kid, again.KID)
	}
}

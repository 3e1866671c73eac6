package console

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"

	"github.com/gorilla/securecookie"

	"github.com/countersign/countersign/internal/account"
)

// The console cookie's values round-trip as JSON, a cookie an earlier
// version wrote as gob still reads, and anything but strings is refused.
func TestCookieValuesAreJSON(t *testing.T) {
	hashKey, blockKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	codec := func() *securecookie.SecureCookie { return securecookie.New(hashKey, blockKey) }
	now := codec().SetSerializer(cookieJSON{})

	plain, err := cookieJSON{}.Serialize(map[any]any{cookieSID: "s1"})
	if err != nil || string(plain) != `{"`+cookieSID+`":"s1"}` {
		t.Fatalf("serialized = %s, %v", plain, err)
	}
	enc, err := now.Encode("cs", map[any]any{cookieSID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[any]any{}
	if err := now.Decode("cs", enc, &got); err != nil || got[cookieSID] != "s1" || len(got) != 1 {
		t.Fatalf("round trip = %v, %v", got, err)
	}
	// Written by the gob default before: still read.
	old, err := codec().Encode("cs", map[any]any{cookieSID: "s0", cookiePre: "p0"})
	if err != nil {
		t.Fatal(err)
	}
	got = map[any]any{}
	if err := now.Decode("cs", old, &got); err != nil || got[cookieSID] != "s0" || got[cookiePre] != "p0" {
		t.Fatalf("a gob cookie = %v, %v", got, err)
	}
	// Only strings.
	if _, err := now.Encode("cs", map[any]any{cookieSID: 42}); err == nil {
		t.Error("a number was written into the cookie")
	}
	// A cookie made with other keys is still refused (the envelope is unchanged).
	other, _ := securecookie.New(bytes.Repeat([]byte{3}, 32), blockKey).SetSerializer(cookieJSON{}).Encode("cs", map[any]any{cookieSID: "x"})
	if err := now.Decode("cs", other, &map[any]any{}); err == nil {
		t.Error("a cookie signed with another key was read")
	}
}

// The console writes its session cookie as JSON: a signed-in browser's
// cookie reads with a JSON-only codec over the console's keys.
func TestConsoleCookieWrittenAsJSON(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("alice", account.RoleOperator, "correct horse")
	b := e.browser()
	b.login("alice", "correct horse")
	ctx := context.Background()
	accounts := account.NewService(e.db.Accounts(), nil)
	hashKey, err := accounts.ConsoleSecret(ctx, "cookie-hash", 64)
	if err != nil {
		t.Fatal(err)
	}
	blockKey, err := accounts.ConsoleSecret(ctx, "cookie-block", 32)
	if err != nil {
		t.Fatal(err)
	}
	jsonOnly := securecookie.New(hashKey, blockKey).SetSerializer(securecookie.JSONEncoder{})
	u, _ := url.Parse(e.url)
	for _, c := range b.jar.Cookies(u) {
		if c.Name != e.c.cookieName {
			continue
		}
		var values map[string]string
		if err := jsonOnly.Decode(c.Name, c.Value, &values); err != nil || values[cookieSID] == "" {
			t.Fatalf("the session cookie read as JSON: %v, %v", values, err)
		}
		return
	}
	t.Fatal("no session cookie after signing in")
}

// BenchmarkCookieDecode reads one session cookie, as every console request
// does, written as gob (securecookie's default) and as JSON:
//
//	go test -run '^$' -bench BenchmarkCookieDecode -benchmem ./internal/server/
func BenchmarkCookieDecode(b *testing.B) {
	hashKey, blockKey := bytes.Repeat([]byte{1}, 64), bytes.Repeat([]byte{2}, 32)
	for _, tc := range []struct {
		name string
		sz   securecookie.Serializer
	}{{"gob", securecookie.GobEncoder{}}, {"json", cookieJSON{}}} {
		b.Run(tc.name, func(b *testing.B) {
			codec := securecookie.New(hashKey, blockKey).SetSerializer(tc.sz)
			enc, err := codec.Encode("countersign", map[any]any{cookieSID: "0123456789abcdef0123456789abcdef"})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				values := map[any]any{}
				if err := codec.Decode("countersign", enc, &values); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The cookie's values read the same through flatObject as through
// encoding/json, whatever the bytes (flatObject leaves to encoding/json
// what it does not read), and the console's own cookie reads with fewer
// than half of encoding/json's allocations.
func TestCookieValuesReadAsJSONReads(t *testing.T) {
	cases := []string{
		`{}`, `{"sid":"s1"}`, `{"auth_at":"2026-01-02T03:04:05Z","sid":"abc"}`, `{"pre":"p","sid":"s","x":"y","z":""}`,
		`{"a":"1","b":"2","c":"3","d":"4","e":"5"}`, `{"sid":"a\"b"}`, `{"sid":"a\u0041"}`, `{"sid":"é"}`, `{ "sid":"s"}`,
		`{"sid":"s",}`, `{"sid":1}`, `{"sid":"s"`, `{"sid" :"s"}`, `{"sid":"s","sid":"t"}`, `{"":""}`, `{"sid":"tab	"}`,
	}
	r := rand.New(rand.NewPCG(3, 4))
	parts := []string{`{`, `}`, `"`, `:`, `,`, `sid`, `pre`, `a`, `\`, ` `, `é`, `1`}
	for range 5000 {
		var b strings.Builder
		b.WriteString(`{"`)
		for range r.IntN(10) {
			b.WriteString(parts[r.IntN(len(parts))])
		}
		b.WriteString(`"}`)
		cases = append(cases, b.String())
	}
	for _, c := range cases {
		got := map[any]any{}
		gotErr := cookieJSON{}.Deserialize([]byte(c), &got)
		var in map[string]string
		wantErr := json.Unmarshal([]byte(c), &in)
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("%s: error %v, encoding/json's %v", c, gotErr, wantErr)
		}
		if gotErr != nil {
			continue
		}
		if len(got) != len(in) {
			t.Fatalf("%s: read %v, encoding/json %v", c, got, in)
		}
		for k, v := range in {
			if got[k] != v {
				t.Fatalf("%s: read %v, encoding/json %v", c, got, in)
			}
		}
	}
	reads := func(src []byte) float64 {
		return testing.AllocsPerRun(100, func() {
			values := map[any]any{}
			if err := (cookieJSON{}).Deserialize(src, &values); err != nil || len(values) != 2 {
				t.Fatal(values, err)
			}
		})
	}
	// Each value costs two allocations (its bytes and its box), the map
	// the rest: seven in all, where encoding/json takes nineteen.
	flat := reads([]byte(`{"auth_at":"2026-01-02T03:04:05Z","sid":"` + strings.Repeat("s", 43) + `"}`))
	general := reads([]byte(`{"auth_at":"2026-01-02T03:04:05Z", "sid":"` + strings.Repeat("s", 43) + `"}`))
	t.Logf("%.0f allocations, %.0f through encoding/json", flat, general)
	if flat > 7 {
		t.Errorf("reading the console's cookie made %.0f allocations, want at most 7 (encoding/json: %.0f)", flat, general)
	}
}

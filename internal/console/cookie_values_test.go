package console

import (
	"bytes"
	"context"
	"net/url"
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

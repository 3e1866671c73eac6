package present

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func testKey(t *testing.T, b byte) *Key {
	t.Helper()
	k, err := NewKey(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestShortSecretRefused(t *testing.T) {
	if _, err := NewKey(make([]byte, 31)); err == nil {
		t.Fatal("a 31-byte secret was accepted")
	}
}

// A token checks only for exactly the page kind, viewer, rendering time and
// (call, digest) pairs it was made for, under the key that made it.
func TestTokenBindsEverythingShown(t *testing.T) {
	k := testKey(t, 1)
	at := time.Date(2026, 12, 5, 9, 0, 0, 123e6, time.UTC)
	now := at.Add(time.Minute)
	items := []Item{{"call_a", "aa"}, {"call_b", "bb"}}
	s := Shown{Page: PageBatch, Viewer: "alice", At: at, Items: items}
	tok := k.Token(s)

	got, err := k.Check(tok, PageBatch, "alice", []Item{items[1], items[0]}, now, time.Hour)
	if err != nil {
		t.Fatalf("the token of the page does not check: %v", err)
	}
	if !got.At.Equal(at) || got.Page != PageBatch || got.Viewer != "alice" || len(got.Items) != 2 {
		t.Errorf("presented = %+v; want the page as rendered", got)
	}

	ms := strconv.FormatInt(at.UnixMilli(), 10)
	for _, c := range []struct {
		name, token, page, viewer string
		items                     []Item
		key                       *Key
	}{
		{"another viewer", tok, PageBatch, "bob", items, k},
		{"another page kind", strings.Replace(tok, ".batch.", ".call.", 1), PageCall, "alice", items, k},
		{"another digest", tok, PageBatch, "alice", []Item{{"call_a", "aa"}, {"call_b", "bc"}}, k},
		{"another call", tok, PageBatch, "alice", []Item{{"call_a", "aa"}, {"call_c", "bb"}}, k},
		{"a call more", tok, PageBatch, "alice", append([]Item{{"call_c", "cc"}}, items...), k},
		{"a call fewer", tok, PageBatch, "alice", items[:1], k},
		{"a later time", strings.Replace(tok, ms, strconv.FormatInt(at.UnixMilli()+1, 10), 1), PageBatch, "alice", items, k},
		{"another key", tok, PageBatch, "alice", items, testKey(t, 2)},
		{"a truncated mac", tok[:len(tok)-2], PageBatch, "alice", items, k},
		{"no token", "", PageBatch, "alice", items, k},
		{"garbage", "p1.batch.x.y", PageBatch, "alice", items, k},
	} {
		if _, err := c.key.Check(c.token, c.page, c.viewer, c.items, now, time.Hour); err == nil {
			t.Errorf("%s: checked", c.name)
		} else if c.token == "" && !errors.Is(err, ErrMissing) || c.token != "" && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// A page rendered longer ago than the decision window, or ahead of the
// clock beyond skew, is refused; within them it checks.
func TestTokenAge(t *testing.T) {
	k := testKey(t, 1)
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	items := []Item{{"call_a", "aa"}}
	tok := k.Token(Shown{Page: PageCall, Viewer: "alice", At: at, Items: items})
	for _, c := range []struct {
		now time.Time
		ok  bool
	}{
		{at.Add(10 * time.Minute), true},
		{at.Add(10*time.Minute + time.Millisecond), false},
		{at.Add(-skew), true},
		{at.Add(-skew - time.Millisecond), false},
	} {
		_, err := k.Check(tok, PageCall, "alice", items, c.now, 10*time.Minute)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, ErrStale) {
			t.Errorf("checked at %s: err = %v; want ok %v", c.now.Sub(at), err, c.ok)
		}
	}
}

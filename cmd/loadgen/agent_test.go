package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"sync/atomic"
	"testing"
	"time"
)

// The call the fake agent API answers with: its args hold a number no
// float64 keeps, so a flow that decoded and re-encoded them would present
// another call than the one approved.
const fakeArgs = `{"city":"flow x 1","n":12345678901234567891}`

// fakeAgentAPI answers submit, long-poll and redeem as the console does,
// and records what the agent sent.
type fakeAgentAPI struct {
	polls       atomic.Int64
	pendingOnce bool
	redeemCode  int
	redeemBody  string
	redeemed    atomic.Value // the body the agent presented
	submitted   atomic.Value
}

func (f *fakeAgentAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer tok" {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"code":"unauthorized","message":"no token"}}`)
		return
	}
	body, _ := io.ReadAll(r.Body)
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/api/v1/calls":
		f.submitted.Store(string(body))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"call_a","status":"pending","digest":"d1","approvals":{"required":1,"list":[{"status":"x"}]},"tool":"weather.search","target":"weather:forecast","args":`+fakeArgs+`}`)
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/calls/call_a":
		if r.URL.Query().Get("wait") == "" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		status := "approved"
		if f.polls.Add(1) == 1 && f.pendingOnce {
			status = "pending"
		}
		fmt.Fprint(w, `{"id":"call_a","status":"`+status+`","digest":"d1","grant":"g.r-a_nt","tool":"weather.search","target":"weather:forecast","args":`+fakeArgs+`}`)
	case r.Method == http.MethodPost && r.URL.Path == "/api/v1/redeem":
		f.redeemed.Store(string(body))
		w.WriteHeader(f.redeemCode)
		fmt.Fprint(w, f.redeemBody)
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":{"code":"not_found","message":"no such call"}}`)
	}
}

// TestAgentFlowPresentsTheApprovedCall: the agent submits its proposal,
// long-polls past a pending answer, and redeems the grant with the call
// exactly as the console returned it, args byte for byte; the redemption's
// answer decides whether the flow counts.
func TestAgentFlowPresentsTheApprovedCall(t *testing.T) {
	f := &fakeAgentAPI{pendingOnce: true, redeemCode: 200,
		redeemBody: `{"decision":"accepted","call_id":"call_a","outcome_within":30,"lease_until":"2030-01-02T03:04:05Z","checks":[]}`}
	srv, conns := countingServer(t, f)
	ctx := context.Background()
	a, err := newAgentConn(ctx, srv.URL, "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer a.h.Close()
	s, err := a.submit(submitBody(nil, `flow "x" 1`))
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "call_a" || s.Digest != "d1" {
		t.Fatalf("submitted %+v", s)
	}
	var prop struct {
		Tool, Target string
		Args         map[string]string
	}
	if err := json.Unmarshal([]byte(f.submitted.Load().(string)), &prop); err != nil || prop.Tool != "weather.search" ||
		prop.Target != "weather:forecast" || prop.Args["city"] != `flow "x" 1` {
		t.Fatalf("proposal sent %s (%v)", f.submitted.Load(), err)
	}
	d, err := a.wait(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != "approved" || f.polls.Load() != 2 {
		t.Fatalf("wait returned %+v after %d polls, want approved after 2", d, f.polls.Load())
	}
	r, err := a.redeem(d)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"grant":"g.r-a_nt","call":{"tool":"weather.search","target":"weather:forecast","args":` + fakeArgs + `}}`
	if got := f.redeemed.Load().(string); got != want {
		t.Fatalf("presented\n%s\nwant\n%s", got, want)
	}
	if !r.accepted || r.OutcomeWithin != 30 || !r.LeaseUntil.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("redemption %+v", r)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for one flow, want 1", n)
	}
}

// TestAgentFlowRefusals: a rejected or replayed grant is not a flow; a
// frozen call and the API's errors come back with their code, and an
// answer the flow cannot read with unexpected_response.
func TestAgentFlowRefusals(t *testing.T) {
	ctx := context.Background()
	d := decided{ID: "call_a", Status: "approved", Grant: "g", Tool: "weather.search", Target: "weather:forecast", Args: json.RawMessage(fakeArgs)}
	for _, tc := range []struct {
		code     int
		body     string
		accepted bool
		errCode  string
	}{
		{200, `{"decision":"accepted","call_id":"call_a"}`, true, ""},
		{409, `{"decision":"rejected","reason":"grant_replayed"}`, false, ""},
		{403, `{"decision":"rejected","reason":"grant_mismatch"}`, false, ""},
		{200, `{"decision":"rejected","reason":"odd"}`, false, ""},
		{503, `{"decision":"rejected","reason":"frozen","freeze":{"reason":"incident"}}`, false, "frozen"},
		{503, `{"error":{"code":"unavailable","message":"draining"}}`, false, "unavailable"},
		{400, `{"error":{"code":"invalid_request","message":"bad"}}`, false, "invalid_request"},
		{200, `<html>`, false, "unexpected_response"},
	} {
		f := &fakeAgentAPI{redeemCode: tc.code, redeemBody: tc.body}
		srv, _ := countingServer(t, f)
		a, err := newAgentConn(ctx, srv.URL, "tok")
		if err != nil {
			t.Fatal(err)
		}
		r, err := a.redeem(d)
		a.h.Close()
		if tc.errCode != "" {
			if got := errKind(err); got != tc.errCode {
				t.Errorf("%d %s: error %v (%s), want code %s", tc.code, tc.body, err, got, tc.errCode)
			}
			continue
		}
		if err != nil || r.accepted != tc.accepted {
			t.Errorf("%d %s: accepted %v, %v; want %v", tc.code, tc.body, r.accepted, err, tc.accepted)
		}
	}
	// A token the console refuses, and a call it does not know.
	f := &fakeAgentAPI{}
	srv, _ := countingServer(t, f)
	bad, _ := newAgentConn(ctx, srv.URL, "other")
	defer bad.h.Close()
	if _, err := bad.submit(submitBody(nil, "x")); errKind(err) != "unauthorized" {
		t.Errorf("submit with a refused token: %v", err)
	}
	good, _ := newAgentConn(ctx, srv.URL, "tok")
	defer good.h.Close()
	if _, err := good.wait(ctx, "call_b"); errKind(err) != "not_found" {
		t.Errorf("wait for an unknown call: %v", err)
	}
}

// TestApproverPostsThePagesToken: the approver reads the call's page with
// the session's cookie, and posts the approve form with the session's
// CSRF token, the digest and the page's presentation token (unescaped),
// from the console's own origin; an answer other than 303 is an error.
func TestApproverPostsThePagesToken(t *testing.T) {
	var posted atomic.Value
	var answer atomic.Int64
	answer.Store(http.StatusSeeOther)
	srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie("sess"); err != nil || c.Value != "s1" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/calls/call_a":
			fmt.Fprint(w, `<form><input type="hidden" name="presented" value="p1&amp;x"><button>Approve</button></form>`)
		case r.Method == http.MethodPost && r.URL.Path == "/calls/call_a/approve":
			r.ParseForm()
			posted.Store(fmt.Sprintf("%s|%s|%s|%s|%s", r.PostForm.Get("csrf"), r.PostForm.Get("digest"),
				r.PostForm.Get("presented"), r.Header.Get("Origin"), r.Header.Get("Sec-Fetch-Site")))
			w.WriteHeader(int(answer.Load()))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	jar, _ := cookiejar.New(nil)
	u, _ := url.Parse(srv.URL)
	jar.SetCookies(u, []*http.Cookie{{Name: "sess", Value: "s1"}})
	ap := newApprover(context.Background(), &webSession{base: srv.URL, client: &http.Client{Jar: jar}, csrf: "c+1"})
	defer ap.close()
	if err := ap.approve(srv.URL, "call_a", "d/1"); err != nil {
		t.Fatal(err)
	}
	want := "c+1|d/1|p1&x|" + srv.URL + "|same-origin"
	if got := posted.Load(); got != want {
		t.Fatalf("posted %q, want %q", got, want)
	}
	answer.Store(http.StatusForbidden)
	if err := ap.approve(srv.URL, "call_a", "d/1"); err == nil || err.Error() != "status_403" {
		t.Fatalf("a refused approval: %v, want status_403", err)
	}
	if err := ap.approve(srv.URL, "call_b", "d/1"); err == nil || err.Error() != "call_page" {
		t.Fatalf("an unknown call: %v, want call_page", err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

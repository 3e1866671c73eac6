package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/countersign/countersign/client"
	"github.com/countersign/countersign/internal/canonical"
)

func refund(amount int64) client.Proposal {
	return client.Proposal{Tool: "payments.refund", Target: "invoice:INV-1042",
		Args:      map[string]any{"amount_minor": amount, "currency": "USD", "reason_code": "duplicate"},
		Rationale: "the customer was charged twice"}
}

type waitResult struct {
	call *client.Call
	err  error
}

// waitAsync runs c.Wait in the background.
func waitAsync(ctx context.Context, c *client.Client, id string) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		call, err := c.Wait(ctx, id)
		ch <- waitResult{call, err}
	}()
	return ch
}

func receive(t *testing.T, ch <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("Wait did not return within 20s")
	}
	return waitResult{}
}

func TestWholeLoop(t *testing.T) {
	tc := startConsole(t, t.TempDir(), "127.0.0.1:0")
	c := client.New(tc.url, tc.token("agent:billing-bot", "payments-host"))
	ctx := context.Background()

	call, err := c.Submit(ctx, refund(1299))
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if !call.Created || call.Status != client.StatusPending {
		t.Fatalf("Submit: Created=%v Status=%q, want true, pending", call.Created, call.Status)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(call.Digest) {
		t.Errorf("Digest=%q, want 64 lowercase hex digits", call.Digest)
	}
	if call.Actor != "agent:billing-bot" || call.Audience != "payments-host" {
		t.Errorf("Actor, Audience=%q, %q, want the token's", call.Actor, call.Audience)
	}
	if got, want := call.Approvals, (client.Approvals{Required: 1, Received: 0}); !reflect.DeepEqual(got, want) {
		t.Errorf("Approvals=%+v, want %+v", got, want)
	}
	if got, want := string(call.Args), `{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}`; got != want {
		t.Errorf("Args=%s, want %s", got, want)
	}
	if call.CreatedAt.IsZero() || !call.DecideBy.After(call.CreatedAt) || call.Grant != "" {
		t.Errorf("CreatedAt=%v DecideBy=%v Grant=%q: want times in order and no grant yet", call.CreatedAt, call.DecideBy, call.Grant)
	}

	again, err := c.Submit(ctx, refund(1299))
	if err != nil {
		t.Fatalf("second Submit: %v", err)
	}
	if again.Created || again.ID != call.ID {
		t.Errorf("second Submit: Created=%v ID=%s, want false, %s", again.Created, again.ID, call.ID)
	}

	waited := waitAsync(ctx, c, call.ID)
	tc.waitForWaiters(1)
	if _, err := tc.queue.Approve(ctx, "alice", "cli", call.ID, call.Digest); err != nil {
		t.Fatalf("Approve: %v", err)
	}
	r := receive(t, waited)
	if r.err != nil {
		t.Fatalf("Wait: %v", r.err)
	}
	approved := r.call
	if approved.Status != client.StatusApproved || approved.Grant == "" || approved.GrantExpiresAt.IsZero() || approved.GrantState != client.GrantLive {
		t.Fatalf("Wait: Status=%q Grant=%q GrantExpiresAt=%v GrantState=%q, want approved with a live grant", approved.Status, approved.Grant, approved.GrantExpiresAt, approved.GrantState)
	}
	if got := approved.Approvals.Received; got != 1 {
		t.Errorf("Approvals.Received=%d, want 1", got)
	}

	// A call other than the approved one is refused and consumes nothing.
	tampered := approved.Spec()
	tampered.Args = json.RawMessage(`{"amount_minor":999999,"currency":"USD","reason_code":"duplicate"}`)
	res, err := c.Redeem(ctx, approved.Grant, tampered)
	if err != nil {
		t.Fatalf("Redeem tampered: %v", err)
	}
	if res.Accepted || res.Reason != "digest_mismatch" || res.StatusCode != http.StatusForbidden {
		t.Errorf("Redeem tampered: Accepted=%v Reason=%q StatusCode=%d, want false, digest_mismatch, 403", res.Accepted, res.Reason, res.StatusCode)
	}
	if f := res.Failed(); f == nil || f.Name != "digest" {
		t.Errorf("Failed()=%+v, want the digest check", f)
	}

	res, err = c.Redeem(ctx, approved.Grant, approved.Spec())
	if err != nil {
		t.Fatalf("Redeem: %v", err)
	}
	if !res.Accepted || res.Decision != "accepted" || res.CallID != call.ID || res.Reason != "" {
		t.Fatalf("Redeem: %+v, want accepted for %s", res, call.ID)
	}
	names := []string{"shape", "signature", "claims", "actor", "audience", "tool", "target", "digest", "time", "status", "nonce"}
	if len(res.Checks) != len(names) {
		t.Fatalf("Checks=%+v, want %d checks", res.Checks, len(names))
	}
	for i, ch := range res.Checks {
		if ch.Name != names[i] || ch.OK == nil || !*ch.OK {
			t.Errorf("Checks[%d]=%s ok=%v, want %s ok=true", i, ch.Name, ch.OK, names[i])
		}
	}

	if canonicalDigest(res.Envelope) != call.Digest || res.Digest != call.Digest || res.OutcomeWithin != 300 ||
		res.LeaseUntil.IsZero() {
		t.Errorf("Redeem: envelope %s digest %s lease %v within %d; want the bytes of digest %s and a 300 s lease",
			res.Envelope, res.Digest, res.LeaseUntil, res.OutcomeWithin, call.Digest)
	}
	lease, err := c.Heartbeat(ctx, call.ID, 90*time.Second)
	if err != nil || lease.CallID != call.ID || lease.ExtendMax != 300 || !lease.LeaseUntil.Equal(res.LeaseUntil) {
		t.Errorf("Heartbeat(90s) = %+v, %v; want the lease unchanged (never shortened)", lease, err)
	}
	if lease, err = c.Heartbeat(ctx, call.ID, 0); err != nil || lease.LeaseUntil.Before(res.LeaseUntil) {
		t.Errorf("Heartbeat(0) = %+v, %v", lease, err)
	}
	sibling := client.New(tc.url, tc.token("agent:billing-bot", "payments-host"))
	// A call belongs to its tokens: another token of the same actor is
	// told it does not exist.
	if _, err := sibling.Heartbeat(ctx, call.ID, 0); !client.IsCode(err, "not_found") {
		t.Errorf("Heartbeat by another token: %v, want not_found", err)
	}

	res, err = c.Redeem(ctx, approved.Grant, approved.Spec())
	if err != nil {
		t.Fatalf("second Redeem: %v", err)
	}
	if res.Accepted || res.Reason != "replayed" || res.StatusCode != http.StatusConflict || res.Message == "" {
		t.Errorf("second Redeem: Accepted=%v Reason=%q StatusCode=%d Message=%q, want false, replayed, 409 and a message",
			res.Accepted, res.Reason, res.StatusCode, res.Message)
	}

	done, err := c.ReportOutcome(ctx, call.ID, client.OutcomeSucceeded, "refund re-1042 issued")
	if err != nil {
		t.Fatalf("ReportOutcome: %v", err)
	}
	if done.Status != client.StatusRedeemed || done.Outcome == nil || done.Outcome.Status != "succeeded" ||
		done.Outcome.Detail != "refund re-1042 issued" {
		t.Errorf("ReportOutcome: Status=%q Outcome=%+v, want redeemed with the outcome", done.Status, done.Outcome)
	}
	_, err = c.ReportOutcome(ctx, call.ID, client.OutcomeFailed, "")
	if !client.IsCode(err, client.CodeOutcomeReported) || client.StatusCode(err) != http.StatusConflict {
		t.Errorf("second ReportOutcome: err=%v, want 409 %s", err, client.CodeOutcomeReported)
	}

	if _, err := c.Heartbeat(ctx, call.ID, 0); !client.IsCode(err, client.CodeOutcomeReported) {
		t.Errorf("Heartbeat after the outcome: %v, want %s", err, client.CodeOutcomeReported)
	}

	got, err := c.Get(ctx, call.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.Status != client.StatusRedeemed || got.Grant != "" || got.Outcome == nil || got.RedeemedAt.IsZero() ||
		got.LeaseUntil.IsZero() || got.Outcome.At.IsZero() || got.GrantState != client.GrantRedeemed {
		t.Errorf("Get: Status=%q Grant=%q GrantState=%q Outcome=%+v, want redeemed, no grant, the outcome", got.Status, got.Grant, got.GrantState, got.Outcome)
	}
}

func TestDenyReachesWait(t *testing.T) {
	tc := startConsole(t, t.TempDir(), "127.0.0.1:0")
	c := client.New(tc.url, tc.token("agent:billing-bot", "payments-host"))
	ctx := context.Background()
	call, err := c.Submit(ctx, refund(500))
	if err != nil {
		t.Fatal(err)
	}
	waited := waitAsync(ctx, c, call.ID)
	tc.waitForWaiters(1)
	if _, err := tc.queue.Deny(ctx, "alice", "cli", call.ID, "this invoice was already refunded"); err != nil {
		t.Fatal(err)
	}
	r := receive(t, waited)
	if r.err != nil {
		t.Fatalf("Wait: %v", r.err)
	}
	if r.call.Status != client.StatusDenied || r.call.Grant != "" {
		t.Fatalf("Wait: Status=%q Grant=%q, want denied without a grant", r.call.Status, r.call.Grant)
	}
	if d := r.call.Decision; d == nil || d.By != "alice" || d.Reason != "this invoice was already refunded" || d.At.IsZero() {
		t.Errorf("Decision=%+v, want by alice with the reason and a time", d)
	}

	// The same call again is refused outright, with the operator's reason.
	_, err = c.Submit(ctx, refund(500))
	e, ok := client.AsError(err)
	if !ok || e.Code != client.CodePreviouslyDenied || e.Status != http.StatusConflict ||
		e.CallID != call.ID || e.Reason != "this invoice was already refunded" {
		t.Errorf("resubmit: err=%v (%+v), want 409 previously_denied naming %s with the reason", err, e, call.ID)
	}
}

func TestErrors(t *testing.T) {
	tc := startConsole(t, t.TempDir(), "127.0.0.1:0")
	ctx := context.Background()
	n := 0
	newClient := func() *client.Client {
		n++ // a fresh actor per case, so the retry cap of one case does not reach the next
		return client.New(tc.url, tc.token("agent:bot-"+string(rune('a'+n)), "payments-host"))
	}
	tests := []struct {
		name     string
		do       func(c *client.Client) error
		status   int
		code     string
		problems []client.Problem // each must be listed (message not compared)
	}{
		{"unknown and missing args", func(c *client.Client) error {
			_, err := c.Submit(ctx, client.Proposal{Tool: "payments.refund", Target: "invoice:INV-1",
				Args: map[string]any{"amount_minor": 100, "reason_code": "fraud", "sql": "DROP TABLE invoices"}})
			return err
		}, http.StatusUnprocessableEntity, client.CodeInvalidArguments, []client.Problem{
			{Code: client.ProblemUnknownField, Path: "/args/sql"}, {Code: client.ProblemMissingField, Path: "/args/currency"}}},
		{"float in raw args", func(c *client.Client) error {
			_, err := c.Submit(ctx, client.Proposal{Tool: "payments.refund", Target: "invoice:INV-1",
				Args: json.RawMessage(`{"amount_minor":12.5,"currency":"USD","reason_code":"fraud"}`)})
			return err
		}, http.StatusBadRequest, client.ProblemFloatNotAllowed, []client.Problem{
			{Code: client.ProblemFloatNotAllowed, Path: "/args/amount_minor"}}},
		{"duplicate key sent verbatim", func(c *client.Client) error {
			_, err := c.SubmitJSON(ctx, []byte(`{"tool":"payments.refund","tool":"files.delete","target":"invoice:INV-1","args":{}}`))
			return err
		}, http.StatusBadRequest, client.ProblemDuplicateKey, []client.Problem{{Code: client.ProblemDuplicateKey, Path: "/tool"}}},
		{"unknown tool", func(c *client.Client) error {
			_, err := c.Submit(ctx, client.Proposal{Tool: "payments.teleport", Target: "invoice:INV-1"})
			return err
		}, http.StatusUnprocessableEntity, client.CodeUnknownTool, []client.Problem{{Code: client.ProblemUnknownTool, Path: "/tool"}}},
		{"tool of another audience", func(c *client.Client) error {
			_, err := c.Submit(ctx, client.Proposal{Tool: "files.delete", Target: "file:/srv/shared/a.txt",
				Args: map[string]any{"reason": "old"}})
			return err
		}, http.StatusForbidden, client.CodeAudienceNotAllowed, nil},
		{"unknown call", func(c *client.Client) error {
			_, err := c.Get(ctx, "call_doesnotexist")
			return err
		}, http.StatusNotFound, client.CodeNotFound, nil},
		{"cancel twice", func(c *client.Client) error {
			call, err := c.Submit(ctx, refund(42))
			if err != nil {
				return err
			}
			if got, err := c.Cancel(ctx, call.ID); err != nil || got.Status != client.StatusCancelled {
				t.Errorf("Cancel: Status=%v err=%v, want cancelled", got, err)
			}
			_, err = c.Cancel(ctx, call.ID)
			return err
		}, http.StatusConflict, client.CodeNotPending, nil},
		{"outcome before redemption", func(c *client.Client) error {
			call, err := c.Submit(ctx, refund(43))
			if err != nil {
				return err
			}
			_, err = c.ReportOutcome(ctx, call.ID, client.OutcomeSucceeded, "")
			return err
		}, http.StatusConflict, client.CodeNotRedeemed, nil},
		{"bad token", func(*client.Client) error {
			_, err := client.New(tc.url, "cst_nope").Get(ctx, "call_x")
			return err
		}, http.StatusUnauthorized, client.CodeUnauthorized, nil},
		{"malformed redemption", func(c *client.Client) error {
			_, err := c.RedeemJSON(ctx, "x", json.RawMessage(`{"tool":"payments.refund"}`))
			return err
		}, http.StatusBadRequest, client.CodeMalformed, []client.Problem{{Code: client.ProblemMissingField, Path: "/call/target"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do(newClient())
			e, ok := client.AsError(err)
			if !ok {
				t.Fatalf("err=%v, want a *client.Error", err)
			}
			if e.Status != tt.status || e.Code != tt.code || e.Message == "" {
				t.Errorf("got %d %s %q, want %d %s and a message", e.Status, e.Code, e.Message, tt.status, tt.code)
			}
			if !errors.Is(err, &client.Error{Code: tt.code}) || !errors.Is(err, &client.Error{Code: tt.code, Status: tt.status}) {
				t.Errorf("errors.Is by code %s and status %d: false, want true", tt.code, tt.status)
			}
			if errors.Is(err, &client.Error{Code: tt.code, Status: tt.status + 1}) {
				t.Errorf("errors.Is with another status: true, want false")
			}
			for _, p := range tt.problems {
				if !e.HasProblem(p.Code, p.Path) {
					t.Errorf("Problems=%+v, want %s at %s", e.Problems, p.Code, p.Path)
				}
			}
			if !json.Valid(e.Raw) || !strings.Contains(string(e.Raw), `"code":"`+tt.code+`"`) {
				t.Errorf("Raw=%s, want the error body", e.Raw)
			}
			if !strings.Contains(e.Error(), tt.code) {
				t.Errorf("Error()=%q, want it to name %s", e.Error(), tt.code)
			}
		})
	}
}

func TestRetryLimit(t *testing.T) {
	tc := startConsole(t, t.TempDir(), "127.0.0.1:0")
	c := client.New(tc.url, tc.token("agent:loopy", "payments-host"))
	ctx := context.Background()
	bad := client.Proposal{Tool: "payments.refund", Target: "invoice:INV-1", Args: map[string]any{"sql": "1"}}
	for i := range 3 {
		if _, err := c.Submit(ctx, bad); !client.IsCode(err, client.CodeInvalidArguments) {
			t.Fatalf("try %d: err=%v, want invalid_arguments", i+1, err)
		}
	}
	_, err := c.Submit(ctx, refund(100))
	e, ok := client.AsError(err)
	if !ok || e.Status != http.StatusTooManyRequests || !client.IsCode(err, client.CodeRetryLimit) || e.Hint == "" {
		t.Errorf("after three rejections: err=%v, want 429 retry_limit with a hint", err)
	}
}

func TestWaitAcrossLongPolls(t *testing.T) {
	tc := startConsole(t, t.TempDir(), "127.0.0.1:0")
	h, counter := newCountingClient()
	c := client.New(tc.url, tc.token("agent:billing-bot", "payments-host"),
		client.WithHTTPClient(h), client.WithPollWait(150*time.Millisecond))
	ctx := context.Background()
	call, err := c.Submit(ctx, refund(700))
	if err != nil {
		t.Fatal(err)
	}
	before := counter.requests.Load()
	start := time.Now()
	waited := waitAsync(ctx, c, call.ID)
	// Several polls end with the call still pending: wait for the third to
	// start, however slow the machine.
	for deadline := start.Add(30 * time.Second); counter.requests.Load()-before < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("%d polls in 30s with a 150ms poll wait, want at least 3", counter.requests.Load()-before)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The third poll starts only after two have each waited out their
	// 150 ms: a client that spins gets there sooner. (A slow machine only
	// makes this later, never sooner.)
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Errorf("3 polls started within %v with a 150ms poll wait: the client does not wait between polls", el)
	}
	select {
	case r := <-waited:
		t.Fatalf("Wait returned early: %+v", r)
	default:
	}
	if _, err := tc.queue.Approve(ctx, "alice", "cli", call.ID, call.Digest); err != nil {
		t.Fatal(err)
	}
	r := receive(t, waited)
	if r.err != nil || r.call.Status != client.StatusApproved || r.call.Grant == "" {
		t.Fatalf("Wait: %+v, want approved with a grant", r)
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	tc := startConsole(t, t.TempDir(), "127.0.0.1:0")
	c := client.New(tc.url, tc.token("agent:billing-bot", "payments-host"))
	call, err := c.Submit(context.Background(), refund(800))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	got, err := c.Wait(ctx, call.ID)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err=%v, want context.DeadlineExceeded", err)
	}
	if got == nil || got.Status != client.StatusPending || got.ID != call.ID {
		t.Errorf("got %+v, want the last state seen (pending)", got)
	}
	// A Wait that let its long-poll run out before looking at the context
	// would take the poll wait (60 s); a slow machine adds seconds, not that.
	if d := time.Since(start); d >= client.DefaultPollWait/2 {
		t.Errorf("Wait took %v with a 600ms deadline and a %v poll wait, want it to end at the deadline", d, client.DefaultPollWait)
	}
}

func TestWaitSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	first := startConsole(t, dir, "127.0.0.1:0")
	h, counter := newCountingClient()
	token := first.token("agent:billing-bot", "payments-host")
	c := client.New(first.url, token, client.WithHTTPClient(h), client.WithPollWait(200*time.Millisecond),
		client.WithBackoff(20*time.Millisecond, 100*time.Millisecond))
	ctx := context.Background()
	call, err := c.Submit(ctx, refund(900))
	if err != nil {
		t.Fatal(err)
	}
	waited := waitAsync(ctx, c, call.ID)
	first.waitForWaiters(1)

	first.stop() // drains the long-poll, then refuses connections
	deadline := time.Now().Add(10 * time.Second)
	for counter.failures.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no failed connection while the console was down (requests %d)", counter.requests.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case r := <-waited:
		t.Fatalf("Wait gave up while the console was down: %+v", r)
	default:
	}

	second := startConsole(t, dir, first.addr)
	second.waitForWaiters(1)
	if _, err := second.queue.Approve(ctx, "alice", "cli", call.ID, call.Digest); err != nil {
		t.Fatal(err)
	}
	r := receive(t, waited)
	if r.err != nil || r.call.Status != client.StatusApproved || r.call.Grant == "" {
		t.Fatalf("Wait across a restart: %+v, want approved with a grant", r)
	}
}

func TestWaitRetriesUnavailable(t *testing.T) {
	tc := startConsole(t, t.TempDir(), "127.0.0.1:0")
	token := tc.token("agent:billing-bot", "payments-host")
	var unavailable atomic.Int64
	unavailable.Store(3)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && unavailable.Add(-1) >= 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":{"code":"unavailable","message":"the console is restarting; retry in a few seconds"}}`))
			return
		}
		tc.server.Handler().ServeHTTP(w, r)
	}))
	defer front.Close()
	c := client.New(front.URL, token, client.WithPollWait(100*time.Millisecond), client.WithBackoff(10*time.Millisecond, 40*time.Millisecond))
	ctx := context.Background()
	call, err := c.Submit(ctx, refund(901))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.queue.Deny(ctx, "alice", "cli", call.ID, "no"); err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(ctx, call.ID)
	if err != nil || got.Status != client.StatusDenied {
		t.Fatalf("Wait: %+v, %v, want denied after three 503s", got, err)
	}
	if n := unavailable.Load(); n >= 0 {
		t.Errorf("%d 503s left unserved, want all three served", n+1)
	}

	t.Run("gives up after the maximum outage", func(t *testing.T) {
		down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte("<html>bad gateway</html>"))
		}))
		defer down.Close()
		c := client.New(down.URL, token, client.WithBackoff(10*time.Millisecond, 20*time.Millisecond),
			client.WithMaxOutage(200*time.Millisecond))
		start := time.Now()
		_, err := c.Wait(ctx, call.ID)
		e, ok := client.AsError(err)
		if !ok || e.Status != http.StatusBadGateway || e.Code != client.CodeUnexpectedResponse {
			t.Errorf("err=%v, want 502 %s", err, client.CodeUnexpectedResponse)
		}
		// Not before the maximum outage (a slow machine only makes it
		// later); and once it is over, after one more backoff at most, not
		// after the default outage of two minutes.
		if d := time.Since(start); d < 200*time.Millisecond || d >= client.DefaultMaxOutage/4 {
			t.Errorf("gave up after %v, want the 200ms maximum outage (not the default %v)", d, client.DefaultMaxOutage)
		}
	})

	t.Run("does not retry a refusal", func(t *testing.T) {
		h, counter := newCountingClient()
		c := client.New(tc.url, token, client.WithHTTPClient(h))
		_, err := c.Wait(ctx, "call_doesnotexist")
		if !client.IsCode(err, client.CodeNotFound) || counter.requests.Load() != 1 {
			t.Errorf("err=%v after %d requests, want not_found after 1", err, counter.requests.Load())
		}
	})
}

func TestKeysVerifyGrant(t *testing.T) {
	tc := startConsole(t, t.TempDir(), "127.0.0.1:0")
	c := client.New(tc.url, tc.token("agent:billing-bot", "payments-host"))
	ctx := context.Background()
	call, err := c.Submit(ctx, refund(1000))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.queue.Approve(ctx, "alice", "cli", call.ID, call.Digest); err != nil {
		t.Fatal(err)
	}
	approved, err := c.Get(ctx, call.ID)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := client.New(tc.url, "").Keys(ctx) // public: no token needed
	if err != nil {
		t.Fatalf("Keys: %v", err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(raw, &set); err != nil {
		t.Fatalf("JWKS %s: %v", raw, err)
	}
	jws, err := jose.ParseSignedCompact(approved.Grant, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		t.Fatalf("ParseSigned: %v", err)
	}
	kid := jws.Signatures[0].Header.KeyID
	keys := set.Key(kid)
	if len(keys) != 1 {
		t.Fatalf("JWKS has %d keys with kid %q, want 1: %s", len(keys), kid, raw)
	}
	payload, err := jws.Verify(keys[0])
	if err != nil {
		t.Fatalf("Verify with the published key: %v", err)
	}
	var claims struct {
		Sub    string `json:"sub"`
		Aud    string `json:"aud"`
		CallID string `json:"call_id"`
		Digest string `json:"digest"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	if claims.Sub != "agent:billing-bot" || claims.Aud != "payments-host" || claims.CallID != call.ID || claims.Digest != call.Digest {
		t.Errorf("claims=%+v, want the call's actor, audience, id and digest", claims)
	}
}

// canonicalDigest is the digest of canonical envelope bytes.
func canonicalDigest(envelope string) string { return canonical.DigestOf([]byte(envelope)) }

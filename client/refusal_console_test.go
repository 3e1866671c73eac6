package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/countersign/countersign/client"
)

// A real console's answers, classified: what the console refused of the
// call itself is a refusal (an invalid proposal, an operator's earlier
// denial, a grant presented with other arguments or a second time); a
// token for another host, an unknown tool, a bad token, a redemption
// refused by a freeze and an unreachable console are not.
func TestRefusalFromAConsole(t *testing.T) {
	tc := startConsole(t, t.TempDir(), "127.0.0.1:0")
	ctx := context.Background()
	c := client.New(tc.url, tc.token("agent:refusal-bot", "payments-host"))

	approved := func(c *client.Client, p client.Proposal) *client.Call {
		t.Helper()
		call, err := c.Submit(ctx, p)
		if err != nil {
			t.Fatalf("Submit: %v", err)
		}
		if _, err := tc.queue.Approve(ctx, "alice", "cli", call.ID, call.Digest); err != nil {
			t.Fatalf("Approve: %v", err)
		}
		got, err := c.Get(ctx, call.ID)
		if err != nil || got.Status != client.StatusApproved {
			t.Fatalf("Get: %+v, %v; want approved", got, err)
		}
		return got
	}

	// Answers to proposals and requests, as errors.
	bad := refund(1299)
	bad.Args = json.RawMessage(`{"amount_minor":12.99,"currency":"USD","reason_code":"duplicate"}`)
	denied, err := c.Submit(ctx, refund(4242))
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if _, err := tc.queue.Deny(ctx, "alice", "cli", denied.ID, "already refunded"); err != nil {
		t.Fatalf("Deny: %v", err)
	}
	other := client.New(tc.url, tc.token("agent:refusal-other-host", "shell-host"))
	unknown := refund(1)
	unknown.Tool = "payments.unknown_tool"
	for _, tt := range []struct {
		name string
		do   func() error
		code string
		want bool
	}{
		{"a float amount", func() error { _, err := c.Submit(ctx, bad); return err }, client.ProblemFloatNotAllowed, true},
		{"previously denied", func() error { _, err := c.Submit(ctx, refund(4242)); return err }, client.CodePreviouslyDenied, true},
		{"another host's token", func() error { _, err := other.Submit(ctx, refund(7)); return err }, client.CodeAudienceNotAllowed, false},
		{"an unknown tool", func() error {
			_, err := client.New(tc.url, tc.token("agent:refusal-unknown", "payments-host")).Submit(ctx, unknown)
			return err
		}, client.CodeUnknownTool, false},
		{"a bad token", func() error { _, err := client.New(tc.url, "cs_not-a-token").Submit(ctx, refund(8)); return err }, client.CodeUnauthorized, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do()
			var e *client.Error
			if !errors.As(err, &e) || e.Code != tt.code {
				t.Fatalf("err=%v, want an *Error with code %s", err, tt.code)
			}
			if e.Refusal() != tt.want || client.IsRefusal(err) != tt.want {
				t.Errorf("%s: Refusal()=%v IsRefusal=%v, want %v", e.Code, e.Refusal(), client.IsRefusal(err), tt.want)
			}
		})
	}

	t.Run("an unreachable console", func(t *testing.T) {
		dead := client.New("http://127.0.0.1:1", "cs_x", client.WithMaxOutage(0))
		_, err := dead.Submit(ctx, refund(9))
		var e *client.Error
		if err == nil || errors.As(err, &e) || client.IsRefusal(err) {
			t.Errorf("err=%v (an *Error: %v), IsRefusal=%v; want a transport error, no refusal", err, e, client.IsRefusal(err))
		}
	})

	// Rejected grants, as redemptions.
	t.Run("rejected grants", func(t *testing.T) {
		call := approved(c, refund(5005))
		spec := call.Spec()
		spec.Args = json.RawMessage(`{"amount_minor":999999,"currency":"USD","reason_code":"duplicate"}`)
		res, err := c.Redeem(ctx, call.Grant, spec)
		if err != nil || res.Reason != "digest_mismatch" || !res.Refusal() {
			t.Errorf("other args: %+v, %v; want digest_mismatch, a refusal", res, err)
		}
		if res, err := c.Redeem(ctx, call.Grant, call.Spec()); err != nil || !res.Accepted || res.Refusal() {
			t.Errorf("the approved call: %+v, %v; want accepted, no refusal", res, err)
		}
		res, err = c.Redeem(ctx, call.Grant, call.Spec())
		if err != nil || res.Reason != "replayed" || res.StatusCode != 409 || !res.Refusal() {
			t.Errorf("again: %+v, %v; want replayed (409), a refusal", res, err)
		}
		// The same grant redeemed with another host's token: the deployment's
		// fault, not the call's.
		res, err = other.Redeem(ctx, approved(c, refund(5006)).Grant, call.Spec())
		if err != nil || res.Accepted || res.Reason != "actor_mismatch" || res.Refusal() {
			t.Errorf("another agent's token: %+v, %v; want actor_mismatch, no refusal", res, err)
		}
	})

	t.Run("a frozen redemption", func(t *testing.T) {
		const actor = "agent:refusal-frozen"
		f := client.New(tc.url, tc.token(actor, "payments-host"))
		call := approved(f, refund(6006))
		if _, err := tc.queue.Freeze(ctx, "alice", "cli", "", actor, "incident 8"); err != nil {
			t.Fatalf("Freeze: %v", err)
		}
		res, err := f.Redeem(ctx, call.Grant, call.Spec())
		var e *client.Error
		if res != nil || !errors.As(err, &e) || e.Code != client.CodeFrozen || e.Refusal() || client.IsRefusal(err) {
			t.Errorf("Redeem while frozen: %+v, %v; want an *Error frozen, no refusal", res, err)
		}
	})
}

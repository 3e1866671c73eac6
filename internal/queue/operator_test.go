package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/queue"
)

// operatorTools: a tool any channel approves, one approved only in the
// browser, one also from the command line, and one that needs a passkey.
const operatorTools = `tools:
  ops.restart:
    audience: ops-host
    target: '^svc:[a-z]+$'
    args: {type: object, additionalProperties: false, properties: {}}
  ops.drop:
    audience: ops-host
    target: '^svc:[a-z]+$'
    approve_from: [web]
    args: {type: object, additionalProperties: false, properties: {}}
  ops.scale:
    audience: ops-host
    target: '^svc:[a-z]+$'
    approve_from: [web, cli]
    args: {type: object, additionalProperties: false, properties: {}}
  ops.move:
    audience: ops-host
    target: '^svc:[a-z]+$'
    approve_from: [web]
    counter: {edit: [target]}
    args: {type: object, additionalProperties: false, properties: {}}
  ops.rename:
    audience: ops-host
    target: '^svc:[a-z]+$'
    counter: {edit: [target]}
    args: {type: object, additionalProperties: false, properties: {}}
  ops.wipe:
    audience: ops-host
    target: '^svc:[a-z]+$'
    approve_with: passkey
    args: {type: object, additionalProperties: false, properties: {}}
`

var opsBot = queue.Principal{Actor: "agent:ops", Audience: "ops-host", TokenID: "tok_ops", Owners: []string{"carol"}}

func newOperatorEnv(t *testing.T) *env {
	t.Helper()
	pol, err := policy.Parse([]byte(operatorTools))
	if err != nil {
		t.Fatal(err)
	}
	key, err := present.NewKey(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return newEnvWith(t, func(c *queue.Config) { c.Tools, c.Policy, c.Presentations = pol.Registry(), pol, key })
}

// An approval through the operator API names a listing of this call and
// digest made for this person in the last ten minutes, and is recorded
// method command, channel api, human unattested; another channel carries
// no listing token.
func TestApproveThroughAPI(t *testing.T) {
	ctx := context.Background()
	e := newOperatorEnv(t)
	c := submitAs(t, e, opsBot, "ops.restart", "svc:web", `{}`)
	other := submitAs(t, e, opsBot, "ops.restart", "svc:db", `{}`)
	listed := e.q.ListingToken("alice", c)
	approve := func(operator, id, digest, listing string) error {
		_, err := e.q.ApproveWith(ctx, queue.ApproveInput{Operator: operator, Channel: audit.ChannelAPI, CallID: id, Digest: digest, Listed: listing})
		return err
	}
	for _, tc := range []struct {
		name, operator, id, digest, listing string
	}{
		{"no listing", "alice", c.ID, c.Digest, ""},
		{"bob's listing", "alice", c.ID, c.Digest, e.q.ListingToken("bob", c)},
		{"another call's listing", "alice", c.ID, c.Digest, e.q.ListingToken("alice", other)},
		{"a call page's token", "alice", c.ID, c.Digest, e.q.Present(present.PageCall, "alice", c)},
		{"alice's listing used by bob", "bob", c.ID, c.Digest, listed},
	} {
		if err := approve(tc.operator, tc.id, tc.digest, tc.listing); !errors.Is(err, queue.ErrListing) {
			t.Errorf("%s: %v, want ErrListing", tc.name, err)
		}
	}
	if err := approve("alice", c.ID, other.Digest, listed); !errors.Is(err, queue.ErrDigestMismatch) {
		t.Errorf("another digest with the listing: %v, want ErrDigestMismatch", err)
	}
	if _, err := e.q.ApproveWith(ctx, queue.ApproveInput{Operator: "alice", Channel: audit.ChannelCLI, CallID: c.ID, Digest: c.Digest, Listed: listed}); !errors.Is(err, queue.ErrListing) {
		t.Errorf("a listing token through the command line: %v, want ErrListing", err)
	}
	e.clock.Advance(queue.MaxListingAge + time.Millisecond)
	if err := approve("alice", c.ID, c.Digest, listed); !errors.Is(err, queue.ErrListing) {
		t.Errorf("a listing older than %s: %v, want ErrListing", queue.MaxListingAge, err)
	}
	if err := approve("alice", c.ID, c.Digest, e.q.ListingToken("alice", c)); err != nil {
		t.Fatalf("a fresh listing: %v", err)
	}
	got, err := e.q.Call(ctx, c.ID)
	if err != nil || got.Status != queue.StatusApproved {
		t.Fatalf("after the approval: %v %v", got, err)
	}
	a := got.Approvals[0]
	if a.Method != queue.MethodCommand || a.Channel != audit.ChannelAPI || a.Human() != queue.HumanUnattested || a.Presented != nil {
		t.Errorf("recorded %+v (human %s), want method command, channel api, human unattested", a, a.Human())
	}
}

// approve_from keeps the channels it does not name from approving; a
// tool that needs a passkey is never approved through the API; the own-call
// ban and the owners hold for the token's person.
func TestApproveFromChannels(t *testing.T) {
	ctx := context.Background()
	e := newOperatorEnv(t)
	approve := func(channel string, c *queue.Call, who string) error {
		in := queue.ApproveInput{Operator: who, Channel: channel, CallID: c.ID, Digest: c.Digest}
		switch channel {
		case audit.ChannelAPI:
			in.Listed = e.q.ListingToken(who, c)
		case audit.ChannelWeb:
			in.Presented = e.q.Present(present.PageCall, who, c)
		}
		_, err := e.q.ApproveWith(ctx, in)
		return err
	}
	for _, tc := range []struct {
		tool, channel string
		want          error
	}{
		{"ops.drop", audit.ChannelAPI, queue.ErrNotApprovableFrom},
		{"ops.drop", audit.ChannelCLI, queue.ErrNotApprovableFrom},
		{"ops.drop", audit.ChannelWeb, nil},
		{"ops.scale", audit.ChannelAPI, queue.ErrNotApprovableFrom},
		{"ops.scale", audit.ChannelCLI, nil},
		{"ops.restart", audit.ChannelCLI, nil},
		{"ops.wipe", audit.ChannelAPI, queue.ErrPasskeyRequired},
	} {
		c := submitAs(t, e, opsBot, tc.tool, "svc:"+map[string]string{"api": "a", "cli": "c", "web": "w"}[tc.channel], `{}`)
		err := approve(tc.channel, c, "alice")
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s through %s: %v, want %v", tc.tool, tc.channel, err, tc.want)
		}
	}
	c := submitAs(t, e, opsBot, "ops.restart", "svc:owned", `{}`)
	if err := approve(audit.ChannelAPI, c, "carol"); !errors.Is(err, queue.ErrOwner) {
		t.Errorf("an owner of the agent through the API: %v, want ErrOwner", err)
	}
	own := submitAs(t, e, queue.Principal{Actor: "bob", Audience: "ops-host", TokenID: "tok_bob"}, "ops.restart", "svc:mine", `{}`)
	if err := approve(audit.ChannelAPI, own, "bob"); !errors.Is(err, queue.ErrOwnCall) {
		t.Errorf("bob's own call through the API: %v, want ErrOwnCall", err)
	}
}

// A counter-proposal carries its editor's approval, so the tool's
// approve_from binds it as it binds an approval; through the operator API
// it names a listing of the original, and is recorded unattested.
func TestCounterFromChannels(t *testing.T) {
	ctx := context.Background()
	e := newOperatorEnv(t)
	counter := func(channel string, c *queue.Call, listed string) (*queue.Call, error) {
		return e.q.Counter(ctx, queue.CounterInput{Operator: "alice", Channel: channel, CallID: c.ID, Digest: c.Digest,
			Edits: map[string]json.RawMessage{"target": json.RawMessage(`"svc:other"`)}, Listed: listed})
	}
	moved := submitAs(t, e, opsBot, "ops.move", "svc:a", `{}`)
	if _, err := counter(audit.ChannelCLI, moved, ""); !errors.Is(err, queue.ErrNotApprovableFrom) {
		t.Errorf("a web-only tool countered from the shell: %v, want ErrNotApprovableFrom", err)
	}
	if _, err := counter(audit.ChannelAPI, moved, e.q.ListingToken("alice", moved)); !errors.Is(err, queue.ErrNotApprovableFrom) {
		t.Errorf("a web-only tool countered through the API: %v, want ErrNotApprovableFrom", err)
	}
	renamed := submitAs(t, e, opsBot, "ops.rename", "svc:b", `{}`)
	if _, err := counter(audit.ChannelAPI, renamed, ""); !errors.Is(err, queue.ErrListing) {
		t.Errorf("a counter through the API without a listing: %v, want ErrListing", err)
	}
	if _, err := counter(audit.ChannelAPI, renamed, e.q.ListingToken("bob", renamed)); !errors.Is(err, queue.ErrListing) {
		t.Errorf("a counter through the API with another person's listing: %v, want ErrListing", err)
	}
	c, err := counter(audit.ChannelAPI, renamed, e.q.ListingToken("alice", renamed))
	if err != nil {
		t.Fatalf("a counter through the API: %v", err)
	}
	if len(c.Approvals) != 1 || c.Approvals[0].Method != queue.MethodCounter || c.Approvals[0].Human() != queue.HumanUnattested ||
		c.Approvals[0].Channel != audit.ChannelAPI {
		t.Errorf("the counter's approval: %+v", c.Approvals)
	}
}

package server

import (
	"testing"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/web/templates"
)

// TestNotBoundComesFromTheEnvelope: which arguments are "not bound" is read
// from the envelope that was hashed, not from today's tools file.
func TestNotBoundComesFromTheEnvelope(t *testing.T) {
	args, err := canonical.Parse([]byte(`{"amount_minor":5,"notes":"hello","filter":{"q":"x","hint":"y"}}`))
	if err != nil {
		t.Fatal(err)
	}
	env := canonical.Envelope{Actor: "agent:a", Audience: "h", Tool: "t.x", Target: "x",
		Args: canonical.Without(canonical.Without(args.(canonical.Object), "/notes"), "/filter/hint")}
	envBytes, err := env.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	call := &queue.Call{Args: args.(canonical.Object), Envelope: envBytes}
	nop := func(string, templates.Text) {}
	tree := treeBuilder{args: call.Args, bound: boundArgs(call), warn: nop}.node(call.Args, "", nil, -1)
	got := map[string]bool{}
	var walk func(n templates.ArgNode)
	walk = func(n templates.ArgNode) {
		got[n.Pointer] = n.NotBound
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(tree)
	want := map[string]bool{"": false, "/amount_minor": false, "/notes": true, "/filter": false, "/filter/q": false, "/filter/hint": true}
	for ptr, nb := range want {
		if got[ptr] != nb {
			t.Errorf("%s: not bound = %v, want %v", ptr, got[ptr], nb)
		}
	}
}

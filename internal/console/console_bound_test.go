package console

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
	call := &queue.Call{ID: "call_x", Actor: "agent:a", Audience: "h", Tool: "t.x", Target: "x", Args: args.(canonical.Object),
		Envelope: envBytes, Digest: canonical.DigestOf(envBytes)}
	hashed, err := queue.HashedEnvelope(call)
	if err != nil {
		t.Fatal(err)
	}
	nop := func(string, string, templates.Text) {}
	tree := treeBuilder{args: call.Args, bound: hashed.Args, warn: nop}.node(call.Args, "", nil, -1)
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

// TestMirroredNumbersAreBound: the envelope of a call of a tool mirrored
// from an MCP upstream holds numbers with fractions, and they read back as
// bound; the same text under a declared tool's name does not read as an
// envelope at all, and the page refuses it.
func TestMirroredNumbersAreBound(t *testing.T) {
	args := canonical.Object{{Name: "factor", Value: canonical.Number(2.5e-7)}, {Name: "value", Value: canonical.Number(21.5)}}
	for tool, bound := range map[string]bool{"demo/scale": true, "demo.scale": false} {
		env := canonical.Envelope{Actor: "agent:a", Audience: "demo", Tool: tool, Target: "mcp:demo", Args: args}
		envBytes, err := env.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		got, err := queue.HashedEnvelope(&queue.Call{ID: "call_x", Actor: "agent:a", Audience: "demo", Tool: tool, Target: "mcp:demo",
			Args: args, Envelope: envBytes, Digest: canonical.DigestOf(envBytes)})
		if _, ok := got.Args.Get("factor"); ok != bound || (err == nil) != bound {
			t.Errorf("%s: factor bound = %v (%v), want %v", tool, ok, err, bound)
		}
	}
}

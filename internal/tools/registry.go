// Package tools is Countersign's tool registry: which tools agents may
// propose, who executes them, how many operators must approve, and the
// closed JSON Schema their arguments must satisfy.
//
// A registry is loaded from a YAML tools file (see docs/tools.md). Loading
// lints the file and refuses, listing every problem, any schema that could
// let an unnamed member, an unchecked array or a fractional number through.
// Validation then reports every problem of a proposal, each with the JSON
// Pointer of the offending value from the proposal's root, and never strips
// or coerces anything.
package tools

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/countersign/countersign/internal/canonical"
)

// Registry is the set of tools declared in one tools file, and the tools
// mirrored from its MCP servers. The declared tools are read-only after
// loading; the mirrored ones change through SetMirrored. It is safe for
// concurrent use.
type Registry struct {
	tools     map[string]*Tool
	names     []string // sorted
	digest    string
	upstreams []Upstream

	// mirrored holds the tools of MCP servers whose definitions an admin
	// has approved, by name; it changes while the console runs, as
	// upstreams connect and their definitions are reviewed.
	mu       sync.RWMutex
	mirrored map[string]*Tool
}

// Digest identifies the tools file the registry was loaded from: the hex
// SHA-256 of "countersign/v1/tools:" followed by the RFC 8785 bytes of the
// whole file read as JSON. Comments and layout do not change it; any change
// of a value does. Every decision records the digest of the file in force.
func (r *Registry) Digest() string { return r.digest }

// Load reads and lints the tools file at path. The error is a *LintError
// listing every problem when the file is refused.
func Load(path string) (*Registry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tools: %w", err)
	}
	r, err := Parse(data)
	if le, ok := err.(*LintError); ok {
		le.File = path
	}
	return r, err
}

// Parse lints and loads a tools file's contents, as Load does.
func Parse(data []byte) (*Registry, error) {
	return parseFile(data)
}

// Tool returns the tool with that name.
func (r *Registry) Tool(name string) (*Tool, bool) {
	if t, ok := r.tools[name]; ok {
		return t, true
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.mirrored[name]
	return t, ok
}

// SetMirrored replaces the callable tools of one MCP server: the
// definitions an admin approved (or trusted at first start). Tools of the
// server that are not in ts are no longer callable.
func (r *Registry) SetMirrored(server string, ts []*Tool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mirrored == nil {
		r.mirrored = map[string]*Tool{}
	}
	for name, t := range r.mirrored {
		if t.Mirror.Server == server {
			delete(r.mirrored, name)
		}
	}
	for _, t := range ts {
		r.mirrored[t.Name] = t
	}
}

// MirroredTools returns the callable tools of one MCP server, sorted by
// name.
func (r *Registry) MirroredTools(server string) []*Tool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*Tool
	for _, t := range r.mirrored {
		if t.Mirror.Server == server {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Tools returns every tool, sorted by name.
func (r *Registry) Tools() []*Tool {
	out := make([]*Tool, len(r.names))
	for i, n := range r.names {
		out[i] = r.tools[n]
	}
	return out
}

// Names returns the tool names, sorted.
func (r *Registry) Names() []string {
	return append([]string(nil), r.names...)
}

// Check looks up the proposal's tool and validates the proposal against it.
// An unknown tool is a single unknown_tool problem at /tool and a nil Tool.
func (r *Registry) Check(p canonical.Proposal) (*Tool, canonical.Problems) {
	t, ok := r.Tool(p.Tool)
	if !ok {
		return nil, canonical.Problems{{
			Code:    canonical.CodeUnknownTool,
			Path:    "/tool",
			Message: fmt.Sprintf("%s is not a tool of this console (tools: %s)", displayName(p.Tool), listNames(r.names, 30)),
			Offset:  -1,
		}}
	}
	return t, t.Validate(p)
}

// Tool is one declared tool and its policy.
type Tool struct {
	// Name is the dotted lower-case name agents propose, e.g. payments.refund.
	Name string
	// Description says what the tool does, for operators and agents.
	Description string
	// Audience is the host that executes the tool; a proposal is accepted
	// only from a token for this audience.
	Audience string
	// Target matches the whole target of a proposal (the pattern from the
	// file, anchored at both ends).
	Target *regexp.Regexp
	// TargetPattern is the target pattern as written in the file.
	TargetPattern string
	// Approvals is how many distinct operators must approve a call.
	Approvals int
	// GrantTTL is how long a minted grant lives (at most 300 s).
	GrantTTL time.Duration
	// DecideWithin is how long a pending call waits for a decision before
	// it expires.
	DecideWithin time.Duration
	// OutcomeWithin is how long the executor has, once it redeemed a call,
	// to report the outcome; each heartbeat extends the lease by at most
	// this much. When it lapses, the call's outcome becomes lease_expired
	// and a person finds out what happened.
	OutcomeWithin time.Duration
	// Informational lists JSON Pointers into args whose members are shown
	// to the operator labelled "not bound" and left out of the digest.
	Informational []string
	// Money names the args members shown as an amount of money; nil when
	// the tool has no money display.
	Money *Money
	// Summary lists JSON Pointers into args of the members a queue card
	// shows, in order; none when empty.
	Summary []string
	// Confirm is what an operator types before approving; nil when a
	// press of Approve is enough.
	Confirm *Confirm
	// DenyReasons are preset reasons offered beside free text when denying.
	DenyReasons []string
	// Risk is how much harm a wrong approval can do: low, medium or high;
	// empty when the tools file does not say.
	Risk string
	// Effects name what a call of the tool does in the world (money,
	// destructive, external, production, read-only), in the file's order.
	Effects []string
	// AutoApprove is true when the tool opts in to approval by rule
	// (auto_approve: allowed).
	AutoApprove bool
	// RequirePasskey is true when every approval of the tool's calls must
	// be signed by the operator's passkey (approve_with: passkey): a click,
	// the control socket and the command line cannot approve them.
	RequirePasskey bool
	// ApproveFrom lists the channels an approval of the tool's calls may
	// arrive through (approve_from: web, cli, api); nil lets every channel
	// approve. It is part of the definition digest, as the whole entry is.
	ApproveFrom []string
	// Approvers says who may approve the tool's calls (approvers: {roles,
	// groups}); empty lets every operator who may decide approve.
	Approvers Approvers
	// Escalate are the tool's escalation tiers, in the order they are
	// reached (docs/team.md); a call copies them at submission.
	Escalate []Tier
	// Allowance is the tool's opt-in to allowances; nil when operators may
	// not give one (the default).
	Allowance *Allowance
	// Counter is the tool's opt-in to counter-proposals; nil when
	// operators may not counter its calls (the default).
	Counter *Counter
	// Plan is the tool's opt-in to plans; nil when its calls may not be
	// plan items (the default).
	Plan *Plan
	// Rules are the tool's rules in file order; the first that matches a
	// call decides it. Compiled and checked by the policy package.
	Rules []RuleSpec
	// DefinitionDigest identifies the tool's definition: for a tool from a
	// tools file, the digest of its whole entry there (see
	// definitionDigest). A call records the digest it was submitted under;
	// approval and redemption refuse it with tool_changed once the tool's
	// current definition digest differs. Code that defines tools another
	// way sets it to a digest of everything that defines the tool.
	DefinitionDigest string
	// Mirror is set for a tool mirrored from an MCP server.
	Mirror *Mirrored

	args   *schema
	schema []byte // canonical JSON of the args schema
}

// Money names, as JSON Pointers into args, the integer amount in minor
// units and the ISO 4217 currency code of a tool's money display.
type Money struct{ Amount, Currency string }

// Parameters returns the names of the top-level args members, sorted.
func (t *Tool) Parameters() []string {
	return append([]string(nil), t.args.names...)
}

// SchemaJSON returns the args schema as canonical JSON (a JSON Schema
// 2020-12 document), for API descriptions and tool listings.
func (t *Tool) SchemaJSON() []byte {
	return append([]byte(nil), t.schema...)
}

// Validate reports every problem of the proposal for this tool: a target
// that does not match the target pattern, and every way args departs from
// the args schema. Paths are JSON Pointers from the proposal's root. A
// proposal that names another tool gets unknown_tool at /tool. Nothing is
// stripped or coerced; a nil result means the proposal is valid.
func (t *Tool) Validate(p canonical.Proposal) canonical.Problems {
	v := validation{tool: t, segs: make([]segment, 0, 8)}
	if p.Tool != t.Name {
		v.add(canonical.CodeUnknownTool, "/tool", "this proposal names %s; it was checked against %s", displayName(p.Tool), t.Name)
	}
	if !t.Target.MatchString(p.Target) {
		v.add(canonical.CodePatternMismatch, "/target", "target must match %s for %s", t.TargetPattern, t.Name)
	}
	args := p.Args
	if args == nil {
		args = canonical.Object{}
	}
	v.value(t.args, args)
	return v.problems
}

// Bound returns args without the informational members: the args that the
// digest covers. args itself is not modified.
func (t *Tool) Bound(args canonical.Object) canonical.Object {
	for _, ptr := range t.Informational {
		args = canonical.Without(args, ptr)
	}
	return args
}

// IsInformational reports whether the args member at ptr (a JSON Pointer
// relative to args, e.g. "/notes") is informational: named in the tool's
// informational list, or inside a member that is.
func (t *Tool) IsInformational(ptr string) bool {
	for _, p := range t.Informational {
		if ptr == p || strings.HasPrefix(ptr, p+"/") {
			return true
		}
	}
	return false
}

// listNames joins names for a message, at most max of them.
func listNames(names []string, max int) string {
	if len(names) == 0 {
		return "none"
	}
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:max], ", ") + fmt.Sprintf(" and %d more", len(names)-max)
}

var plainName = regexp.MustCompile(`^[A-Za-z0-9_.$@-]{1,64}$`)

// displayName shows a member or tool name in a message: as it is when it is
// plain, otherwise quoted with invisible and control characters escaped and
// cut to 64 bytes.
func displayName(s string) string {
	if plainName.MatchString(s) {
		return s
	}
	const max = 64
	if len(s) > max {
		cut := max
		for cut > 0 && !isRuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%+q…", s[:cut])
	}
	return fmt.Sprintf("%+q", s)
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

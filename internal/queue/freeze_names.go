package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/countersign/countersign/internal/canonical"
)

// A freeze names what it stops, and a name that matches nothing stops
// nothing: a freeze that said "frozen" of a misspelt tool or actor would
// leave the calls it was meant for approved and run. So a freeze names
//
//   - a tool of the registry, or a tool calls were made of;
//   - an MCP server of the tools file (or one calls were made through):
//     every tool of the server is frozen, those it serves now and those it
//     serves later, stored as the tool SERVER/* (which no tool can be
//     named, since * is not in MCP's tool-name rule);
//   - an actor that has an API token or has submitted calls;
//
// and anything else is refused with the close matches (same letters in
// another case, an edit or two away). A tool or actor the console has
// not seen yet (a tool about to be added, an agent about to get a token)
// is frozen only when asked for explicitly (FreezeRequest.AllowUnknown),
// and the answer says so (Freeze.Unseen). A name that can never match a
// call (not a tool name at all, white space around it) is refused even
// then.

// ServerWildcard is the suffix of a freeze's tool that freezes every tool
// of an MCP server.
const ServerWildcard = "/*"

// maxKnownNames bounds the names a freeze is checked against, of each of
// actors and tools.
const maxKnownNames = 10000

// FreezeRequest asks for a freeze.
type FreezeRequest struct {
	By, Channel string
	// Tool is a tool, an MCP server, or "" for every tool.
	Tool string
	// Actor is an actor, or "" for every actor.
	Actor  string
	Reason string
	// AllowUnknown freezes a tool or actor the console has not seen yet.
	AllowUnknown bool
}

// NameError is a freeze refused for a tool or actor that names nothing the
// console knows, or that no call can have.
type NameError struct {
	Field string // "tool" or "actor"
	Name  string
	// Invalid is a name no call can have; AllowUnknown does not help.
	Invalid bool
	// Near are the known names close to Name, best first.
	Near []string
}

func (e *NameError) Error() string {
	return "queue: freeze: " + e.Message()
}

// Message says what was refused and what to do, for people.
func (e *NameError) Message() string {
	var b strings.Builder
	if e.Invalid {
		fmt.Fprintf(&b, "%q cannot be the %s of a call", e.Name, e.Field)
		if e.Field == "tool" {
			b.WriteString(" (tools are dotted lower-case words like payments.refund, server/tool for a tool of an MCP server, or an MCP server's name)")
		} else {
			b.WriteString(" (no white space around it, no control characters)")
		}
		b.WriteString("; nothing was frozen.")
	} else {
		what := "no tool of the tools file, MCP server or tool of a call"
		if e.Field == "actor" {
			what = "no actor with an API token or a call"
		}
		fmt.Fprintf(&b, "%q matches %s, so a freeze of it would stop nothing; nothing was frozen.", e.Name, what)
	}
	if len(e.Near) > 0 {
		fmt.Fprintf(&b, " Did you mean %s?", quoteList(e.Near))
	}
	if !e.Invalid {
		article := "a tool"
		if e.Field == "actor" {
			article = "an actor"
		}
		fmt.Fprintf(&b, " To freeze %s not seen yet, ask for it explicitly (console freeze --allow-unknown, or the admin page's \"not seen yet\" box)", article)
	}
	return b.String()
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// known is what a freeze's names are checked against.
type known struct {
	tools, servers, actors map[string]bool
}

func (s *Service) knownNames(tx Tx) (known, error) {
	k := known{tools: map[string]bool{}, servers: map[string]bool{}, actors: map[string]bool{}}
	actors, tools, err := tx.KnownNames(maxKnownNames)
	if err != nil {
		return k, err
	}
	if s.tools != nil {
		for _, t := range s.tools.Tools() {
			tools = append(tools, t.Name)
		}
		for _, u := range s.tools.Upstreams() {
			k.servers[u.Name] = true
			for _, t := range s.tools.MirroredTools(u.Name) {
				tools = append(tools, t.Name)
			}
		}
	}
	for _, t := range tools {
		k.tools[t] = true
		if server, _, ok := canonical.SplitMirrored(t); ok {
			k.servers[server] = true
		}
	}
	for _, a := range actors {
		k.actors[a] = true
	}
	return k, nil
}

// freezeTool returns the tool a freeze of name stores: name itself, or
// SERVER/* for an MCP server; and whether the console knows it.
func (k known) freezeTool(name string) (string, bool, error) {
	server, wild := strings.CutSuffix(name, ServerWildcard)
	switch {
	case name == "":
		return "", true, nil
	case k.tools[name]:
		return name, true, nil
	case wild && canonical.ValidServerName(server):
		return name, k.servers[server], nil
	case k.servers[name]:
		return name + ServerWildcard, true, nil
	case !canonical.ValidTool(name):
		return "", false, &NameError{Field: "tool", Name: name, Invalid: true, Near: near(name, k.toolNames())}
	}
	return name, false, nil
}

func (k known) toolNames() []string {
	out := make([]string, 0, len(k.tools)+len(k.servers))
	for t := range k.tools {
		out = append(out, t)
	}
	for s := range k.servers {
		out = append(out, s)
	}
	return out
}

// checkActor reports whether the console knows actor.
func (k known) checkActor(actor string) (bool, error) {
	if actor == "" || k.actors[actor] {
		return true, nil
	}
	if strings.TrimSpace(actor) != actor || strings.ContainsFunc(actor, unicode.IsControl) {
		return false, &NameError{Field: "actor", Name: actor, Invalid: true, Near: near(actor, keys(k.actors))}
	}
	return false, nil
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// checkFreezeNames applies the rule above to r inside the freeze's
// transaction; it returns the tool to store and the names not seen yet.
func (s *Service) checkFreezeNames(tx Tx, r FreezeRequest) (string, []string, error) {
	if r.Tool == "" && r.Actor == "" {
		return "", nil, nil
	}
	k, err := s.knownNames(tx)
	if err != nil {
		return "", nil, err
	}
	tool, toolKnown, err := k.freezeTool(r.Tool)
	if err != nil {
		return "", nil, err
	}
	actorKnown, err := k.checkActor(r.Actor)
	if err != nil {
		return "", nil, err
	}
	var unseen []string
	if !toolKnown {
		if !r.AllowUnknown {
			return "", nil, &NameError{Field: "tool", Name: r.Tool, Near: near(r.Tool, k.toolNames())}
		}
		unseen = append(unseen, r.Tool)
	}
	if !actorKnown {
		if !r.AllowUnknown {
			return "", nil, &NameError{Field: "actor", Name: r.Actor, Near: near(r.Actor, keys(k.actors))}
		}
		unseen = append(unseen, r.Actor)
	}
	return tool, unseen, nil
}

// unfreezeTool is the tool a lift of name names: SERVER/* for an MCP
// server's name, as its freeze stored it.
func (s *Service) unfreezeTool(tx Tx, name string) (string, error) {
	if name == "" || strings.HasSuffix(name, ServerWildcard) || !canonical.ValidServerName(name) {
		return name, nil
	}
	k, err := s.knownNames(tx)
	if err != nil {
		return "", err
	}
	if !k.tools[name] && k.servers[name] {
		return name + ServerWildcard, nil
	}
	return name, nil
}

// frozenServer returns the freeze of the MCP server of a mirrored tool
// (SERVER/*) that stops a call of tool by actor, if any.
func frozenServer(tx Tx, tool, actor string) (*Freeze, error) {
	server, _, ok := canonical.SplitMirrored(tool)
	if !ok {
		return nil, nil
	}
	f, err := tx.Frozen(server+ServerWildcard, actor)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return f, err
}

// maxNear bounds the close matches a refusal lists.
const maxNear = 5

// near returns the names close to name: equal ignoring case and the white
// space around them, or at most two edits away (one for short names),
// closest first.
func near(name string, names []string) []string {
	type scored struct {
		name string
		d    int
	}
	folded := strings.ToLower(strings.TrimSpace(name))
	var out []scored
	for _, n := range names {
		if n == name {
			continue
		}
		f := strings.ToLower(n)
		d := distance(folded, f)
		switch {
		case f == folded:
			d = 0
		case strings.HasSuffix(f, ServerWildcard) || d > max(1, min(2, len(folded)/4)):
			continue
		}
		out = append(out, scored{n, d})
	}
	slices.SortFunc(out, func(a, b scored) int {
		if a.d != b.d {
			return a.d - b.d
		}
		return strings.Compare(a.name, b.name)
	})
	names = nil
	for i := 0; i < len(out) && i < maxNear; i++ {
		names = append(names, out[i].name)
	}
	return names
}

// distance is the Levenshtein distance between a and b, in bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// FreezeWith is Freeze for a request that may freeze names not seen yet.
func (s *Service) FreezeWith(ctx context.Context, r FreezeRequest) (*Freeze, error) {
	return s.freeze(ctx, r)
}

package tools

import (
	"net/url"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/internal/canonical"
)

// Upstream is one MCP server that the console mirrors, from the mcp
// section of the tools file (see docs/mcp.md). Its name is the audience of
// its tools and the path of its endpoint, /mcp/{name}.
type Upstream struct {
	Name string
	// Command (with Args) is spawned and spoken to over stdio; or URL is
	// reached over Streamable HTTP with Headers.
	Command []string
	Env     []EnvVar
	Dir     string
	URL     string
	Headers []Header
	// Tools are the tools file's overrides, by the upstream's tool name.
	Tools map[string]MCPOverride
	// Line is where the upstream is declared, for messages.
	Line int
}

// EnvVar is one variable set for a spawned upstream.
type EnvVar struct{ Name, Value string }

// Header is one HTTP header sent to a Streamable HTTP upstream. Its value
// is read when the console connects, from an environment variable or a
// file (so secrets stay out of the tools file), after Prefix.
type Header struct {
	Name   string
	Env    string
	File   string
	Prefix string
}

// MCPOverride is the tools file's policy for one mirrored tool. Zero fields
// keep the defaults. Target is a fixed target, or a JSON Pointer (starting
// with "/") to the string argument that is the target; the default is
// mcp:{server}.
type MCPOverride struct {
	Approvals     int
	GrantTTL      time.Duration
	DecideWithin  time.Duration
	OutcomeWithin time.Duration
	Target        string
	// AutoApprove and Rules are the tool's rules, as a declared tool's
	// (docs/policy.md); they are compiled against the upstream's schema
	// when the tool is first decided on.
	AutoApprove bool
	Rules       []RuleSpec
	// Allowance opts the tool into allowances (docs/allowances.md); its
	// varying members are checked against the upstream's schema by
	// Mirror.
	Allowance *Allowance
	// Counter opts the tool into counter-proposals (docs/counters.md); its
	// editable members are checked against the upstream's schema by
	// Mirror.
	Counter *Counter
}

// Upstreams returns the MCP servers of the tools file, in file order.
func (r *Registry) Upstreams() []Upstream {
	return append([]Upstream(nil), r.upstreams...)
}

var (
	upstreamFields = []string{"command", "env", "dir", "url", "headers", "tools"}
	headerFields   = []string{"env", "file", "prefix"}
	overrideFields = []string{"approvals", "grant_ttl", "decide_within", "outcome_within", "target", "auto_approve", "rules", "allowance", "counter"}
)

// mcpSection reads the mcp: mapping from upstream name to upstream.
func (l *linter) mcpSection(n *yaml.Node, r *Registry) {
	entries, ok := l.mapping(n, "", "mcp")
	if !ok {
		return
	}
	for _, e := range entries {
		name := e.key
		where := "mcp/" + name
		if !canonical.ValidServerName(name) {
			l.add(e.keyNode, "", where, "an MCP server's name must match ^[a-z][a-z0-9-]{0,62}$ (it is the audience and the /mcp/{name} path)")
			continue
		}
		u := Upstream{Name: name, Tools: map[string]MCPOverride{}, Line: e.keyNode.Line}
		fields, ok := l.mapping(e.val, "", where)
		if !ok {
			continue
		}
		for _, f := range fields {
			p := where + "/" + f.key
			switch f.key {
			case "command":
				u.Command = l.strings(f.val, p)
				if len(u.Command) == 0 {
					l.add(f.val, "", p, "must be a non-empty list: the program and its arguments")
				}
			case "env":
				envs, _ := l.mapping(f.val, "", p)
				for _, ev := range envs {
					if s, ok := l.str(ev.val, "", p+"/"+ev.key); ok {
						u.Env = append(u.Env, EnvVar{Name: ev.key, Value: s})
					}
				}
			case "dir":
				u.Dir, _ = l.str(f.val, "", p)
			case "url":
				if s, ok := l.str(f.val, "", p); ok {
					if pu, err := url.Parse(s); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
						l.add(f.val, "", p, "must be an http:// or https:// URL")
					}
					u.URL = s
				}
			case "headers":
				u.Headers = l.headers(f.val, p)
			case "tools":
				tools, _ := l.mapping(f.val, "", p)
				for _, t := range tools {
					if !canonical.ValidMCPToolName(t.key) {
						l.add(t.keyNode, "", p, "%s is not an MCP tool name (^[A-Za-z0-9_.-]{1,128}$)", displayName(t.key))
						continue
					}
					u.Tools[t.key] = l.override(t.val, p+"/"+t.key)
				}
			default:
				l.add(f.keyNode, "", where, "unknown field %s (fields: %s)", displayName(f.key), strings.Join(upstreamFields, ", "))
			}
		}
		switch {
		case len(u.Command) > 0 && u.URL != "":
			l.add(e.keyNode, "", where, "give either command (stdio) or url (Streamable HTTP), not both")
		case len(u.Command) == 0 && u.URL == "":
			l.add(e.keyNode, "", where, "command (a program spoken to over stdio) or url (Streamable HTTP) is required")
		case len(u.Headers) > 0 && u.URL == "":
			l.add(e.keyNode, "", where, "headers are sent to a url upstream only")
		case (len(u.Env) > 0 || u.Dir != "") && len(u.Command) == 0:
			l.add(e.keyNode, "", where, "env and dir apply to a command upstream only")
		}
		r.upstreams = append(r.upstreams, u)
	}
}

func (l *linter) strings(n *yaml.Node, path string) []string {
	if n.Kind != yaml.SequenceNode {
		l.add(n, "", path, "must be a list of strings")
		return nil
	}
	var out []string
	for _, c := range n.Content {
		if s, ok := l.str(c, "", path); ok {
			out = append(out, s)
		}
	}
	return out
}

func (l *linter) headers(n *yaml.Node, path string) []Header {
	entries, ok := l.mapping(n, "", path)
	if !ok {
		return nil
	}
	var out []Header
	for _, e := range entries {
		h := Header{Name: e.key}
		p := path + "/" + e.key
		fields, ok := l.mapping(e.val, "", p)
		if !ok {
			l.add(e.val, "", p, "a header's value comes from env: VAR or file: PATH (with an optional prefix), never from the tools file itself")
			continue
		}
		for _, f := range fields {
			switch f.key {
			case "env":
				h.Env, _ = l.str(f.val, "", p+"/env")
			case "file":
				h.File, _ = l.str(f.val, "", p+"/file")
			case "prefix":
				h.Prefix, _ = l.str(f.val, "", p+"/prefix")
			default:
				l.add(f.keyNode, "", p, "unknown field %s (fields: %s)", displayName(f.key), strings.Join(headerFields, ", "))
			}
		}
		if (h.Env == "") == (h.File == "") {
			l.add(e.keyNode, "", p, "give exactly one of env or file")
		}
		out = append(out, h)
	}
	return out
}

func (l *linter) override(n *yaml.Node, path string) MCPOverride {
	var o MCPOverride
	fields, ok := l.mapping(n, "", path)
	if !ok {
		return o
	}
	for _, f := range fields {
		p := path + "/" + f.key
		switch f.key {
		case "approvals":
			if i, ok := l.integer(f.val, "", p); ok {
				if i < 1 || i > MaxApprovals {
					l.add(f.val, "", p, "must be between 1 and %d, not %d", MaxApprovals, i)
				}
				o.Approvals = int(i)
			}
		case "grant_ttl":
			if d, ok := l.duration(f.val, "", p); ok {
				if d < time.Second || d%time.Second != 0 || d > MaxGrantTTL {
					l.add(f.val, "", p, "must be a whole number of seconds from 1s to %s", fmtDuration(MaxGrantTTL))
				}
				o.GrantTTL = d
			}
		case "decide_within":
			if d, ok := l.duration(f.val, "", p); ok {
				if d < time.Second || d > MaxDecideWithin {
					l.add(f.val, "", p, "must be between 1s and %s", fmtDuration(MaxDecideWithin))
				}
				o.DecideWithin = d
			}
		case "outcome_within":
			if d, ok := l.outcomeWithin(f.val, "", p); ok {
				o.OutcomeWithin = d
			}
		case "target":
			if s, ok := l.str(f.val, "", p); ok {
				if strings.HasPrefix(s, "/") {
					if _, err := canonical.SplitPointer(s); err != nil {
						l.add(f.val, "", p, "%v", err)
					}
				} else if canonical.IsBlank(s) || len(s) > canonical.MaxTargetBytes || strings.IndexFunc(s, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }) >= 0 {
					l.add(f.val, "", p, "must be a JSON Pointer into the arguments (/account) or a fixed target without control or invisible characters")
				}
				o.Target = s
			}
		case "auto_approve":
			if s, ok := l.str(f.val, "", p); ok {
				switch s {
				case AutoApproveAllowed:
					o.AutoApprove = true
				case AutoApproveNever:
				default:
					l.add(f.val, "", p, "must be %s or %s, not %s", AutoApproveAllowed, AutoApproveNever, displayName(s))
				}
			}
		case "rules":
			o.Rules = l.rules(f.val, path)
		case "allowance":
			o.Allowance = l.allowance(f.val, &Tool{Name: path})
		case "counter":
			o.Counter = l.counter(f.val, &Tool{Name: path})
		default:
			l.add(f.keyNode, "", path, "unknown field %s (fields: %s)", displayName(f.key), strings.Join(overrideFields, ", "))
		}
	}
	return o
}

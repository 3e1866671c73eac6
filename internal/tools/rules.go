package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/internal/canonical"
)

// Rule actions: what a matching rule does with a call.
const (
	ThenApprove = "approve"
	ThenDeny    = "deny"
	ThenAsk     = "ask"
)

// Rule limits of a tools file.
const (
	// MaxRules bounds the rules of one tool.
	MaxRules = 100
	// MaxRuleIDBytes bounds a rule id.
	MaxRuleIDBytes = 64
	// MaxRuleBytes bounds a rule's when expression.
	MaxRuleBytes = 4096
	// MaxRuleReasonBytes bounds a rule's reason, which the agent receives
	// when the rule denies a call.
	MaxRuleReasonBytes = 500
)

var ruleIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// RuleSpec is one rule of a tool as written in the tools file. The rule
// language (CEL) is compiled and checked against the tool by the policy
// package; the tools file only fixes its shape.
type RuleSpec struct {
	// ID names the rule; a decision by the rule is recorded as by
	// "policy:" + ID.
	ID string
	// When is the CEL expression that must be true for the rule to match.
	When string
	// Then is ThenApprove, ThenDeny or ThenAsk.
	Then string
	// Approvals is the number of distinct approvers an ask rule requires;
	// 0 when the rule does not say (the tool's approvals apply).
	Approvals int
	// Reason explains the rule; the agent receives it when the rule denies.
	Reason string
	// Notify names notification channels that hear of every event of a
	// call the rule matched, besides those its route names. It says who is
	// told, not what is decided, so the digest does not cover it.
	Notify []string
	// RequirePasskey is true when an ask rule requires the approvals it
	// asks for to be signed by the operators' passkeys (approve_with:
	// passkey).
	RequirePasskey bool
	// Digest is the hex SHA-256 of the rule's canonical text (its id, when,
	// then, approvals and reason), recorded with every decision it makes.
	Digest string
	// Line and WhenLine locate the rule and its expression in the file; 0
	// when the rule did not come from a file.
	Line, WhenLine int
}

// Auto-approve settings of a tool.
const (
	AutoApproveNever   = "never"
	AutoApproveAllowed = "allowed"
)

// AutoApproveBlockers returns why no rule may approve this tool's calls
// without a person, empty when a `then: approve` rule is allowed: the tool
// opts in with auto_approve: allowed and requires nothing an automatic
// decision cannot give (more than one approval). Requirements that only a
// person can meet add their reasons here.
func (t *Tool) AutoApproveBlockers() []string {
	var why []string
	if !t.AutoApprove {
		why = append(why, "the tool does not opt in (auto_approve: allowed)")
	}
	if t.Approvals > 1 {
		why = append(why, "the tool needs "+strconv.Itoa(t.Approvals)+" approvals, and a rule gives one")
	}
	if t.RequirePasskey {
		why = append(why, "the tool requires approvals signed by a passkey (approve_with: passkey), and a rule has none")
	}
	if !t.Approvers.Empty() {
		why = append(why, "the tool names who may approve ("+t.Approvers.Describe()+"), and a rule is none of them")
	}
	return why
}

var ruleFields = []string{"approvals", "approve_with", "id", "notify", "reason", "then", "when"}

// channelNamePattern is a notification channel's name (internal/notify).
var channelNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// rules reads a tool's rules list: its shape only. What the expressions
// mean, and whether each action is allowed for the tool, is checked when
// the policy is compiled.
func (l *linter) rules(n *yaml.Node, tool string) []RuleSpec {
	if n.Kind != yaml.SequenceNode {
		l.add(n, tool, "rules", "must be a list of rules, each {id, when, then, approvals?, approve_with?, reason?}")
		return nil
	}
	if len(n.Content) > MaxRules {
		l.add(n, tool, "rules", "%d rules; at most %d are allowed for one tool", len(n.Content), MaxRules)
		return nil
	}
	var out []RuleSpec
	seen := map[string]int{}
	for i, rn := range n.Content {
		path := "rules/" + strconv.Itoa(i)
		entries, ok := l.mapping(rn, tool, path)
		if !ok {
			continue
		}
		r := RuleSpec{Line: rn.Line}
		fields := map[string]*yaml.Node{}
		for _, e := range entries {
			if !contains(ruleFields, e.key) {
				l.add(e.keyNode, tool, path, "unknown rule field %s (fields: %s)", displayName(e.key), strings.Join(ruleFields, ", "))
				continue
			}
			fields[e.key] = e.val
		}
		if f := fields["id"]; f == nil {
			l.add(rn, tool, path, "id is required: a name such as small-refunds, recorded with every decision the rule makes")
		} else if s, ok := l.str(f, tool, path+"/id"); ok {
			switch {
			case !ruleIDPattern.MatchString(s) || len(s) > MaxRuleIDBytes:
				l.add(f, tool, path+"/id", "rule ids are lower-case letters, digits, - and _ matching %s, at most %d bytes, not %s",
					ruleIDPattern, MaxRuleIDBytes, displayName(s))
			case seen[s] > 0:
				l.add(f, tool, path+"/id", "rule id %s is used twice (first at line %d)", s, seen[s])
			default:
				seen[s] = f.Line
			}
			r.ID = s
			path = "rules/" + s
		}
		if f := fields["when"]; f == nil {
			l.add(rn, tool, path, "when is required: a CEL expression such as args.amount_minor <= 5000")
		} else if s, ok := l.str(f, tool, path+"/when"); ok {
			switch {
			case canonical.IsBlank(s):
				l.add(f, tool, path+"/when", "must be a CEL expression, not empty")
			case len(s) > MaxRuleBytes:
				l.add(f, tool, path+"/when", "the expression is %d bytes; at most %d are allowed", len(s), MaxRuleBytes)
			}
			r.When, r.WhenLine = s, f.Line
		}
		if f := fields["then"]; f == nil {
			l.add(rn, tool, path, "then is required: approve, deny or ask")
		} else if s, ok := l.str(f, tool, path+"/then"); ok {
			if s != ThenApprove && s != ThenDeny && s != ThenAsk {
				l.add(f, tool, path+"/then", "must be approve, deny or ask, not %s", displayName(s))
			}
			r.Then = s
		}
		if f := fields["approvals"]; f != nil {
			if v, ok := l.integer(f, tool, path+"/approvals"); ok {
				if v < 1 || v > MaxApprovals {
					l.add(f, tool, path+"/approvals", "must be between 1 and %d, not %d", MaxApprovals, v)
				}
				r.Approvals = int(v)
			}
		}
		if f := fields["reason"]; f != nil {
			if s, ok := l.str(f, tool, path+"/reason"); ok {
				switch {
				case len(s) > MaxRuleReasonBytes:
					l.add(f, tool, path+"/reason", "the reason is %d bytes; at most %d are allowed", len(s), MaxRuleReasonBytes)
				case strings.IndexFunc(s, func(r rune) bool { return unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) }) >= 0:
					l.add(f, tool, path+"/reason", "the reason must not hold control or invisible characters")
				}
				r.Reason = strings.TrimSpace(s)
			}
		}
		if f := fields["notify"]; f != nil {
			r.Notify = l.channelNames(f, tool, path+"/notify")
		}
		if f := fields["approve_with"]; f != nil {
			r.RequirePasskey = l.approveWith(f, tool, path+"/approve_with")
			if r.Then != ThenAsk {
				l.add(f, tool, path+"/approve_with", "approve_with applies to ask rules only: a rule that %ss involves no person", r.Then)
			}
		}
		r.Digest = ruleDigest(r)
		out = append(out, r)
	}
	return out
}

// channelNames reads a rule's notify list: channel names of the
// notifications configuration, which the console checks at start.
func (l *linter) channelNames(n *yaml.Node, tool, path string) []string {
	if n.Kind != yaml.SequenceNode {
		l.add(n, tool, path, "must be a list of notification channel names, such as [oncall]")
		return nil
	}
	var out []string
	for _, item := range n.Content {
		s, ok := l.str(item, tool, path)
		if !ok {
			continue
		}
		if !channelNamePattern.MatchString(s) {
			l.add(item, tool, path, "channel names are lower-case letters, digits, - and _, starting with a letter, not %s", displayName(s))
			continue
		}
		out = append(out, s)
	}
	return out
}

// ruleDigest is the hex SHA-256 of "countersign/v1/rule:" followed by the
// RFC 8785 bytes of {"approvals","id","reason","then","when"}, with
// "approve_with":"passkey" added when the rule requires passkeys.
func ruleDigest(r RuleSpec) string {
	members := []canonical.Member{
		{Name: "id", Value: r.ID},
		{Name: "when", Value: r.When},
		{Name: "then", Value: r.Then},
		{Name: "approvals", Value: int64(r.Approvals)},
		{Name: "reason", Value: r.Reason},
	}
	if r.RequirePasskey {
		members = append(members, canonical.Member{Name: "approve_with", Value: ApproveWithPasskey})
	}
	o, _ := canonical.NewObject(members...)
	return prefixedDigest("countersign/v1/rule:", o)
}

// prefixedDigest is the hex SHA-256 of prefix followed by the RFC 8785
// bytes of v. Only values built from a linted file reach it, so encoding
// cannot fail.
func prefixedDigest(prefix string, v any) string {
	b, err := canonical.Encode(v)
	if err != nil {
		panic("tools: digest of a linted value: " + err.Error())
	}
	h := sha256.New()
	h.Write([]byte(prefix))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// definitionDigest is the hex SHA-256 of "countersign/v1/tool:" followed by
// the RFC 8785 bytes of {"name": NAME, "definition": ENTRY}, ENTRY being the
// tool's whole entry in the tools file.
func definitionDigest(name string, entry any) string {
	o, _ := canonical.NewObject(
		canonical.Member{Name: "name", Value: name},
		canonical.Member{Name: "definition", Value: entry},
	)
	return prefixedDigest("countersign/v1/tool:", o)
}

// ArgSchema is a read-only view of the declared schema of a value inside a
// tool's args, for checks that need to know which members exist.
type ArgSchema struct{ s *schema }

// ArgsSchema returns the schema of the tool's args object.
func (t *Tool) ArgsSchema() ArgSchema { return ArgSchema{t.args} }

// Property returns the schema of a declared property of an object schema.
func (a ArgSchema) Property(name string) (ArgSchema, bool) {
	if a.s == nil {
		return ArgSchema{}, false
	}
	sub, ok := a.s.properties[name]
	return ArgSchema{sub}, ok
}

// Properties returns the declared property names, sorted.
func (a ArgSchema) Properties() []string {
	if a.s == nil {
		return nil
	}
	return append([]string(nil), a.s.names...)
}

// Items returns the schema of an array schema's items.
func (a ArgSchema) Items() (ArgSchema, bool) {
	if a.s == nil || a.s.items == nil {
		return ArgSchema{}, false
	}
	return ArgSchema{a.s.items}, true
}

// IsObject reports whether the schema admits objects.
func (a ArgSchema) IsObject() bool { return a.s != nil && a.s.valueTypes()&typeObject != 0 }

// IsArray reports whether the schema admits arrays.
func (a ArgSchema) IsArray() bool { return a.s != nil && a.s.valueTypes()&typeArray != 0 }

// Types describes the JSON types the schema admits, e.g. "an integer".
func (a ArgSchema) Types() string {
	if a.s == nil {
		return "nothing"
	}
	return a.s.valueTypes().describe()
}

// Package policy decides the easy calls by rule: each tool of the tools file
// may list rules, CEL expressions over the call's bound arguments and its
// trusted context, and the first rule that matches approves the call, denies
// it, or asks people (possibly more of them). A call that no rule matches,
// or whose rules cannot be evaluated, goes to people with the tool's own
// requirements. See docs/policy.md.
//
// Rules never lower a tool's requirements: an ask rule may raise the
// approvals a tool needs, never lower them, and an approve rule is refused
// at load unless the tool opts in and needs nothing a rule cannot give.
package policy

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	// Rules name time zones (now.getHours("Europe/Berlin")); the zone data
	// is built in so that they evaluate the same on every machine.
	_ "time/tzdata"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/tools"
)

// DefaultCostLimit bounds the work of evaluating one rule (CEL's runtime
// cost units: roughly one per operation, more for string and list work).
// A rule that goes over it makes no decision and the call goes to people.
const DefaultCostLimit = 10_000

// PrincipalPrefix starts the name a decision by rule is recorded under:
// "policy:" followed by the rule id.
const PrincipalPrefix = "policy:"

// Action is what a decision does with a call.
type Action string

// Actions.
const (
	Approve Action = tools.ThenApprove
	Deny    Action = tools.ThenDeny
	Ask     Action = tools.ThenAsk
)

// Option changes how rules are compiled or evaluated.
type Option func(*options)

type options struct{ costLimit uint64 }

// WithCostLimit sets the cost limit of one rule's evaluation.
func WithCostLimit(n uint64) Option { return func(o *options) { o.costLimit = n } }

// Policy is the compiled rules of every tool in a registry. It is read-only
// after Compile and safe for concurrent use.
type Policy struct {
	reg   *tools.Registry
	tools map[string]*toolRules

	// The rules of tools mirrored from MCP servers are compiled when a
	// tool is first decided on, against the schema its server listed:
	// by definition digest, a *toolRules or the error.
	env      *cel.Env
	opts     options
	mirrored sync.Map

	evalErrors atomic.Uint64
}

type toolRules struct {
	tool  *tools.Tool
	rules []*Rule
}

// Rule is one compiled rule.
type Rule struct {
	tools.RuleSpec
	prg cel.Program
}

// Principal is the name a decision by this rule is recorded under.
func (r *Rule) Principal() string { return PrincipalPrefix + r.ID }

// Input is what rules may see of a call. Args are the arguments as
// proposed; Decide removes the informational members before any rule sees
// them, because the digest does not bind them.
type Input struct {
	Target   string
	Args     canonical.Object
	Actor    string
	Audience string
	Now      time.Time
}

// Step is one rule's result while a decision was made.
type Step struct {
	Rule    *Rule
	Matched bool
	Err     error // evaluation error or cost-limit hit
}

// Decision is the result of a tool's rules for one call.
type Decision struct {
	Action Action
	// Rule is the rule that decided, nil when no rule matched or the
	// rules could not be evaluated (then Action is Ask).
	Rule *Rule
	// Approvals is how many distinct approvers an Ask decision requires:
	// never fewer than the tool's approvals.
	Approvals int
	// RequirePasskey is true when an Ask decision's approvals must be
	// signed by passkeys: the tool requires it, or the ask rule that
	// matched does, or (when the rules could not be evaluated) any ask rule
	// that might have matched does.
	RequirePasskey bool
	// Reason is the rule's reason, empty when no rule decided.
	Reason string
	// Err is set when a rule could not be evaluated: no automatic
	// decision was made.
	Err error
	// Steps lists the rules evaluated, in order, up to the one that
	// matched or failed.
	Steps []Step
}

// Automatic reports whether a rule approved or denied the call.
func (d Decision) Automatic() bool { return d.Rule != nil && d.Action != Ask }

// Registry returns the tools the policy was compiled for.
func (p *Policy) Registry() *tools.Registry { return p.reg }

// ToolsDigest is the digest of the tools file in force.
func (p *Policy) ToolsDigest() string { return p.reg.Digest() }

// EvalErrors counts rule evaluations that failed (errors and cost-limit
// hits) since the policy was compiled.
func (p *Policy) EvalErrors() uint64 { return p.evalErrors.Load() }

// Rules returns a tool's compiled rules in order.
func (p *Policy) Rules(tool string) []*Rule {
	if tr, ok := p.tools[tool]; ok {
		return append([]*Rule(nil), tr.rules...)
	}
	return nil
}

// Load reads a tools file and compiles its rules. The error is a
// *tools.LintError listing every problem, of the file or of its rules.
func Load(path string, opts ...Option) (*Policy, error) {
	reg, err := tools.Load(path)
	if err != nil {
		return nil, err
	}
	p, err := Compile(reg, opts...)
	if le, ok := err.(*tools.LintError); ok {
		le.File = path
	}
	return p, err
}

// Parse lints a tools file's contents and compiles its rules, as Load does.
func Parse(data []byte, opts ...Option) (*Policy, error) {
	reg, err := tools.Parse(data)
	if err != nil {
		return nil, err
	}
	return Compile(reg, opts...)
}

// Compile compiles and checks the rules of every tool in reg. It refuses,
// listing every problem with its tool, rule and line, a rule that does not
// compile, does not return a bool, names an argument the tool's schema does
// not declare (or one the digest does not bind), approves where the tool
// does not allow it, or asks for fewer approvals than the tool needs.
func Compile(reg *tools.Registry, opts ...Option) (*Policy, error) {
	o := options{costLimit: DefaultCostLimit}
	for _, opt := range opts {
		opt(&o)
	}
	env, err := newEnv()
	if err != nil {
		return nil, fmt.Errorf("policy: CEL environment: %w", err)
	}
	p := &Policy{reg: reg, tools: map[string]*toolRules{}, env: env, opts: o}
	var problems []tools.LintProblem
	for _, t := range reg.Tools() {
		tr := &toolRules{tool: t}
		for _, spec := range t.Rules {
			r, ps := compileRule(env, t, spec, o)
			problems = append(problems, ps...)
			if r != nil {
				tr.rules = append(tr.rules, r)
			}
		}
		p.tools[t.Name] = tr
	}
	if len(problems) > 0 {
		sort.SliceStable(problems, func(i, j int) bool { return problems[i].Line < problems[j].Line })
		return nil, &tools.LintError{Problems: problems}
	}
	return p, nil
}

func newEnv() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("tool", cel.StringType),
		cel.Variable("target", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("actor", cel.StringType),
		cel.Variable("audience", cel.StringType),
		cel.Variable("now", cel.TimestampType),
		cel.ParserExpressionSizeLimit(tools.MaxRuleBytes),
	)
}

func compileRule(env *cel.Env, t *tools.Tool, spec tools.RuleSpec, o options) (*Rule, []tools.LintProblem) {
	path := "rules/" + spec.ID
	var problems []tools.LintProblem
	add := func(line int, sub, format string, args ...any) {
		if line == 0 {
			line = spec.Line
		}
		problems = append(problems, tools.LintProblem{Tool: t.Name, Path: path + sub, Line: line, Message: fmt.Sprintf(format, args...)})
	}

	switch spec.Then {
	case tools.ThenApprove:
		if why := t.AutoApproveBlockers(); len(why) > 0 {
			add(0, "", "rule %s approves without a person, which %s does not allow: %s", spec.ID, t.Name, strings.Join(why, "; "))
		}
		if spec.Approvals != 0 {
			add(0, "/approvals", "approvals applies to ask rules only; an approve rule is one approval, by the rule")
		}
	case tools.ThenDeny:
		if spec.Reason == "" {
			add(0, "", "rule %s denies, so it needs a reason: the agent receives it", spec.ID)
		}
		if spec.Approvals != 0 {
			add(0, "/approvals", "approvals applies to ask rules only")
		}
	case tools.ThenAsk:
		if spec.Approvals != 0 && spec.Approvals < t.Approvals {
			add(0, "/approvals", "approvals: %d would lower %s's %d; an ask rule may raise the approvals a tool needs, never lower them",
				spec.Approvals, t.Name, t.Approvals)
		}
	}

	ast, iss := env.Compile(spec.When)
	if iss.Err() != nil {
		add(spec.WhenLine, "/when", "does not compile: %s", oneLine(iss.Err().Error()))
		return nil, problems
	}
	if !ast.OutputType().IsExactType(types.BoolType) {
		hint := ""
		if ast.OutputType().IsExactType(types.DynType) {
			hint = " (an argument's type is only known at run time: compare it, e.g. args.backup == true)"
		}
		add(spec.WhenLine, "/when", "must be true or false, but this expression is %s%s", ast.OutputType(), hint)
	}
	for _, msg := range checkArgs(ast.NativeRep(), t) {
		add(spec.WhenLine, "/when", "%s", msg)
	}
	if len(problems) > 0 {
		return nil, problems
	}
	prg, err := env.Program(ast, cel.CostLimit(o.costLimit), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		add(spec.WhenLine, "/when", "cannot be prepared: %v", err)
		return nil, problems
	}
	return &Rule{RuleSpec: spec, prg: prg}, nil
}

func oneLine(s string) string {
	s = strings.TrimPrefix(s, "ERROR: <input>:")
	return strings.Join(strings.Fields(s), " ")
}

// ErrToolNotCompiled is a tool whose definition is not the one its rules
// were compiled for.
var ErrToolNotCompiled = errors.New("policy: the tool's rules were compiled for another definition")

// Decide runs the tool's rules over a call, in order; the first that
// matches decides. No match asks people with the tool's approvals. A rule
// that cannot be evaluated (an error or the cost limit) stops the
// evaluation: no automatic decision is made, and the call asks people for
// the most approvals that any rule from there on could have required, so
// that a failure never lowers a requirement.
func (p *Policy) Decide(t *tools.Tool, in Input) Decision {
	d := Decision{Action: Ask, Approvals: t.Approvals, RequirePasskey: t.RequirePasskey}
	tr, ok := p.tools[t.Name]
	if !ok && t.Mirror != nil && len(t.Rules) > 0 {
		var err error
		if tr, err = p.mirroredRules(t); err != nil {
			d.Err = err
			// Fail closed: any ask rule might have matched, with its
			// approvals and its passkeys.
			for _, r := range t.Rules {
				if r.Then == tools.ThenAsk {
					d.Approvals = max(d.Approvals, r.Approvals)
					d.RequirePasskey = d.RequirePasskey || r.RequirePasskey
				}
			}
			p.evalErrors.Add(1)
			return d
		}
		ok = true
	}
	if !ok || len(tr.rules) == 0 {
		return d
	}
	if tr.tool.DefinitionDigest != t.DefinitionDigest {
		d.Err = ErrToolNotCompiled
		d.Approvals = maxAsk(tr.rules, t.Approvals)
		d.RequirePasskey = d.RequirePasskey || anyPasskey(tr.rules)
		p.evalErrors.Add(1)
		return d
	}
	vars := map[string]any{
		"tool":     t.Name,
		"target":   in.Target,
		"args":     native(t.Bound(in.Args)),
		"actor":    in.Actor,
		"audience": in.Audience,
		"now":      in.Now.UTC(),
	}
	for i, r := range tr.rules {
		out, _, err := r.prg.Eval(vars)
		step := Step{Rule: r}
		if err == nil {
			b, isBool := out.Value().(bool)
			if !isBool {
				err = fmt.Errorf("rule %s returned %s, not a bool", r.ID, out.Type().TypeName())
			}
			step.Matched = b
		}
		if err != nil {
			step.Err = fmt.Errorf("policy: %s rule %s: %w", t.Name, r.ID, err)
			d.Steps = append(d.Steps, step)
			d.Err = step.Err
			d.Approvals = maxAsk(tr.rules[i:], t.Approvals)
			d.RequirePasskey = d.RequirePasskey || anyPasskey(tr.rules[i:])
			p.evalErrors.Add(1)
			return d
		}
		d.Steps = append(d.Steps, step)
		if !step.Matched {
			continue
		}
		d.Action, d.Rule, d.Reason = Action(r.Then), r, r.Reason
		switch d.Action {
		case Ask:
			d.Approvals = max(t.Approvals, r.Approvals)
			d.RequirePasskey = t.RequirePasskey || r.RequirePasskey
		case Approve:
			d.Approvals, d.RequirePasskey = 1, false
		default:
			d.Approvals, d.RequirePasskey = 0, false
		}
		return d
	}
	return d
}

// CheckMirrored compiles the rules that the tools file gives a tool mirrored
// from an MCP server against the schema its server listed, as Decide will:
// nil when they fit (or there are none), else the error, whose
// *tools.LintError lists every problem. The MCP catalog calls it when it
// pins a definition, so that an admin sees the problems before any call.
func (p *Policy) CheckMirrored(t *tools.Tool) error {
	if t.Mirror == nil || len(t.Rules) == 0 {
		return nil
	}
	_, err := p.mirroredRules(t)
	return err
}

// mirroredRules compiles the rules a tools file gives a mirrored tool, once
// per definition. A rule that does not compile against the upstream's
// schema makes every call of the tool go to people (the error says why).
func (p *Policy) mirroredRules(t *tools.Tool) (*toolRules, error) {
	if v, ok := p.mirrored.Load(t.DefinitionDigest); ok {
		if err, isErr := v.(error); isErr {
			return nil, err
		}
		return v.(*toolRules), nil
	}
	tr := &toolRules{tool: t}
	var problems []tools.LintProblem
	for _, spec := range t.Rules {
		r, ps := compileRule(p.env, t, spec, p.opts)
		problems = append(problems, ps...)
		if r != nil {
			tr.rules = append(tr.rules, r)
		}
	}
	if len(problems) > 0 {
		err := fmt.Errorf("policy: the rules of %s do not fit its schema: %w", t.Name, &tools.LintError{Problems: problems})
		p.mirrored.Store(t.DefinitionDigest, err)
		return nil, err
	}
	p.mirrored.Store(t.DefinitionDigest, tr)
	return tr, nil
}

// anyPasskey reports whether any ask rule among rules requires passkeys.
func anyPasskey(rules []*Rule) bool {
	for _, r := range rules {
		if r.Then == tools.ThenAsk && r.RequirePasskey {
			return true
		}
	}
	return false
}

func maxAsk(rules []*Rule, floor int) int {
	n := floor
	for _, r := range rules {
		if r.Then == tools.ThenAsk && r.Approvals > n {
			n = r.Approvals
		}
	}
	return n
}

// native converts a canonical value into the Go values CEL adapts: objects
// become map[string]any, integers stay int64, so integer comparisons are
// exact at any magnitude (a float64 would make 2^53+1 equal 2^53).
func native(v any) any {
	switch x := v.(type) {
	case canonical.Object:
		m := make(map[string]any, len(x))
		for _, mem := range x {
			m[mem.Name] = native(mem.Value)
		}
		return m
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = native(e)
		}
		return out
	case canonical.Number:
		return float64(x) // only at schema number paths of mirrored tools
	case nil:
		return types.NullValue
	}
	return v
}

package policy

import (
	"fmt"
	"strings"

	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/tools"
)

// argRef is what an expression denotes when it is a member of args: its
// schema, how a rule writes it, and its JSON Pointer inside args ("" once
// the path goes through an array, where nothing is informational).
type argRef struct {
	schema  tools.ArgSchema
	written string
	ptr     string
	inArray bool
}

// argChecker walks a checked rule and reports every member of args that
// the tool's schema does not declare, or that the digest does not bind.
// It follows field selections (args.a.b, has(args.a.b)), constant indexes
// (args["a"], args.list[0]) and the variables of comprehensions over lists
// (args.to.exists(r, r.address == "x")). A key that is only known at run
// time cannot be checked here; a missing member then fails the evaluation
// and the call goes to people.
type argChecker struct {
	tool     *tools.Tool
	refs     map[int64]*argRef
	problems []string
	seen     map[string]bool
}

func checkArgs(a *ast.AST, t *tools.Tool) []string {
	c := &argChecker{tool: t, refs: map[int64]*argRef{}, seen: map[string]bool{}}
	c.walk(a.Expr(), map[string]*argRef{"args": {schema: t.ArgsSchema(), written: "args"}})
	return c.problems
}

func (c *argChecker) report(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !c.seen[msg] {
		c.seen[msg] = true
		c.problems = append(c.problems, msg)
	}
}

// walk visits every subexpression with the names bound in scope.
func (c *argChecker) walk(e ast.Expr, scope map[string]*argRef) {
	switch e.Kind() {
	case ast.SelectKind:
		c.ref(e, scope)
		c.walk(e.AsSelect().Operand(), scope)
	case ast.CallKind:
		call := e.AsCall()
		if call.FunctionName() == operators.Index {
			c.ref(e, scope)
		}
		if call.IsMemberFunction() {
			c.walk(call.Target(), scope)
		}
		for _, arg := range call.Args() {
			c.walk(arg, scope)
		}
	case ast.ListKind:
		for _, el := range e.AsList().Elements() {
			c.walk(el, scope)
		}
	case ast.MapKind:
		for _, ent := range e.AsMap().Entries() {
			me := ent.AsMapEntry()
			c.walk(me.Key(), scope)
			c.walk(me.Value(), scope)
		}
	case ast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			c.walk(f.AsStructField().Value(), scope)
		}
	case ast.ComprehensionKind:
		comp := e.AsComprehension()
		c.walk(comp.IterRange(), scope)
		c.walk(comp.AccuInit(), scope)
		inner := make(map[string]*argRef, len(scope)+2)
		for k, v := range scope {
			inner[k] = v
		}
		delete(inner, comp.IterVar())
		delete(inner, comp.AccuVar())
		if comp.HasIterVar2() {
			delete(inner, comp.IterVar2())
		}
		if r := c.ref(comp.IterRange(), scope); r != nil && r.schema.IsArray() {
			if items, ok := r.schema.Items(); ok {
				elem := &argRef{schema: items, written: r.written + "[]", inArray: true}
				if comp.HasIterVar2() {
					inner[comp.IterVar2()] = elem // (index, value)
				} else {
					inner[comp.IterVar()] = elem
				}
			}
		}
		c.walk(comp.LoopCondition(), inner)
		c.walk(comp.LoopStep(), inner)
		c.walk(comp.Result(), inner)
	}
}

// ref returns the member of args that e denotes, or nil when e is not one
// (or is one that was already reported). Each expression is resolved once.
func (c *argChecker) ref(e ast.Expr, scope map[string]*argRef) *argRef {
	if r, done := c.refs[e.ID()]; done {
		return r
	}
	var r *argRef
	switch e.Kind() {
	case ast.IdentKind:
		r = scope[e.AsIdent()]
	case ast.SelectKind:
		sel := e.AsSelect()
		if base := c.ref(sel.Operand(), scope); base != nil {
			r = c.member(base, sel.FieldName(), sel.IsTestOnly())
		}
	case ast.CallKind:
		call := e.AsCall()
		if call.FunctionName() != operators.Index || len(call.Args()) != 2 {
			break
		}
		base := c.ref(call.Args()[0], scope)
		key := call.Args()[1]
		if base == nil {
			break
		}
		switch {
		case base.schema.IsArray():
			if items, ok := base.schema.Items(); ok {
				r = &argRef{schema: items, written: base.written + "[]", inArray: true}
			}
		case key.Kind() == ast.LiteralKind:
			if name, ok := key.AsLiteral().Value().(string); ok {
				r = c.member(base, name, false)
			}
		}
	}
	c.refs[e.ID()] = r
	return r
}

// member resolves one named member of an args object.
func (c *argChecker) member(base *argRef, name string, presence bool) *argRef {
	written := base.written + "." + name
	if !base.schema.IsObject() {
		c.report("%s: %s is %s, which has no members", written, base.written, base.schema.Types())
		return nil
	}
	sub, ok := base.schema.Property(name)
	if !ok {
		verb := "names"
		if presence {
			verb = "tests for"
		}
		c.report("%s %s, which %s does not declare (declared: %s)", verb, written, describeObject(base), listOrNone(base.schema.Properties()))
		return nil
	}
	r := &argRef{schema: sub, written: written, inArray: base.inArray}
	if !base.inArray {
		r.ptr = base.ptr + "/" + pointerToken(name)
		if c.tool.IsInformational(r.ptr) {
			c.report("names %s, which is informational: the digest does not bind it, so no rule may decide on it", written)
			return nil
		}
	}
	return r
}

func describeObject(r *argRef) string {
	if r.written == "args" {
		return "the tool's args schema"
	}
	return r.written
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func pointerToken(name string) string {
	return strings.TrimPrefix(canonical.Pointer(name), "/")
}

package tools

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// What a tools file may say about how the console presents a tool's calls
// and how an operator decides them: the members a queue card summarizes,
// a confirmation typed before approving, and preset deny reasons.

// Limits of the console fields.
const (
	// MaxSummary bounds the members a queue card summarizes.
	MaxSummary = 6
	// MaxDenyReasons bounds a tool's preset deny reasons.
	MaxDenyReasons = 20
	// MaxDenyReasonBytes bounds one preset reason.
	MaxDenyReasonBytes = 200
	// MaxConfirmWordBytes bounds a confirmation word.
	MaxConfirmWordBytes = 64
)

// ConfirmTarget is the confirm value that asks for the call's target.
const ConfirmTarget = "target"

// ConfirmNone is the confirm value that lets a high-risk tool's calls be
// approved without typing; any other high-risk tool asks for the target.
const ConfirmNone = "none"

// Risk levels a tool may declare.
const (
	RiskLow    = "low"
	RiskMedium = "medium"
	RiskHigh   = "high"
)

// Effects a tool may declare; EffectReadOnly excludes every other.
var Effects = []string{"money", "destructive", "external", "production", EffectReadOnly}

// EffectReadOnly is the effect of a tool that changes nothing.
const EffectReadOnly = "read-only"

// RiskRank orders risk levels for sorting: high first; 0 when undeclared.
func RiskRank(risk string) int {
	switch risk {
	case RiskHigh:
		return 3
	case RiskMedium:
		return 2
	case RiskLow:
		return 1
	}
	return 0
}

// risk reads `risk: low|medium|high`.
func (l *linter) risk(n *yaml.Node, t *Tool) string {
	s, ok := l.str(n, t.Name, "risk")
	if !ok {
		return ""
	}
	if RiskRank(s) == 0 {
		l.add(n, t.Name, "risk", "must be %s, %s or %s, not %s", RiskLow, RiskMedium, RiskHigh, displayName(s))
		return ""
	}
	return s
}

// effects reads `effects: [money, destructive]`.
func (l *linter) effects(n *yaml.Node, t *Tool) []string {
	if n.Kind != yaml.SequenceNode {
		l.add(n, t.Name, "effects", "must be a list of %s", strings.Join(Effects, ", "))
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, e := range n.Content {
		s, ok := l.str(e, t.Name, "effects")
		if !ok {
			continue
		}
		known := false
		for _, k := range Effects {
			known = known || k == s
		}
		switch {
		case !known:
			l.add(e, t.Name, "effects", "unknown effect %s (effects: %s)", displayName(s), strings.Join(Effects, ", "))
		case seen[s]:
			l.add(e, t.Name, "effects", "%s is listed twice", s)
		default:
			seen[s] = true
			out = append(out, s)
		}
	}
	if seen[EffectReadOnly] && len(out) > 1 {
		l.add(n, t.Name, "effects", "%s cannot be listed with other effects", EffectReadOnly)
		return nil
	}
	return out
}

// Confirm is what an operator must type before approving a call of the
// tool, as GitHub asks for a repository's name before deleting it.
type Confirm struct {
	// Target asks for the call's target, as the page shows it.
	Target bool
	// Word asks for this fixed word instead.
	Word string
}

// Expected returns what must be typed for a call with this shown target.
func (c *Confirm) Expected(shownTarget string) string {
	if c.Target {
		return shownTarget
	}
	return c.Word
}

// Describe names what must be typed, for the page: "the target" or
// "the word DELETE".
func (c *Confirm) Describe() string {
	if c.Target {
		return "the target"
	}
	return "the word " + c.Word
}

// summary reads `summary: [/amount_minor, /environment]`.
func (l *linter) summary(n *yaml.Node, t *Tool) []string {
	ptrs, nodes := l.pointers(n, t.Name, "summary")
	if len(ptrs) > MaxSummary {
		l.add(n, t.Name, "summary", "at most %d members, not %d: a card summarizes, the call page shows everything", MaxSummary, len(ptrs))
	}
	for i, p := range ptrs {
		if _, err := resolve(t.args, p); err != nil {
			l.add(nodes[i], t.Name, "summary", "%s: %v", p, err)
			continue
		}
		if t.IsInformational(p) {
			l.add(nodes[i], t.Name, "summary", "%s is informational; a card summarizes only what the digest binds", p)
		}
	}
	return ptrs
}

// confirm reads `confirm: target` or `confirm: {word: DELETE}`.
func (l *linter) confirm(n *yaml.Node, t *Tool) *Confirm {
	if n.Kind == yaml.ScalarNode {
		s, ok := l.str(n, t.Name, "confirm")
		if !ok {
			return nil
		}
		if s != ConfirmTarget {
			l.add(n, t.Name, "confirm", "must be %s, %s or {word: WORD}, not %s", ConfirmTarget, ConfirmNone, displayName(s))
			return nil
		}
		return &Confirm{Target: true}
	}
	entries, ok := l.mapping(n, t.Name, "confirm")
	if !ok {
		return nil
	}
	c := &Confirm{}
	for _, e := range entries {
		if e.key != "word" {
			l.add(e.keyNode, t.Name, "confirm", "unknown field %s (fields: word)", displayName(e.key))
			continue
		}
		w, ok := l.str(e.val, t.Name, "confirm/word")
		if !ok {
			continue
		}
		if w == "" || len(w) > MaxConfirmWordBytes || strings.IndexFunc(w, func(r rune) bool {
			return unicode.IsSpace(r) || !unicode.IsPrint(r)
		}) >= 0 {
			l.add(e.val, t.Name, "confirm/word", "must be one word of at most %d bytes, without spaces or invisible characters", MaxConfirmWordBytes)
			continue
		}
		c.Word = w
	}
	if c.Word == "" {
		l.add(n, t.Name, "confirm", "word is required: the word an operator types to approve")
		return nil
	}
	return c
}

// denyReasons reads `deny_reasons: [text, ...]`.
func (l *linter) denyReasons(n *yaml.Node, t *Tool) []string {
	if n.Kind != yaml.SequenceNode {
		l.add(n, t.Name, "deny_reasons", "must be a list of reasons, such as [Duplicate request, Needs a change ticket]")
		return nil
	}
	if len(n.Content) > MaxDenyReasons {
		l.add(n, t.Name, "deny_reasons", "at most %d reasons, not %d", MaxDenyReasons, len(n.Content))
	}
	var out []string
	for i, c := range n.Content {
		path := "deny_reasons/" + strconv.Itoa(i)
		s, ok := l.str(c, t.Name, path)
		if !ok {
			continue
		}
		switch {
		case strings.TrimSpace(s) != s || s == "":
			l.add(c, t.Name, path, "must be non-empty text without leading or trailing spaces")
		case len(s) > MaxDenyReasonBytes || !utf8.ValidString(s):
			l.add(c, t.Name, path, "must be UTF-8 text of at most %d bytes", MaxDenyReasonBytes)
		case strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) >= 0:
			l.add(c, t.Name, path, "must not hold control or invisible characters")
		case contains(out, s):
			l.add(c, t.Name, path, "%q is listed twice", s)
		default:
			out = append(out, s)
		}
	}
	return out
}

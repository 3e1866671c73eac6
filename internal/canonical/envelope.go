package canonical

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DigestPrefix separates call digests from every other SHA-256 the system
// computes.
const DigestPrefix = "countersign/v1/call:"

// Limits on the proposal's top-level strings.
const (
	MaxToolBytes      = 128
	MaxTargetBytes    = 512
	MaxRationaleBytes = 4096
)

// validToolName reports whether s matches ^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$
// (DESIGN §4): dot-separated words, each a lower-case letter followed by
// lower-case letters, digits and underscores.
func validToolName(s string) bool {
	wordStart := true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z':
			wordStart = false
		case c >= '0' && c <= '9' || c == '_':
			if wordStart {
				return false
			}
		case c == '.':
			if wordStart {
				return false
			}
			wordStart = true
		default:
			return false
		}
	}
	return !wordStart
}

// MCP tool names (DESIGN §4): a tool mirrored from an MCP upstream is named
// {server}/{tool}, {server} matching ^[a-z][a-z0-9-]{0,62}$ and {tool}
// MCP's tool-name rule ^[A-Za-z0-9_.-]{1,128}$.
const (
	MaxServerNameBytes  = 63
	MaxMCPToolNameBytes = 128
)

// ValidServerName reports whether s may name an MCP upstream:
// ^[a-z][a-z0-9-]{0,62}$.
func ValidServerName(s string) bool {
	if len(s) == 0 || len(s) > MaxServerNameBytes || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// ValidMCPToolName reports whether s satisfies MCP's tool-name rule
// ^[A-Za-z0-9_.-]{1,128}$.
func ValidMCPToolName(s string) bool {
	if len(s) == 0 || len(s) > MaxMCPToolNameBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// SplitMirrored splits a tool name of the form {server}/{tool}. ok is false
// for every other name, dotted tool names included.
func SplitMirrored(name string) (server, tool string, ok bool) {
	i := strings.IndexByte(name, '/')
	if i < 0 {
		return "", "", false
	}
	server, tool = name[:i], name[i+1:]
	if !ValidServerName(server) || !ValidMCPToolName(tool) {
		return "", "", false
	}
	return server, tool, true
}

// ValidTool reports whether s is a tool name of either form of DESIGN §4.
func ValidTool(s string) bool {
	if _, _, ok := SplitMirrored(s); ok {
		return true
	}
	return len(s) <= MaxToolBytes && validToolName(s)
}

// Envelope is the closed object that a digest covers. Actor and Audience come
// from the authenticated token, never from the proposal.
type Envelope struct {
	Actor    string
	Audience string
	Tool     string
	Target   string
	Args     Object
}

// Canonical returns the RFC 8785 bytes of
// {"v":1,"actor","audience","tool","target","args"}.
func (e Envelope) Canonical() ([]byte, error) {
	enc := encoder{buf: make([]byte, 0, 512)}
	if err := e.encode(&enc); err != nil {
		return nil, err
	}
	return enc.buf, nil
}

// encode writes the envelope's canonical bytes.
func (e Envelope) encode(enc *encoder) error {
	// Members in UTF-16 order: actor, args, audience, target, tool, v.
	var err error
	enc.buf = append(enc.buf, `{"actor":`...)
	if enc.buf, err = AppendString(enc.buf, e.Actor); err != nil {
		return fmt.Errorf("canonical: actor: %w", err)
	}
	enc.buf = append(enc.buf, `,"args":`...)
	args := e.Args
	if args == nil {
		args = Object{}
	}
	if err := enc.value(args); err != nil {
		return fmt.Errorf("canonical: args: %w", err)
	}
	enc.buf = append(enc.buf, `,"audience":`...)
	if enc.buf, err = AppendString(enc.buf, e.Audience); err != nil {
		return fmt.Errorf("canonical: audience: %w", err)
	}
	enc.buf = append(enc.buf, `,"target":`...)
	if enc.buf, err = AppendString(enc.buf, e.Target); err != nil {
		return fmt.Errorf("canonical: target: %w", err)
	}
	enc.buf = append(enc.buf, `,"tool":`...)
	if enc.buf, err = AppendString(enc.buf, e.Tool); err != nil {
		return fmt.Errorf("canonical: tool: %w", err)
	}
	enc.buf = append(enc.buf, `,"v":1}`...)
	return nil
}

// Digest returns the lowercase hex SHA-256 of DigestPrefix followed by the
// envelope's canonical bytes.
func (e Envelope) Digest() (string, error) {
	h := sha256.New()
	enc := encoder{buf: make([]byte, 0, 2*flushAt), sink: h}
	enc.buf = append(enc.buf, DigestPrefix...)
	if err := e.encode(&enc); err != nil {
		return "", err
	}
	h.Write(enc.buf)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])), nil
}

// DigestOf hashes canonical envelope bytes with the call domain prefix.
func DigestOf(canonicalEnvelope []byte) string {
	h := sha256.New()
	h.Write([]byte(DigestPrefix))
	h.Write(canonicalEnvelope)
	return hex.EncodeToString(h.Sum(nil))
}

// IsDigest reports whether s looks like a digest: 64 lowercase hex digits.
func IsDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Proposal is what an agent sends: an untrusted request to run Tool on
// Target with Args. Rationale is the agent's own words; it is shown to the
// operator but never hashed.
type Proposal struct {
	Tool      string
	Target    string
	Args      Object
	Rationale string
}

// Envelope binds the proposal to the trusted context of the token that sent
// it.
func (p Proposal) Envelope(actor, audience string) Envelope {
	return Envelope{Actor: actor, Audience: audience, Tool: p.Tool, Target: p.Target, Args: p.Args}
}

// ParseProposal strictly parses a proposal body and checks its top-level
// shape. The error, when not nil, is Problems listing everything found.
func ParseProposal(data []byte) (Proposal, error) {
	v, err := Parse(data)
	if err != nil {
		return Proposal{}, Problems{*err.(*Problem)}
	}
	p, problems := ProposalFrom(v, "", true)
	if len(problems) > 0 {
		return Proposal{}, problems
	}
	return p, nil
}

// ProposalFrom checks a parsed value as a proposal found at the JSON Pointer
// base. With allowRationale false, a rationale member is unknown (the call
// presented at redemption has only tool, target and args).
func ProposalFrom(v any, base string, allowRationale bool) (Proposal, Problems) {
	var p Proposal
	var problems Problems
	add := func(code, path, format string, args ...any) {
		problems = append(problems, Problem{Code: code, Path: path, Message: fmt.Sprintf(format, args...), Offset: -1})
	}
	o, ok := v.(Object)
	if !ok {
		add(CodeWrongType, base, "the proposal must be a JSON object with tool, target and args")
		return p, problems
	}
	for _, m := range o {
		switch m.Name {
		case "tool", "target", "args":
		case "rationale":
			if allowRationale {
				break
			}
			fallthrough
		default:
			add(CodeUnknownField, Join(base, m.Name), "%s is not a member of a proposal (allowed: %s)",
				quoteName(m.Name), allowedTop(allowRationale))
		}
	}
	if t, ok := o.Get("tool"); !ok {
		add(CodeMissingField, Join(base, "tool"), "tool is required")
	} else if s, ok := t.(string); !ok {
		add(CodeWrongType, Join(base, "tool"), "tool must be a string, not %s", TypeName(t))
	} else if !ValidTool(s) {
		add(CodeInvalidTool, Join(base, "tool"), "tool must be dotted lower-case words like payments.refund, at most %d bytes, or server/tool for a tool of an MCP server", MaxToolBytes)
	} else {
		p.Tool = s
	}
	if t, ok := o.Get("target"); !ok {
		add(CodeMissingField, Join(base, "target"), "target is required")
	} else if s, ok := t.(string); !ok {
		add(CodeWrongType, Join(base, "target"), "target must be a string, not %s", TypeName(t))
	} else if IsBlank(s) {
		add(CodeEmptyString, Join(base, "target"), "target must not be empty or only white space")
	} else if len(s) > MaxTargetBytes {
		add(CodeInvalidTarget, Join(base, "target"), "target is %d bytes; at most %d are allowed", len(s), MaxTargetBytes)
	} else if r, ok := firstControlOrFormat(s); ok {
		add(CodeInvalidTarget, Join(base, "target"), "target contains the invisible or control character U+%04X", r)
	} else {
		p.Target = s
	}
	if a, ok := o.Get("args"); !ok {
		add(CodeMissingField, Join(base, "args"), "args is required (use {} for a tool without parameters)")
	} else if obj, ok := a.(Object); !ok {
		add(CodeWrongType, Join(base, "args"), "args must be an object, not %s", TypeName(a))
	} else {
		p.Args = obj
	}
	if allowRationale {
		if r, ok := o.Get("rationale"); ok {
			if s, ok := r.(string); !ok {
				add(CodeWrongType, Join(base, "rationale"), "rationale must be a string, not %s", TypeName(r))
			} else if len(s) > MaxRationaleBytes {
				add(CodeTooLong, Join(base, "rationale"), "rationale is %d bytes; at most %d are allowed", len(s), MaxRationaleBytes)
			} else {
				p.Rationale = s
			}
		}
	}
	return p, problems
}

func allowedTop(rationale bool) string {
	if rationale {
		return "tool, target, args, rationale"
	}
	return "tool, target, args"
}

// quoteName shows a member name safely in a message: quoted, with control
// and invisible characters escaped.
func quoteName(s string) string {
	const max = 64
	if len(s) > max {
		s = s[:max]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		return fmt.Sprintf("%+q…", s)
	}
	return fmt.Sprintf("%+q", s)
}

// IsBlank reports whether s is empty or only white space.
func IsBlank(s string) bool {
	return strings.TrimFunc(s, unicode.IsSpace) == ""
}

func firstControlOrFormat(s string) (rune, bool) {
	for _, r := range s {
		if unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) {
			return r, true
		}
	}
	return 0, false
}

// TypeName names the JSON type of a parsed value for messages.
func TypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case int64, int:
		return "an integer"
	case Number:
		return "a number with a fraction"
	case string:
		return "a string"
	case []any:
		return "an array"
	case Object:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

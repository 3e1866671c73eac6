package canonical

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
)

// This file is a second, deliberately naive implementation of the digest,
// written from DESIGN §4 without sharing code with the package: values come
// from encoding/json, member names are sorted by converting them to UTF-16,
// strings are escaped rune by rune. Tests compare the package against it on
// inputs the strict parser accepts (encoding/json is more lenient, so it is
// not a reference for what to refuse).

// refDecode reads one JSON value with encoding/json, keeping numbers as text.
func refDecode(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// refEncode writes v as RFC 8785 canonical JSON.
func refEncode(b *strings.Builder, v any) error {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case json.Number:
		if strings.ContainsAny(string(v), ".eE") {
			return fmt.Errorf("reference: %s is not an integer", v)
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n > 1<<53-1 || n < -(1<<53-1) {
			return fmt.Errorf("reference: %s is out of range", v)
		}
		b.WriteString(strconv.FormatInt(n, 10))
	case string:
		refEncodeString(b, v)
	case []any:
		b.WriteByte('[')
		for i, item := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := refEncode(b, item); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		names := make([]string, 0, len(v))
		for name := range v {
			names = append(names, name)
		}
		slices.SortFunc(names, func(x, y string) int {
			return slices.Compare(utf16.Encode([]rune(x)), utf16.Encode([]rune(y)))
		})
		b.WriteByte('{')
		for i, name := range names {
			if i > 0 {
				b.WriteByte(',')
			}
			refEncodeString(b, name)
			b.WriteByte(':')
			if err := refEncode(b, v[name]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("reference: unexpected %T", v)
	}
	return nil
}

func refEncodeString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// refCanonicalJSON decodes data with encoding/json and re-encodes it.
func refCanonicalJSON(data []byte) (string, error) {
	v, err := refDecode(data)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := refEncode(&b, v); err != nil {
		return "", err
	}
	return b.String(), nil
}

// refDigest computes a proposal's digest the naive way: decode, build the
// envelope as a map, encode, prefix, hash.
func refDigest(body []byte, actor, audience string) (string, error) {
	v, err := refDecode(body)
	if err != nil {
		return "", err
	}
	p, ok := v.(map[string]any)
	if !ok {
		return "", fmt.Errorf("reference: body is %T", v)
	}
	env := map[string]any{"v": json.Number("1"), "actor": actor, "audience": audience,
		"tool": p["tool"], "target": p["target"], "args": p["args"]}
	var b strings.Builder
	if err := refEncode(&b, env); err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte("countersign/v1/call:" + b.String()))
	return hex.EncodeToString(sum[:]), nil
}

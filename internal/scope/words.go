package scope

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/tools"
)

// Words says the scope in English for the operator who gives it, e.g.
// "up to 10 payments.refund calls by agent:billing-bot for payments-host,
// target invoice:INV-2041, each at most USD 50.00, currency USD, reason
// duplicate, no note, until 14:30 UTC on 2026-12-05; the same call at most
// once". Every bound is said: nothing the scope allows is left unsaid.
// Money is shown with the tool's money display; strings that are not
// plain are quoted with invisible and non-ASCII characters escaped. Times
// are shown in loc (UTC when nil).
func Words(s *Scope, t *tools.Tool, loc *time.Location) string {
	if loc == nil {
		loc = time.UTC
	}
	var parts []string
	calls := "calls"
	if s.Uses == 1 {
		calls = "call"
	}
	parts = append(parts, fmt.Sprintf("up to %d %s %s by %s for %s", s.Uses, s.Tool, calls, text(s.Actor), text(s.Audience)))
	if s.Target.Prefix {
		parts = append(parts, fmt.Sprintf("any target starting with %s that matches %s", quoted(s.Target.Value), t.TargetPattern))
	} else {
		parts = append(parts, "target "+text(s.Target.Value))
	}
	var money *tools.Money
	currency := ""
	if t.Money != nil {
		if b, ok := s.Args[t.Money.Currency]; ok && b.Kind == Equals {
			currency, _ = b.Value.(string)
			money = t.Money
		}
	}
	ptrs := sortedPointers(s.Args)
	if money != nil { // the amount, then its currency, first
		rest := []string{money.Amount, money.Currency}
		for _, p := range ptrs {
			if p != money.Amount && p != money.Currency {
				rest = append(rest, p)
			}
		}
		ptrs = rest
	}
	for _, ptr := range ptrs {
		b, ok := s.Args[ptr]
		if !ok {
			continue
		}
		name := strings.TrimPrefix(ptr, "/")
		isAmount := money != nil && ptr == money.Amount
		switch b.Kind {
		case Max:
			if isAmount {
				parts = append(parts, "each at most "+tools.FormatMoney(b.Max, currency))
			} else {
				parts = append(parts, fmt.Sprintf("%s at most %d", name, b.Max))
			}
		case In:
			vals := make([]string, len(b.In))
			for i, x := range b.In {
				vals[i] = text(x)
			}
			if len(vals) == 1 {
				parts = append(parts, name+" "+vals[0])
			} else {
				parts = append(parts, name+" "+strings.Join(vals[:len(vals)-1], ", ")+" or "+vals[len(vals)-1])
			}
		case Absent:
			parts = append(parts, "no "+name)
		case Equals:
			if n, isInt := b.Value.(int64); isAmount && isInt {
				parts = append(parts, "amount "+tools.FormatMoney(n, currency))
			} else {
				parts = append(parts, name+" "+value(b.Value))
			}
		}
	}
	until := s.Until.In(loc)
	layout := "15:04 MST on 2006-01-02"
	if until.Second() != 0 {
		layout = "15:04:05 MST on 2006-01-02"
	}
	parts = append(parts, "until "+until.Format(layout))
	repeat := "the same call at most once"
	if !s.OncePerCall {
		repeat = "the same call may be approved again each time it is made"
	}
	return strings.Join(parts, ", ") + "; " + repeat
}

var plainText = regexp.MustCompile(`^[A-Za-z0-9_.:@/#+-]+$`)

// text shows a string as it is when it is plain, otherwise quoted with
// every non-ASCII and invisible character escaped.
func text(s string) string {
	if plainText.MatchString(s) {
		return s
	}
	return quoted(s)
}

func quoted(s string) string { return strconv.QuoteToASCII(s) }

func value(v any) string {
	switch v := v.(type) {
	case string:
		return text(v)
	case int64:
		return strconv.FormatInt(v, 10)
	}
	b, err := canonical.Encode(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return escapeUnprintable(string(b))
}

// escapeUnprintable escapes every non-ASCII and control character of
// canonical JSON as \uXXXX, keeping it JSON.
func escapeUnprintable(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 0x20 && r < 0x7f:
			b.WriteRune(r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, "\\u%04x\\u%04x", r1, r2)
		default:
			fmt.Fprintf(&b, "\\u%04x", r)
		}
	}
	return b.String()
}

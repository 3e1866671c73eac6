package console

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/internal/tools"
	"github.com/countersign/countersign/web/templates"
)

// The queue's triage: which pending calls a queue page shows (its filter),
// in which order (its sort), and the one-line summary of each card. The
// filter and the sort live in the page's URL and in its socket's URL, so
// that live updates show only what the filter lets through; the page's
// script keeps the order and the groups as cards come and go.

// Queue sorts.
const (
	sortDeadline = "deadline" // the soonest decision deadline first (default)
	sortOldest   = "oldest"   // the longest waiting first
	sortNewest   = "newest"   // the most recent first
	sortTool     = "tool"     // by tool name, then by deadline
	sortRisk     = "risk"     // the tool's declared risk, highest first, then by deadline
)

var queueSorts = []string{sortDeadline, sortOldest, sortNewest, sortTool, sortRisk}

// summaryCut is how many characters of a value a card shows before it cuts
// it; the call page shows every value whole.
const summaryCut = 60

// queueQuery is a queue page's filter and sort.
type queueQuery struct {
	Sort   string
	Tool   string // exact tool name
	Actor  string // case-insensitive part of the actor
	Target string // case-insensitive part of the target
	Warn   bool   // only calls with deceptive characters
	Risk   string // only calls of tools declaring this risk
	Effect string // only calls of tools declaring this effect
	List   bool   // the list view: one line per call (else cards)
	After  string // the page key: "" for the first page
	// Upto, on a queue page's socket only, is the key of the page's last
	// call when a page follows it ("" on the last page): what the page
	// holds is (After, Upto].
	Upto string
}

// queuePageSize is how many calls one page of the queue reads and shows,
// in either view.
const queuePageSize = 50

// pageKey reads the queue's page key, "MILLIS.ID"; the zero key (the
// first page) when it is absent or malformed.
func pageKey(s string) queue.PageKey {
	ms, id, ok := strings.Cut(s, ".")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || !strings.HasPrefix(id, "call_") {
		return queue.PageKey{}
	}
	return queue.PageKey{DecideBy: time.UnixMilli(n).UTC(), ID: id}
}

// pageKeyString is the key of the page after call.
func pageKeyString(call *queue.Call) string {
	return strconv.FormatInt(call.DecideBy.UnixMilli(), 10) + "." + call.ID
}

// parseQueueQuery reads a queue URL's query. Nothing in it is refused: an
// unknown sort is the default, and text is cut to maxFilterBytes.
func parseQueueQuery(q url.Values) queueQuery {
	get := func(name string) string {
		s := strings.TrimSpace(q.Get(name))
		if !utf8.ValidString(s) {
			return ""
		}
		if len(s) > maxFilterBytes {
			s = s[:maxFilterBytes]
			for len(s) > 0 && !utf8.ValidString(s) {
				s = s[:len(s)-1]
			}
		}
		return s
	}
	qq := queueQuery{Sort: get("sort"), Tool: get("tool"), Actor: get("actor"), Target: get("target"), Warn: get("warn") == "1"}
	if !slices.Contains(queueSorts, qq.Sort) {
		qq.Sort = sortDeadline
	}
	if r := get("risk"); tools.RiskRank(r) > 0 {
		qq.Risk = r
	}
	if e := get("effect"); slices.Contains(tools.Effects, e) {
		qq.Effect = e
	}
	qq.List = get("layout") == "list"
	if k := get("after"); pageKey(k).ID != "" {
		qq.After = k
	}
	if k := get("upto"); pageKey(k).ID != "" {
		qq.Upto = k
	}
	return qq
}

// values is the query as a URL query, defaults left out.
func (qq queueQuery) values() url.Values {
	v := url.Values{}
	if qq.Sort != sortDeadline {
		v.Set("sort", qq.Sort)
	}
	for k, s := range map[string]string{"tool": qq.Tool, "actor": qq.Actor, "target": qq.Target, "risk": qq.Risk, "effect": qq.Effect} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if qq.Warn {
		v.Set("warn", "1")
	}
	if qq.List {
		v.Set("layout", "list")
	}
	if qq.After != "" {
		v.Set("after", qq.After)
	}
	return v
}

// A queue page (cards or list) takes a new call where the order by
// deadline puts it when that is on the page: the first page takes the
// calls before its last one (all of them when it is the only page), the
// last page the calls after the one before it. A page in the middle takes
// none: the calls of the pages after it would move, so it says how many
// calls arrived instead.
func (qq queueQuery) takes(c *queue.Call) bool {
	key := queue.KeyOf(c)
	first, last := qq.After == "", qq.Upto == ""
	switch {
	case first && last:
		return true
	case first:
		return keyBefore(key, pageKey(qq.Upto))
	case last:
		return keyBefore(pageKey(qq.After), key)
	}
	return false
}

// keyBefore orders page keys as the pending index does: deadline (to the
// millisecond, as stored), then id.
func keyBefore(a, b queue.PageKey) bool {
	if am, bm := a.DecideBy.UnixMilli(), b.DecideBy.UnixMilli(); am != bm {
		return am < bm
	}
	return a.ID < b.ID
}

// filtered reports whether anything but the sort is set.
func (qq queueQuery) filtered() bool {
	return qq.Tool != "" || qq.Actor != "" || qq.Target != "" || qq.Warn || qq.Risk != "" || qq.Effect != ""
}

// matches reports whether the filter lets the call through; deceptive is
// whether the call carries a deception warning, reg the tools that say
// each tool's risk and effects (nil when none are loaded).
func (qq queueQuery) matches(c *queue.Call, deceptive bool, reg *tools.Registry) bool {
	if qq.Tool != "" && c.Tool != qq.Tool {
		return false
	}
	if qq.Risk != "" || qq.Effect != "" {
		risk, effects := riskOf(reg, c.Tool)
		if qq.Risk != "" && risk != qq.Risk || qq.Effect != "" && !slices.Contains(effects, qq.Effect) {
			return false
		}
	}
	if qq.Actor != "" && !containsFold(c.Actor, qq.Actor) {
		return false
	}
	if qq.Target != "" && !containsFold(c.Target, qq.Target) {
		return false
	}
	return !qq.Warn || deceptive
}

// riskOf is the risk and effects the tool declares.
func riskOf(reg *tools.Registry, tool string) (string, []string) {
	if reg == nil {
		return "", nil
	}
	t, ok := reg.Tool(tool)
	if !ok {
		return "", nil
	}
	return t.Risk, t.Effects
}

func containsFold(s, part string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(part))
}

// sortCards orders cards by the query's sort, then puts the cards of one
// group (same tool, target and actor) together where the first of them
// falls. The page's script does the same as cards come and go.
func sortCards(cards []templates.Card, sort string) {
	slices.SortStableFunc(cards, func(a, b templates.Card) int {
		switch sort {
		case sortOldest:
			return a.CreatedAt.Compare(b.CreatedAt)
		case sortNewest:
			return b.CreatedAt.Compare(a.CreatedAt)
		case sortTool:
			if c := strings.Compare(a.RawTool, b.RawTool); c != 0 {
				return c
			}
		case sortRisk:
			if c := tools.RiskRank(b.Risk) - tools.RiskRank(a.Risk); c != 0 {
				return c
			}
		}
		if c := a.DecideBy.Compare(b.DecideBy); c != 0 {
			return c
		}
		return a.CreatedAt.Compare(b.CreatedAt)
	})
	first := map[string]int{}
	for i, c := range cards {
		if _, ok := first[c.Group]; !ok {
			first[c.Group] = i
		}
	}
	slices.SortStableFunc(cards, func(a, b templates.Card) int { return first[a.Group] - first[b.Group] })
}

// groupKey names the group of calls with one tool, target and actor.
func groupKey(c *queue.Call) string {
	h := sha256.Sum256([]byte(c.Tool + "\x00" + c.Target + "\x00" + c.Actor))
	return hex.EncodeToString(h[:8])
}

// summary is the one-line summary of a call's key arguments, as the tool's
// summary list names them.
func summary(t *tools.Tool, args canonical.Object) []templates.SummaryItem {
	if t == nil {
		return nil
	}
	var out []templates.SummaryItem
	for _, ptr := range t.Summary {
		v, ok := canonical.Lookup(args, ptr)
		if !ok {
			continue
		}
		it := templates.SummaryItem{Key: strings.TrimPrefix(ptr, "/")}
		switch x := v.(type) {
		case string:
			it.Value, it.Length, it.Cut = cutText(reveal.Of(x), summaryCut)
			if x == "" {
				it.Value = templates.Plain("(empty)")
			}
		case int64:
			it.Value = templates.Plain(strconv.FormatInt(x, 10))
			it.Money = treeBuilder{tool: t, args: args}.money(ptr, x)
		case []any:
			it.Value = templates.Plain(strconv.Itoa(len(x)) + " items")
			if len(x) == 1 {
				it.Value = templates.Plain("1 item")
			}
		case canonical.Object:
			it.Value = templates.Plain(strconv.Itoa(len(x)) + " members")
		default:
			it.Value = templates.Plain(canonical.TypeName(v))
			if b, ok := v.(bool); ok {
				it.Value = templates.Plain(strconv.FormatBool(b))
			}
		}
		out = append(out, it)
	}
	return out
}

// cutText keeps the first max characters of t as shown (an escape counts
// as one and is never split) and reports the length of the whole text in
// characters as shown, and whether it was cut.
func cutText(t templates.Text, max int) (templates.Text, int, bool) {
	n := 0
	for _, s := range t.Segs {
		if s.Kind == templates.SegEscape {
			n++
		} else {
			n += utf8.RuneCountInString(s.S)
		}
	}
	if n <= max {
		return t, n, false
	}
	out := templates.Text{Warnings: t.Warnings}
	left := max
	for _, s := range t.Segs {
		if left <= 0 {
			break
		}
		switch s.Kind {
		case templates.SegEscape:
			out.Segs = append(out.Segs, s)
			left--
		case templates.SegBreak:
			out.Segs = append(out.Segs, s)
		default:
			r := []rune(s.S)
			if len(r) > left {
				s.S = string(r[:left])
			}
			out.Segs = append(out.Segs, s)
			left -= len(r)
		}
	}
	return out, n, true
}

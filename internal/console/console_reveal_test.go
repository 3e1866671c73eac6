package console

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/reveal"
)

// Every class of deceptive character, wherever it appears in a call, is
// shown as a visible escape and warned about, on the call page and on the
// queue card.
func TestDeceptiveCharactersRevealedOnPage(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	b.login("olivia", rolePassword)
	classes := []struct {
		name   string
		char   string
		escape string
		kind   string
	}{
		{"bidi override", "\u202E", "[U+202E]", reveal.KindBidi},
		{"bidi isolate", "\u2067", "[U+2067]", reveal.KindBidi},
		{"arabic letter mark", "\u061C", "[U+061C]", reveal.KindBidi},
		{"zero width space", "\u200B", "[U+200B]", reveal.KindInvisible},
		{"word joiner", "\u2060", "[U+2060]", reveal.KindInvisible},
		{"bom", "\uFEFF", "[U+FEFF]", reveal.KindInvisible},
		{"soft hyphen", "\u00AD", "[U+00AD]", reveal.KindInvisible},
		{"other format", "\u2062", "[U+2062]", reveal.KindInvisible},
		{"tag", "\U000E0041", "[U+E0041]", reveal.KindTag},
		{"nul", "\x00", "[U+0000]", reveal.KindControl},
		{"escape", "\x1b", "[U+001B]", reveal.KindControl},
		{"c1", "\u0085", "[U+0085]", reveal.KindControl},
	}
	for _, cl := range classes {
		t.Run(cl.name, func(t *testing.T) {
			s := "pay" + cl.char + "ment"
			args, _ := canonical.NewObject(
				canonical.Member{Name: "note", Value: s},
				canonical.Member{Name: "k" + cl.char, Value: "v"},
			)
			call := e.insertRaw("agent:"+s, "x.y", "file:"+s, args, "because "+s)
			p := b.get("/calls/" + call.ID)
			want := "pay" + cl.escape + "ment"
			for id, got := range map[string]string{
				"target":    p.find("call-target").Text(),
				"actor":     p.find("call-actor").Text(),
				"value":     p.doc.Find(`[data-pointer="/note"] > [data-testid="arg-value"]`).Text(),
				"rationale": p.doc.Find(".rationale .agent").Text(),
			} {
				if !strings.Contains(got, want) || strings.Contains(got, cl.char) {
					t.Errorf("%s shows %q; want %q with the character escaped", id, got, want)
				}
			}
			keyShown := false
			p.find("arg-key").Each(func(_ int, k *goquerySelection) {
				if k.Text() == "k"+cl.escape {
					keyShown = true
				}
			})
			if !keyShown {
				t.Errorf("the key k%s is not shown escaped", cl.escape)
			}
			if strings.Contains(p.doc.Find("main").Text(), cl.char) {
				t.Errorf("the raw character %U is still on the page", []rune(cl.char)[0])
			}
			warn := p.find("deception-warning")
			if warn.Length() != 1 {
				t.Fatal("no warning on the call")
			}
			var items []string
			warn.Find(`[data-testid="warning-item"]`).Each(func(_ int, s *goquerySelection) { items = append(items, s.Text()) })
			for _, where := range []string{"target", "actor", "args /note", "rationale", "(name)"} {
				found := false
				for _, it := range items {
					if strings.Contains(it, where) && strings.Contains(it, cl.kind) {
						found = true
					}
				}
				if !found {
					t.Errorf("no %q warning for %s in %q", cl.kind, where, items)
				}
			}
			q := b.get("/")
			card := q.doc.Find(`[data-call="` + call.ID + `"]`)
			if card.Find(`[data-testid="card-warning"]`).Length() != 1 {
				t.Error("the queue card carries no warning")
			}
			if got := card.Find(`[data-testid="card-target"]`).Text(); got != "file:"+want {
				t.Errorf("card target = %q, want %q", got, "file:"+want)
			}
		})
	}
}

func TestNewlinesShownVisibly(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	call := e.submit("agent:mailer", "mail-host",
		`{"tool":"email.send","target":"mailbox:ops@example.com","args":{"to":[{"address":"x@y.example"}],"subject":"s","body":"line one\nline two\tend\r"}}`)
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/calls/" + call.ID)
	v := p.doc.Find(`[data-pointer="/body"] > [data-testid="arg-value"]`)
	if got := v.Text(); got != `line one\nline two\tend\r` {
		t.Errorf("body = %q, want the newline, tab and carriage return shown as escapes", got)
	}
	if v.Find("br").Length() != 1 {
		t.Error("the escaped newline is not followed by a line break")
	}
	if p.find("deception-warning").Length() != 0 {
		t.Error("ordinary newlines and tabs raised a warning")
	}
}

func TestMixedScriptsWarned(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	call := e.submit("agent:mailer", "mail-host",
		`{"tool":"email.send","target":"mailbox:ops@example.com","args":{"to":[{"address":"x@y.example","name":"p\u0430ypal support"}],"subject":"Привет world","body":"b"}}`)
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/calls/" + call.ID)
	mixed := p.doc.Find(`[data-pointer="/to/0/name"] [data-testid="mixed-script"]`)
	if mixed.Text() != "p\u0430ypal" {
		t.Errorf("mixed-script word = %q, want the Latin+Cyrillic word highlighted", mixed.Text())
	}
	if title, _ := mixed.Attr("title"); !strings.Contains(title, "Latin") || !strings.Contains(title, "Cyrillic") {
		t.Errorf("mixed-script note = %q", title)
	}
	if p.doc.Find(`[data-pointer="/subject"] [data-testid="mixed-script"]`).Length() != 0 {
		t.Error("separate Cyrillic and Latin words were flagged")
	}
	if w := p.find("deception-warning").Text(); !strings.Contains(w, reveal.KindMixed) || !strings.Contains(w, "/to/0/name") {
		t.Errorf("warning = %q, want mixed scripts at /to/0/name", w)
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// adminButtonsJS describes every button on the page that is left as the
// browser draws it (its background and border are the user agent's), and
// the style of the danger and caution buttons.
const adminButtonsJS = `(() => {
	const probe = document.createElement("button");
	probe.style.all = "revert";
	document.body.appendChild(probe);
	const ua = getComputedStyle(probe);
	const plain = [ua.backgroundColor, ua.borderTopColor, ua.borderTopStyle].join(" ");
	probe.remove();
	const out = {plain: [], danger: [], caution: []};
	document.querySelectorAll("main button").forEach(b => {
		const s = getComputedStyle(b);
		const name = (b.dataset.testid || b.textContent.trim());
		if ([s.backgroundColor, s.borderTopColor, s.borderTopStyle].join(" ") === plain) out.plain.push(name);
		if (b.classList.contains("danger")) out.danger.push(name + " " + s.backgroundColor + " " + s.color);
		if (b.classList.contains("caution")) out.caution.push(name + " " + s.color + " " + s.borderTopColor);
	});
	return JSON.stringify(out);
})()`

// TestBrowserAdminSections: the admin page is in sections with a local
// navigation whose every link reaches its section, and no admin action
// button is left as the browser's grey default; the kill switch is a
// solid red button, and what takes something away (disable, end
// sessions, revoke) is drawn in red.
func TestBrowserAdminSections(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s := startServer(t, "")
	s.addUser("alice", "operator")
	admin := s.addUser("root", "admin")
	s.token("agent:billing-bot", "payments-host")
	if _, code := runConsole(t, "", "freeze", "--data", s.data, "--tool", "payments.refund", "--reason", "chargeback review", "--as", "root", "--allow-unknown"); code != 0 {
		t.Fatalf("freeze exited %d", code)
	}
	b := startBrowser(t, ctx)
	ad := b.window(t, "admin")
	ad.login(s.url, admin)
	for _, w := range layoutWidths {
		ad.do("set the window to "+w.name+" px", waitShort, chromedp.EmulateViewport(w.width, w.height))
		ad.navigate(s.url + "/admin")
		links := eval[[]string](ad, `Array.from(document.querySelectorAll('[data-testid="admin-nav"] a'), a => a.getAttribute("href"))`)
		want := []string{"#freezes", "#people", "#agents", "#tools", "#deliveries", "#evidence", "#keys"}
		if strings.Join(links, " ") != strings.Join(want, " ") {
			t.Errorf("admin sections %v, want %v", links, want)
		}
		for _, l := range links {
			if n := eval[int](ad, `document.querySelectorAll('section.admin-section`+l+` h2').length`); n != 1 {
				t.Errorf("the local link %s reaches no section with a heading", l)
			}
		}
		var got struct{ Plain, Danger, Caution []string }
		raw := eval[string](ad, adminButtonsJS)
		if err := jsonUnmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Plain) > 0 {
			t.Errorf("at %s px, buttons left as the browser's default: %v", w.name, got.Plain)
		}
		if len(got.Danger) != 1 || !strings.HasPrefix(got.Danger[0], "freeze rgb(179, 38, 30) rgb(255, 255, 255)") {
			t.Errorf("the kill switch: %v, want one solid red Freeze button", got.Danger)
		}
		for _, want := range []string{"disable", "end-sessions", "revoke"} {
			found := false
			for _, c := range got.Caution {
				found = found || strings.HasPrefix(c, want+" rgb(179, 38, 30) rgb(179, 38, 30)")
			}
			if !found {
				t.Errorf("%s is not drawn in red: %v", want, got.Caution)
			}
		}
		ad.screenshot("admin-" + w.name)
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

package console

import (
	"strings"
	"testing"
)

// A text with a bidirectional control is shown twice on the call page,
// in a labelled box among the warnings, away from the decision: as a
// reader would see it (reordered on the server, shown with a left-to-right
// override) and as it is, escapes and all. No raw control reaches the page.
func TestCallPageBidiPreview(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	mail := e.submit("agent:mailer", "mail-host", `{"tool":"email.send","target":"mailbox:billing@example.com","args":{"to":[{"address":"ops@example.com"}],"subject":"report\u202Efdp.exe","body":"hi"}}`)
	plain := e.submit("agent:mailer", "mail-host", `{"tool":"email.send","target":"mailbox:billing@example.com","args":{"to":[{"address":"ops@example.com","name":"Ops\u200bTeam"}],"subject":"report","body":"hi"}}`)
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/calls/" + mail.ID)
	if strings.ContainsAny(p.body, "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069") {
		t.Fatal("a raw bidirectional control reached the page")
	}
	previews := p.find("bidi-preview")
	if previews.Length() != 1 {
		t.Fatalf("%d previews, want 1 for the subject", previews.Length())
	}
	if label, _ := previews.Attr("aria-label"); label != "How args /subject reads on screen" {
		t.Errorf("the preview is labelled %q", label)
	}
	rendered := previews.Find(`[data-testid="bidi-rendered"]`)
	if got := rendered.Text(); got != "reportexe.pdf" {
		t.Errorf("a reader sees %q, want reportexe.pdf", got)
	}
	if goquery := rendered.Nodes[0]; goquery.Data != "bdo" || rendered.AttrOr("dir", "") != "ltr" {
		t.Errorf("the preview is a <%s dir=%q>, want <bdo dir=ltr>", goquery.Data, rendered.AttrOr("dir", ""))
	}
	if got := previews.Find(`[data-testid="bidi-escaped"]`).Text(); got != "report[U+202E]fdp.exe" {
		t.Errorf("it holds %q, want the escaped form", got)
	}
	if p.doc.Find(`.call-side [data-testid="bidi-preview"]`).Length() != 0 || p.doc.Find(`[data-testid="deception-warning"] [data-testid="bidi-preview"]`).Length() != 1 {
		t.Error("the preview is not with the warnings, away from the decision")
	}
	// A zero-width space hides nothing in the order: no preview.
	if n := b.get("/calls/" + plain.ID).find("bidi-preview").Length(); n != 0 {
		t.Errorf("%d previews for a text without a bidirectional control", n)
	}
}

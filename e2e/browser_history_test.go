package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/client"
)

// TestBrowserHistory is the auditor's view: the history page, one call's
// timeline, and the JSONL export of the audit trail, downloaded by the
// browser and verified offline by `console audit verify --file`.
func TestBrowserHistory(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	s := startServer(t, "")
	s.addUser("alice", "operator")
	audrey := s.addUser("audrey", "auditor")
	payments := client.New(s.url, s.token("agent:billing-bot", "payments-host"), client.WithPollWait(30*time.Second))

	// A call with a full life: submitted, approved (from the server's
	// command line), granted, redeemed, outcome reported.
	call := submit(t, ctx, payments, refund("INV-2001", 1299))
	if r, err := controlApprove(ctx, s.data, call.ID, "alice", call.Digest); err != nil || r.status != 200 {
		t.Fatalf("approve over the control socket: %v %s", err, r.raw)
	}
	approved, err := payments.Wait(ctx, call.ID)
	if err != nil || approved.Grant == "" {
		t.Fatalf("wait: %v, %+v", err, approved)
	}
	if red, err := payments.Redeem(ctx, approved.Grant, approved.Spec()); err != nil || !red.Accepted {
		t.Fatalf("redeem: %+v, %v", red, err)
	}
	if _, err := payments.ReportOutcome(ctx, call.ID, client.OutcomeSucceeded, "refund re-2001 issued"); err != nil {
		t.Fatal(err)
	}
	// A denied call beside it.
	denied := submit(t, ctx, payments, refund("INV-2002", 77))
	if _, code := runConsole(t, "", "deny", denied.ID, "--as", "alice", "--reason", "not ours", "--data", s.data); code != 0 {
		t.Fatalf("console deny exited %d", code)
	}

	b := startBrowser(t, ctx)
	aud := b.window(t, "audrey")
	aud.login(s.url, audrey)

	t.Run("the auditor sees a call's timeline from the history", func(t *testing.T) {
		aud := aud.with(t)
		aud.navigate(s.url + "/history")
		row := `[data-testid="history-row"][data-call="` + call.ID + `"]`
		aud.do("find the call in the history", waitShort,
			chromedp.WaitVisible(chromedp.CSS(row)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid="history-row"][data-call="`+denied.ID+`"]`)))
		aud.screenshot("history")
		aud.do("open the call's timeline", waitShort,
			chromedp.Click(chromedp.CSS(row+` a[href*="`+call.ID+`"]`), chromedp.NodeVisible),
			chromedp.WaitVisible(testID("timeline")))
		kinds := eval[[]string](aud, `Array.from(document.querySelectorAll('[data-testid="timeline-entry"]'), e => e.dataset.kind)`)
		if want := []string{"submitted", "approved", "granted", "redeemed", "outcome"}; !slices.Equal(kinds, want) {
			t.Errorf("timeline kinds %q, want %q", kinds, want)
		}
		timeline := aud.text(testID("timeline"))
		for _, want := range []string{"alice", "agent:billing-bot", "refund re-2001 issued"} {
			if !strings.Contains(timeline, want) {
				t.Errorf("timeline does not mention %q:\n%s", want, timeline)
			}
		}
		if n := len(eval[[]string](aud, `Array.from(document.querySelectorAll('[data-testid="approve"],[data-testid="deny"]'), e => e.id)`)); n != 0 {
			t.Errorf("the auditor's page has %d decide buttons, want none", n)
		}
	})

	t.Run("the JSONL export downloads and verifies offline", func(t *testing.T) {
		aud := aud.with(t)
		aud.navigate(s.url + "/history")
		file := aud.download(testID("export-jsonl"))
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(raw), call.ID) || !strings.Contains(string(raw), denied.ID) {
			t.Fatalf("the export (%d bytes) does not mention the calls %s and %s", len(raw), call.ID, denied.ID)
		}
		out, code := runConsole(t, "", "audit", "verify", "--file", file)
		if code != 0 {
			t.Fatalf("console audit verify --file %s exited %d: %s", file, code, out)
		}
		// The check can fail: one changed byte is found.
		bad := filepath.Join(t.TempDir(), "altered.jsonl")
		altered := strings.Replace(string(raw), "refund re-2001 issued", "refund re-2001 issuer", 1)
		if altered == string(raw) {
			t.Fatal("the export does not hold the outcome detail")
		}
		if err := os.WriteFile(bad, []byte(altered), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, code := runConsole(t, "", "audit", "verify", "--file", bad); code != 1 {
			t.Errorf("audit verify of an altered export exited %d, want 1", code)
		}
	})
}

// download clicks a link that downloads a file and returns the file's path
// once the browser has written it.
func (tb *tab) download(link chromedp.CSS) string {
	tb.t.Helper()
	dir := tb.t.TempDir()
	ctx, cancel := context.WithTimeout(tb.ctx, waitLong)
	defer cancel()
	_, err := chromedp.CallBrowser(ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
		Behavior:         cdpbrowser.SetDownloadBehaviorBehaviorAllowAndName,
		BrowserContextID: chromedp.FromContext(tb.ctx).BrowserContextID,
		DownloadPath:     dir,
		EventsEnabled:    new(true),
	})
	if err != nil {
		tb.t.Fatalf("%s: allow downloads: %v", tb.name, err)
	}
	progress := chromedp.BrowserEvents(ctx, cdpbrowser.DownloadProgress)
	tb.do("click "+string(link), waitShort, chromedp.Click(link, chromedp.NodeVisible))
	for ev, err := range progress {
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				tb.t.Fatalf("%s: the download did not finish within %v", tb.name, waitLong)
			}
			tb.t.Fatalf("%s: download: %v", tb.name, err)
		}
		switch ev.State {
		case cdpbrowser.DownloadProgressStateCompleted:
			return filepath.Join(dir, ev.GUID)
		case cdpbrowser.DownloadProgressStateCanceled:
			tb.t.Fatalf("%s: the browser cancelled the download", tb.name)
		}
	}
	tb.t.Fatalf("%s: no download finished", tb.name)
	return ""
}

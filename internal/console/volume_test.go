package console

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/queue"
)

// fillPending stores n pending searches in one transaction, their
// deadlines spread over ten hours, as a backlog an agent fleet leaves.
func fillPending(tb testing.TB, e *consoleEnv, n int) {
	tb.Helper()
	now := e.clock.Now()
	err := e.db.Store().Update(context.Background(), func(tx queue.Tx) error {
		for i := range n {
			args, err := canonical.NewObject(canonical.Member{Name: "limit", Value: int64(20)},
				canonical.Member{Name: "query", Value: fmt.Sprintf("checkout timeout %d", i)})
			if err != nil {
				return err
			}
			actor := fmt.Sprintf("agent:bot-%d", i%40)
			env := canonical.Envelope{Actor: actor, Audience: "search-host", Tool: "search.query", Target: "index:tickets", Args: args}
			b, err := env.Canonical()
			if err != nil {
				return err
			}
			c := &queue.Call{ID: queue.NewCallID(), Actor: actor, Audience: "search-host", Tool: "search.query", Target: "index:tickets",
				Args: args, Envelope: b, Digest: canonical.DigestOf(b), Status: queue.StatusPending, ApprovalsRequired: 1,
				GrantTTL: time.Minute, CreatedAt: now.Add(-time.Duration(n-i) * time.Second),
				DecideBy: now.Add(10*time.Minute + time.Duration(i*7919%n)*10*time.Hour/time.Duration(n))}
			if err := tx.InsertCall(c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// TestTenThousandPending loads the list view of a queue of 10,000 pending
// calls and of one of 100 in Chromium, alternating, each console on its own
// SQLite file and HTTP server: the rows read from the store (the page and
// its socket's first message) and the page's DOM are those of one page,
// as for the short queue, and the long queue's median first contentful
// paint is at most 1.5 times the short one's; so is a live insert's time
// to the page, give or take insertSlack.
func TestTenThousandPending(t *testing.T) {
	const chromium = "/usr/bin/chromium"
	if testing.Short() {
		t.Skip("browser test: skipped with -short")
	}
	if fi, err := os.Stat(chromium); err != nil || fi.IsDir() {
		msg := "the browser test needs Chromium at " + chromium + ": apt-get install -y chromium"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	type queueUnderTest struct {
		name  string
		e     *consoleEnv
		tab   context.Context // a browser context of its own: both consoles are on 127.0.0.1
		paint []float64
		rows  int64 // rows read by the last load
		dom   int   // elements of the last load
		shown int   // rows of the last load
	}
	var qs []*queueUnderTest
	for _, n := range []int{100, 10000} {
		e := newConsoleEnv(t)
		e.addUser("olivia", "operator", rolePassword)
		start := time.Now()
		fillPending(t, e, n)
		t.Logf("%d pending stored in %v", n, time.Since(start).Round(time.Millisecond))
		qs = append(qs, &queueUnderTest{name: fmt.Sprint(n), e: e})
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.NoFirstRun, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-background-networking", true),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() { bcancel(); acancel() })
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		t.Fatal(err)
	}
	for _, q := range qs {
		tab, tcancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
		t.Cleanup(tcancel)
		q.tab = tab
		if err := chromedp.Do(q.tab,
			chromedp.Navigate(q.e.url+"/login"),
			chromedp.SendKeys(`[data-testid="login-name"]`, "olivia"),
			chromedp.SendKeys(`[data-testid="login-password"]`, rolePassword),
			chromedp.Click(`[data-testid="login-submit"]`),
			chromedp.WaitVisible(`[data-testid="whoami"]`),
		); err != nil {
			t.Fatalf("log in to the %s queue: %v", q.name, err)
		}
	}
	load := func(q *queueUnderTest) {
		t.Helper()
		lctx, lcancel := context.WithTimeout(q.tab, 30*time.Second)
		defer lcancel()
		before := q.e.db.RowsRead()
		var paint float64
		var dom, shown int
		if err := chromedp.Do(lctx,
			chromedp.Navigate(q.e.url+"/?layout=list"),
			chromedp.WaitVisible(`#conn[data-state="live"]`),
			keep(chromedp.Poll[float64](`(() => { const p = performance.getEntriesByName("first-contentful-paint")[0]; return p ? p.startTime : 0; })()`,
				chromedp.WithPollingInterval(10*time.Millisecond)), &paint),
			keep(chromedp.Evaluate[int](`document.getElementsByTagName("*").length`), &dom),
			keep(chromedp.Evaluate[int](`document.querySelectorAll("#queue-list article[data-call]").length`), &shown),
		); err != nil {
			t.Fatalf("load the %s queue: %v", q.name, err)
		}
		q.rows, q.dom, q.shown = q.e.db.RowsRead()-before, dom, shown
		q.paint = append(q.paint, paint)
	}
	// One load each to warm the caches, then alternate, each queue first
	// in turn.
	for _, q := range qs {
		load(q)
		q.paint = nil
	}
	const rounds = 11
	for i := range rounds {
		if i%2 == 0 {
			load(qs[0])
			load(qs[1])
		} else {
			load(qs[1])
			load(qs[0])
		}
	}
	short, long := qs[0], qs[1]
	median := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	ps, pl := median(short.paint), median(long.paint)
	t.Logf("first contentful paint, median of %d: %.0f ms for 100 pending, %.0f ms for 10,000 (%v, %v)", rounds, ps, pl, short.paint, long.paint)
	t.Logf("rows read: %d and %d; elements: %d and %d; rows shown: %d and %d", short.rows, long.rows, short.dom, long.dom, short.shown, long.shown)
	if long.shown != listPageSize || short.shown != listPageSize {
		t.Errorf("rows shown: %d of 10,000 and %d of 100, want one page (%d) each", long.shown, short.shown, listPageSize)
	}
	// The same page of another queue: the same rows read and elements,
	// give or take the sessions' sweep and the counts' digits.
	if long.rows > short.rows+20 {
		t.Errorf("the 10,000 queue's page read %d rows, the 100 queue's %d: a read grows with the queue", long.rows, short.rows)
	}
	if long.dom > short.dom+20 {
		t.Errorf("the 10,000 queue's page has %d elements, the 100 queue's %d", long.dom, short.dom)
	}
	if pl > 1.5*ps {
		t.Errorf("first contentful paint %.0f ms for 10,000 pending, more than 1.5 × %.0f ms for 100", pl, ps)
	}

	// A live insert: a search, due within five minutes, goes first on
	// either queue's first page (the stored calls are due after ten).
	// Timed from the submission to the row in the page, alternating.
	var inserts [2][]float64
	insert := func(i int, q *queueUnderTest, n int) {
		t.Helper()
		lctx, lcancel := context.WithTimeout(q.tab, 30*time.Second)
		defer lcancel()
		start := time.Now()
		c := q.e.submit("agent:support-bot", "search-host", fmt.Sprintf(`{"tool":"search.query","target":"index:tickets","args":{"query":"live %d","limit":5}}`, n))
		var first bool
		if err := chromedp.Do(lctx, keep(chromedp.Poll[bool](`(() => { const r = document.querySelector("#queue-list article[data-call]"); return !!r && r.dataset.call === "`+c.ID+`"; })()`,
			chromedp.WithPollingInterval(2*time.Millisecond)), &first)); err != nil {
			t.Fatalf("the %s queue: the new call never came first: %v", q.name, err)
		}
		inserts[i] = append(inserts[i], float64(time.Since(start).Microseconds())/1000)
	}
	for i := range rounds {
		if i%2 == 0 {
			insert(0, short, i)
			insert(1, long, i)
		} else {
			insert(1, long, i)
			insert(0, short, i)
		}
	}
	is, il := median(inserts[0]), median(inserts[1])
	t.Logf("live insert, median of %d: %.1f ms for 100 pending, %.1f ms for 10,000 (%v, %v)", rounds, is, il, inserts[0], inserts[1])
	// Both are tens of milliseconds: a frame and a poll of slack, so that
	// a busy machine's jitter is not read as the queue's length.
	if il > 1.5*is+insertSlack {
		t.Errorf("a live insert took %.1f ms with 10,000 pending, more than 1.5 × %.1f ms with 100 (+%v)", il, is, insertSlack)
	}
}

// insertSlack, in milliseconds, is what TestTenThousandPending allows a
// live insert besides 1.5 times the short queue's: one frame and a poll.
const insertSlack = 20

// The cards view reads the newest maxQueueCards pending calls; with more
// waiting it says how many more, and links to the list, which pages
// through them all.
func TestCardsViewSaysWhatItLeavesOut(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("olivia", "operator", rolePassword)
	fillPending(t, e, maxQueueCards+7)
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/")
	if n := p.find("call-card").Length(); n != maxQueueCards {
		t.Errorf("%d cards, want %d", n, maxQueueCards)
	}
	if got := p.find("cards-hidden").Text(); !strings.Contains(got, "7 more wait") {
		t.Errorf("the cards view says %q, want 7 more", got)
	}
	if href, _ := p.find("cards-hidden-list").Attr("href"); !strings.Contains(href, "layout=list") {
		t.Errorf("its link %q", href)
	}
	if p := b.get("/?layout=list"); p.find("cards-hidden").Length() != 0 {
		t.Error("the list view says cards are left out")
	}
}

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
)

// forwardCounterTools mirrors the example upstream's add, whose counters
// the gateway forwards, and asks two people when a is above 100.
func forwardCounterTools(upstream string) string {
	return fmt.Sprintf(`mcp:
  demo:
    command: [%q]
    tools:
      add:
        counter: {edit: [/a, /b], forward: true}
        rules:
          - {id: big-a, when: 'args.a > 100', then: ask, approvals: 2}
`, upstream)
}

// TestMCPCounterWithTheTypeScriptSDK drives counter-proposals through the
// MCP gateway with the official TypeScript MCP SDK (e2e/mcp-ts/counter.mjs),
// the operator countering in the console's pages over HTTP: a narrowing
// edit of a forwarding tool runs in the held request with a statement of
// what changed; a non-narrowing one is told to the model and runs only
// after a person other than its editor approves it (the editor's second
// approval refused); an edit that lowers a rule's requirement still needs
// the original's two approvals.
func TestMCPCounterWithTheTypeScriptSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		needTool(t, "node is not installed")
	}
	if _, err := os.Stat("mcp-ts/node_modules/@modelcontextprotocol/sdk/package.json"); err != nil {
		needTool(t, "e2e/mcp-ts has no node_modules: run npm ci there")
	}
	upstream := buildMCPDemo(t)
	data := t.TempDir()
	file := filepath.Join(data, "tools.yaml")
	if err := os.WriteFile(file, []byte(forwardCounterTools(upstream)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startProcess(t, data, "serve", "--addr", "127.0.0.1:0", "--data", data, "--tools", file, "--log-level", "warn",
		"--hold", "20s", "--trust-first-definitions")
	alice := s.addUser("alice", "operator")
	s.addUser("bob", "operator")
	token := s.token("agent:desk", "demo")
	tokenFile := filepath.Join(data, "agent.token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitForTools(t, s, token)
	web := loginPages(t, s.url, alice)

	cmd := exec.Command(node, "counter.mjs", s.url+"/mcp/demo", tokenFile)
	cmd.Dir = "mcp-ts"
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		defer stdin.Close()
		sc := bufio.NewScanner(stdout)
		finished := false
		for sc.Scan() {
			var m struct {
				Need   string            `json:"need"`
				CallID string            `json:"call_id"`
				Edits  map[string]string `json:"edits"`
				OK     string            `json:"ok"`
				Done   bool              `json:"done"`
			}
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				done <- fmt.Errorf("the script printed %q", sc.Text())
				return
			}
			finished = finished || m.Done
			if m.OK != "" {
				t.Logf("step %s", m.OK)
			}
			var err error
			switch m.Need {
			case "":
				continue
			case "counter":
				err = web.counter(m.CallID, m.Edits)
			case "approve-as-editor":
				digest := callDigest(t, s, token, m.CallID)
				if out, code := runConsole(t, "", "approve", m.CallID, "--as", "alice", "--digest", digest, "--data", s.data); code == 0 {
					err = fmt.Errorf("the editor approved her own counter again: %s", out)
				}
			case "approve":
				digest := callDigest(t, s, token, m.CallID)
				if out, code := runConsole(t, "", "approve", m.CallID, "--as", "bob", "--digest", digest, "--data", s.data); code != 0 {
					err = fmt.Errorf("bob's approval exited %d: %s", code, out)
				}
			default:
				err = fmt.Errorf("the script needs %q", m.Need)
			}
			if err != nil {
				done <- err
				return
			}
			fmt.Fprintln(stdin, "ok")
		}
		if !finished {
			done <- fmt.Errorf("the script ended before it was done")
			return
		}
		done <- nil
	}()
	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		runErr = fmt.Errorf("the script did not finish within 3 minutes")
	}
	waitErr := cmd.Wait()
	if runErr != nil || waitErr != nil {
		t.Fatalf("%v / %v\nscript stderr:\n%s\nconsole:\n%s", runErr, waitErr, stderr.String(), s.logs.String())
	}
}

// operatorPages is an operator logged in to the console's pages over
// HTTP, as a browser without scripts would be; its methods return errors
// (they run beside the test's goroutine).
type operatorPages struct {
	base string
	c    *http.Client
}

func loginPages(t *testing.T, base string, l login) *operatorPages {
	t.Helper()
	return &operatorPages{base: base, c: &http.Client{Jar: webLogin(t, base, l.name), Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (w *operatorPages) get(path string) (*goquery.Document, int, error) {
	req, _ := http.NewRequest(http.MethodGet, w.base+path, nil)
	req.Header.Set("Accept", "text/html")
	res, err := w.c.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer res.Body.Close()
	doc, err := goquery.NewDocumentFromReader(res.Body)
	return doc, res.StatusCode, err
}

func (w *operatorPages) post(path string, form url.Values) (int, string, error) {
	req, _ := http.NewRequest(http.MethodPost, w.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "text/html")
	req.Header.Set("Origin", w.base)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	res, err := w.c.Do(req)
	if err != nil {
		return 0, "", err
	}
	res.Body.Close()
	return res.StatusCode, res.Header.Get("Location"), nil
}

// counter answers call id with edits (pointer → the text typed in the
// edit form): the review page, then its approve form.
func (w *operatorPages) counter(id string, edits map[string]string) error {
	q := url.Values{}
	for k, v := range edits {
		q.Set("set:"+k, v)
	}
	doc, status, err := w.get("/calls/" + id + "/counter?" + q.Encode())
	if err != nil {
		return err
	}
	form := doc.Find(`[data-testid="counter-approve-form"]`)
	if status != http.StatusOK || form.Length() != 1 {
		return fmt.Errorf("the review of the edit of %s: %d %q %q", id, status,
			doc.Find(`[data-testid="counter-error"]`).Text(), doc.Find(`[data-testid="counter-problems"]`).Text())
	}
	f := url.Values{}
	form.Find("input[type=hidden]").Each(func(_ int, s *goquery.Selection) { f.Add(s.AttrOr("name", ""), s.AttrOr("value", "")) })
	status, loc, err := w.post("/calls/"+id+"/counter", f)
	if err != nil {
		return err
	}
	if status != http.StatusSeeOther || !strings.HasSuffix(loc, "?notice=edited") {
		return fmt.Errorf("approving the edit of %s: %d %q", id, status, loc)
	}
	return nil
}

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testkit"
)

// TestMCPWithTheTypeScriptSDK drives the real console's MCP gateway with the
// official TypeScript MCP SDK (e2e/mcp-ts, pinned with its lock file), at
// the newest protocol version it speaks, over Streamable HTTP and through
// `console mcp-bridge` over stdio, in front of the example upstream run as
// its own process. The script asks this test for each operator decision.
func TestMCPWithTheTypeScriptSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		needTool(t, "node is not installed")
	}
	if _, err := os.Stat("mcp-ts/node_modules/@modelcontextprotocol/sdk/package.json"); err != nil {
		needTool(t, "e2e/mcp-ts has no node_modules: run npm ci there")
	}
	upstream := buildMCPDemo(t)
	for _, mode := range []string{"http", "stdio"} {
		t.Run(mode, func(t *testing.T) {
			data := t.TempDir()
			tools := filepath.Join(data, "tools.yaml")
			base, err := os.ReadFile(toolsFile(t))
			if err != nil {
				t.Fatal(err)
			}
			section := fmt.Sprintf("\nmcp:\n  demo:\n    command: [%q]\n    tools:\n      create_order: {target: /customer/id}\n", upstream)
			if err := os.WriteFile(tools, append(base, section...), 0o600); err != nil {
				t.Fatal(err)
			}
			s := startProcess(t, data, "serve", "--addr", "127.0.0.1:0", "--data", data, "--tools", tools, "--log-level", "warn",
				"--hold", "2s", "--trust-first-definitions")
			s.addUser("alice", "operator")
			token := s.token("agent:desk", "demo")
			tokenFile := filepath.Join(data, "agent.token")
			if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			waitForTools(t, s, token)
			args := []string{"run.mjs", mode, s.url + "/mcp/demo", tokenFile}
			if mode == "stdio" {
				args = append(args, consoleBin)
			}
			runTSScript(t, s, node, token, args)
		})
	}
}

// needTool skips a bare go test without node or the SDK, and fails where
// every test must run (testkit.Need; make test runs npm ci in e2e/mcp-ts).
func needTool(t *testing.T, msg string) {
	t.Helper()
	testkit.Need(t, msg)
}

// buildMCPDemo builds the example upstream.
func buildMCPDemo(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcp-demo")
	out, err := exec.Command("go", "build", "-o", bin, "../examples/mcpdemo/cmd/mcp-demo").CombinedOutput()
	if err != nil {
		t.Fatalf("build the example upstream: %v\n%s", err, out)
	}
	return bin
}

// waitForTools waits until the console has connected to the upstream and
// pinned its tools: tools/list over the gateway names add.
func waitForTools(t *testing.T, s *server, token string) {
	t.Helper()
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}`
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		resp, body := mcpPost(t, s.url+"/mcp/demo", token, "", init)
		sid := resp.Header.Get("Mcp-Session-Id")
		if resp.StatusCode != 200 || sid == "" {
			t.Fatalf("initialize: %d %s", resp.StatusCode, body)
		}
		if _, body := mcpPost(t, s.url+"/mcp/demo", token, sid, list); strings.Contains(body, `"name":"add"`) {
			return
		}
	}
	t.Fatalf("the upstream's tools never appeared at /mcp/demo:\n%s", s.logs.String())
}

func mcpPost(t *testing.T, url, token, session, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// runTSScript runs the script and answers its requests for decisions with
// console approve and console deny, as operator alice.
func runTSScript(t *testing.T, s *server, node, token string, args []string) {
	t.Helper()
	cmd := exec.Command(node, args...)
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
				Need   string `json:"need"`
				CallID string `json:"call_id"`
				Digest string `json:"digest"`
				Reason string `json:"reason"`
				OK     string `json:"ok"`
				Done   bool   `json:"done"`
			}
			line := sc.Text()
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				done <- fmt.Errorf("the script printed %q", line)
				return
			}
			if m.Done {
				finished = true
			}
			if m.OK != "" {
				t.Logf("step %s", m.OK)
			}
			if m.Need == "" {
				continue
			}
			if m.Digest == "" {
				m.Digest = callDigest(t, s, token, m.CallID)
			}
			var code int
			if m.Need == "approve" {
				_, code = runConsole(t, "", "approve", m.CallID, "--as", "alice", "--digest", m.Digest, "--data", s.data)
			} else {
				_, code = runConsole(t, "", "deny", m.CallID, "--as", "alice", "--reason", m.Reason, "--data", s.data)
			}
			if code != 0 {
				done <- fmt.Errorf("console %s %s exited %d", m.Need, m.CallID, code)
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

// callDigest reads a call's digest through the agent API.
func callDigest(t *testing.T, s *server, token, id string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.url+"/api/v1/calls/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c struct{ Digest string }
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || c.Digest == "" {
		t.Fatalf("GET /api/v1/calls/%s: %d %v", id, resp.StatusCode, err)
	}
	return c.Digest
}

package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestLongPollCapPerToken: one token holds at most MaxWaitsPerToken open
// long-polls; one more is answered 429 too_many_waits with Retry-After and
// counted in the metrics, while another token, a plain read and a wait
// after one has returned are served.
func TestLongPollCapPerToken(t *testing.T) {
	const max = 3
	st := startAPIStackIn(t, t.TempDir(), func(c *Config) { c.MaxWaitsPerToken = max })
	agent := st.token("agent:billing-bot", "payments-host")
	other := st.token("agent:billing-bot", "payments-host")
	r := st.submit(agent, refundBody, http.StatusCreated)
	id := r.str("id")
	done := make(chan apiResponse, max)
	for range max {
		go func() { done <- st.do(http.MethodGet, "/api/v1/calls/"+id+"?wait=30s", agent, nil) }()
	}
	waitForWaiters(t, st, max)

	req, _ := http.NewRequest(http.MethodGet, st.url+"/api/v1/calls/"+id+"?wait=30s", nil)
	req.Header.Set("Authorization", "Bearer "+agent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), `"too_many_waits"`) || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("wait %d of one token = %d %s (Retry-After %q), want 429 too_many_waits with Retry-After", max+1, resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	if got := st.do(http.MethodGet, "/api/v1/calls/"+id, agent, nil); got.Status != http.StatusOK {
		t.Errorf("a read without wait = %d, want 200", got.Status)
	}
	// Another token of the same agent waits on a call of its own.
	theirs := st.submit(other, refundBody, http.StatusCreated).str("id")
	if got := st.do(http.MethodGet, "/api/v1/calls/"+theirs+"?wait=10ms", other, nil); got.Status != http.StatusOK {
		t.Errorf("another token's wait = %d, want 200", got.Status)
	}
	m := st.do(http.MethodGet, "/metrics", "", nil)
	for _, want := range []string{"countersign_waits_refused_total 1", "countersign_open_waiters_per_token_max 3"} {
		if !strings.Contains(string(m.Raw), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	mustApprove(t, st, "alice", id, r.str("digest"))
	for range max {
		if w := <-done; w.Status != http.StatusOK {
			t.Errorf("an open wait = %d, want 200", w.Status)
		}
	}
	if got := st.do(http.MethodGet, "/api/v1/calls/"+id+"?wait=10ms", agent, nil); got.Status != http.StatusOK {
		t.Errorf("a wait after the others returned = %d, want 200", got.Status)
	}
}

package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/countersign/countersign/examples/mcpdemo"
)

// TestResultFromRawLossless: the result the gateway answers with keeps the
// upstream's structuredContent digit for digit and its content items.
func TestResultFromRawLossless(t *testing.T) {
	u := NewUpstream("demo", InMemory(mcpdemo.NewServer(mcpdemo.Options{})), UpstreamOptions{Logger: quietLogger()})
	startUpstream(t, u)
	raw, err := u.Call(context.Background(), "big_result", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := ResultFromRaw(raw.Raw)
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		StructuredContent json.RawMessage `json:"structuredContent"`
		Content           json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if string(got.StructuredContent) != mcpdemo.BigResult {
		t.Errorf("structuredContent %s, want %s", got.StructuredContent, mcpdemo.BigResult)
	}
	var want struct {
		Content json.RawMessage `json:"content"`
	}
	json.Unmarshal(raw.Raw, &want)
	if compact(t, got.Content) != compact(t, want.Content) {
		t.Errorf("content %s, want %s", got.Content, want.Content)
	}

	meta := []byte(`{"content":[{"type":"text","text":"x","annotations":{"priority":0.5}}],"_meta":{"trace":12345678901234567890},"isError":true}`)
	res, err = ResultFromRaw(meta)
	if err != nil {
		t.Fatal(err)
	}
	out, _ = json.Marshal(res)
	for _, want := range []string{`"trace":12345678901234567890`, `"isError":true`, `"priority":0.5`} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("%s lacks %s", out, want)
		}
	}
	if _, err := ResultFromRaw([]byte(`{"content":[{"type":"hologram"}]}`)); err == nil {
		t.Errorf("an unreadable content item was passed on")
	}
}

package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ResultFromRaw turns an upstream's raw tools/call result into the result
// the gateway answers its client with, without loss: structuredContent
// stays the upstream's raw JSON (json.RawMessage, never decoded into any,
// so integers beyond 2^53 keep every digit), _meta keeps its numbers as
// written (json.Number), and content items are read by the SDK's own
// content types, which carry every field the MCP schema defines for them.
// A content item the SDK cannot read is an error: the caller reports the
// outcome as unknown rather than pass on something it could not check.
func ResultFromRaw(raw json.RawMessage) (*sdk.CallToolResult, error) {
	res := &sdk.CallToolResult{}
	if err := res.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("mcp: read the upstream's result: %w", err)
	}
	var lossless struct {
		StructuredContent json.RawMessage `json:"structuredContent"`
		Meta              json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(raw, &lossless); err != nil {
		return nil, fmt.Errorf("mcp: read the upstream's result: %w", err)
	}
	res.StructuredContent = nil
	if len(lossless.StructuredContent) > 0 && !bytes.Equal(bytes.TrimSpace(lossless.StructuredContent), []byte("null")) {
		res.StructuredContent = lossless.StructuredContent
	}
	res.Meta = nil
	if len(lossless.Meta) > 0 && !bytes.Equal(bytes.TrimSpace(lossless.Meta), []byte("null")) {
		d := json.NewDecoder(bytes.NewReader(lossless.Meta))
		d.UseNumber()
		var meta map[string]any
		if err := d.Decode(&meta); err != nil {
			return nil, fmt.Errorf("mcp: read the upstream's _meta: %w", err)
		}
		res.Meta = meta
	}
	if res.Content == nil {
		res.Content = []sdk.Content{} // "content" is required on the wire
	}
	return res, nil
}

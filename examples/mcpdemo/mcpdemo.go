// Package mcpdemo is an example MCP server (an "upstream") for trying and
// testing Countersign's MCP gateway. Its tools cover what the gateway must
// carry exactly: integers, numbers with fractions, nested objects, a result
// whose structuredContent holds integers beyond 2^53, and an error result.
// The echo tool answers with the exact bytes of the arguments it received,
// so a test can check what reached the upstream.
//
// cmd/mcp-demo serves it over stdio or Streamable HTTP; `console demo`
// serves it in-process.
package mcpdemo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Options vary the server, so that tests can change a tool's definition.
type Options struct {
	// DescriptionSuffix is appended to the add tool's description.
	DescriptionSuffix string
	// Calls, when set, counts every tools/call the server runs.
	Calls *atomic.Int64
}

// Schemas of the tools, as a server written in any language would send
// them: raw JSON Schema.
const (
	addSchema = `{"type":"object","properties":{"a":{"type":"integer","minimum":0,"description":"First addend"},` +
		`"b":{"type":"integer","description":"Second addend"}},"required":["a","b"],"additionalProperties":false}`
	scaleSchema = `{"type":"object","properties":{"value":{"type":"number"},"factor":{"type":"number","exclusiveMinimum":0}},` +
		`"required":["value","factor"]}`
	orderSchema = `{"type":"object","properties":{` +
		`"customer":{"type":"object","properties":{"id":{"type":"string","minLength":1},"email":{"type":"string","format":"email"}},"required":["id"],"additionalProperties":false},` +
		`"lines":{"type":"array","minItems":1,"maxItems":20,"items":{"$ref":"#/$defs/line"}},` +
		`"note":{"type":["string","null"],"maxLength":200},` +
		`"ship_by":{"type":"string","format":"date-time"}},` +
		`"required":["customer","lines"],"additionalProperties":false,` +
		`"$defs":{"line":{"type":"object","properties":{"sku":{"type":"string","pattern":"^[A-Z0-9-]{3,20}$"},` +
		`"qty":{"type":"integer","minimum":1,"maximum":1000},"price":{"type":"number","minimum":0}},` +
		`"required":["sku","qty","price"],"additionalProperties":false}}}`
	echoSchema = `{"type":"object","properties":{"n":{"type":"integer"},"x":{"type":"number"},"s":{"type":"string"},` +
		`"tags":{"type":"array","items":{"type":"string"}},"inner":{"type":"object","properties":{"k":{"type":"integer"}},"additionalProperties":false}},` +
		`"additionalProperties":false}`
	emptySchema = `{"type":"object","properties":{},"additionalProperties":false}`
	// freeFormSchema is a map of anything: the gateway quarantines it.
	freeFormSchema = `{"type":"object","additionalProperties":true}`
)

// BigResult is the structuredContent of big_result: integers no float64
// holds, which must reach the agent digit for digit.
const BigResult = `{"id":9007199254740993,"balance_minor":123456789012345678901234567890,"nested":{"max_u64":18446744073709551615}}`

// NewServer returns the example server.
func NewServer(opt Options) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "countersign-mcp-demo", Version: "1.0.0"}, nil)
	add := func(name, desc, schema string, ann *mcp.ToolAnnotations, h mcp.ToolHandler) {
		s.AddTool(&mcp.Tool{Name: name, Description: desc, InputSchema: json.RawMessage(schema), Annotations: ann},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				if opt.Calls != nil {
					opt.Calls.Add(1)
				}
				return h(ctx, req)
			})
	}
	yes, no := true, false
	add("add", "Adds two integers."+opt.DescriptionSuffix, addSchema, &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}, addTool)
	add("scale", "Multiplies a number by a factor.", scaleSchema, &mcp.ToolAnnotations{ReadOnlyHint: true}, scaleTool)
	add("create_order", "Creates an order for a customer.", orderSchema, &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes}, orderTool)
	add("echo", "Answers with the exact bytes of the arguments it received.", echoSchema, nil, echoTool)
	add("big_result", "Returns integers larger than 2^53 in structuredContent.", emptySchema, &mcp.ToolAnnotations{ReadOnlyHint: true}, bigTool)
	add("fail", "Always fails, as a tool error.", emptySchema, nil, failTool)
	add("anything", "Takes any arguments at all.", freeFormSchema, nil, echoTool)
	return s
}

// decode reads arguments keeping numbers exact.
func decode(raw json.RawMessage, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	d.DisallowUnknownFields()
	return d.Decode(v)
}

func text(format string, args ...any) []mcp.Content {
	return []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}
}

func toolError(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: text(format, args...)}
}

func addTool(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct{ A, B json.Number }
	if err := decode(req.Params.Arguments, &in); err != nil {
		return toolError("bad arguments: %v", err), nil
	}
	a, okA := new(big.Int).SetString(in.A.String(), 10)
	b, okB := new(big.Int).SetString(in.B.String(), 10)
	if !okA || !okB {
		return toolError("a and b must be integers"), nil
	}
	sum := new(big.Int).Add(a, b)
	return &mcp.CallToolResult{Content: text("%s", sum), StructuredContent: json.RawMessage(`{"sum":` + sum.String() + `}`)}, nil
}

func scaleTool(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct{ Value, Factor float64 }
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
		return toolError("bad arguments: %v", err), nil
	}
	p := in.Value * in.Factor
	return &mcp.CallToolResult{Content: text("%v", p), StructuredContent: map[string]float64{"product": p}}, nil
}

func orderTool(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		Customer struct{ ID, Email string }
		Lines    []struct {
			SKU   string
			Qty   json.Number
			Price json.Number
		}
		Note   *string
		ShipBy string `json:"ship_by"`
	}
	if err := decode(req.Params.Arguments, &in); err != nil {
		return toolError("bad arguments: %v", err), nil
	}
	skus := make([]string, len(in.Lines))
	for i, l := range in.Lines {
		skus[i] = l.SKU
	}
	return &mcp.CallToolResult{Content: text("order created for %s: %s", in.Customer.ID, strings.Join(skus, ", ")),
		StructuredContent: map[string]any{"order_id": "ord-1042", "lines": len(in.Lines)}}, nil
}

func echoTool(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	raw := string(req.Params.Arguments)
	if raw == "" {
		raw = "{}"
	}
	return &mcp.CallToolResult{Content: text("%s", raw), StructuredContent: json.RawMessage(raw)}, nil
}

func bigTool(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{Content: text("%s", BigResult), StructuredContent: json.RawMessage(BigResult)}, nil
}

func failTool(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return toolError("the upstream refused: the ledger is closed for the night"), nil
}

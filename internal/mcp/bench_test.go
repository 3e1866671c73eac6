package mcp_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// The added latency of the gateway for a call that is approved at once,
// against calling the upstream directly, in the same run: all go through
// the SDK's in-memory transports to the example upstream's add tool.
// Approved by a rule inside the submission's transaction, and for
// comparison by an operator in this process as soon as the submission
// commits (one write transaction more). The gateway's own work (strict
// parse, submit, rules, wait, redeem with re-validation, forward, outcome)
// and SQLite's commits are all in it.
//
//	go test -run '^$' -bench 'Upstream|Gateway' -benchtime 2000x ./internal/mcp/

func BenchmarkUpstreamDirect(b *testing.B) {
	e := newEnv(b, envOptions{trust: true})
	ct, st := sdk.NewInMemoryTransports()
	ctx := context.Background()
	if _, err := e.upstrm.Connect(ctx, st, nil); err != nil {
		b.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "direct", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	b.ResetTimer()
	for i := range b.N {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "add", Arguments: json.RawMessage(`{"a":` + strconv.Itoa(i) + `,"b":1}`)})
		if err != nil || res.IsError {
			b.Fatalf("add: %v %+v", err, res)
		}
	}
}

func BenchmarkGatewayApprovedByRule(b *testing.B) {
	e := newEnv(b, envOptions{trust: true, tools: rulesTools})
	ctx := context.Background()
	cs := e.client(nil, "2025-11-25")
	b.ResetTimer()
	for i := range b.N {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "add", Arguments: json.RawMessage(`{"a":` + strconv.Itoa(i%50) + `,"b":1}`)})
		if err != nil || res.IsError {
			b.Fatalf("add: %v %+v", err, res)
		}
	}
}

func BenchmarkGatewayApprovedByAPerson(b *testing.B) {
	e := newEnv(b, envOptions{trust: true})
	ctx := context.Background()
	e.q.Subscribe(func(ev queue.Event) {
		if ev.Kind == audit.KindSubmitted {
			go func() {
				if _, err := e.q.Approve(ctx, "alice", audit.ChannelWeb, ev.Call.ID, ev.Call.Digest); err != nil {
					b.Errorf("Approve: %v", err)
				}
			}()
		}
	})
	cs := e.client(nil, "2025-11-25")
	b.ResetTimer()
	for i := range b.N {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "add", Arguments: json.RawMessage(`{"a":` + strconv.Itoa(i) + `,"b":1}`)})
		if err != nil || res.IsError {
			b.Fatalf("add: %v %+v", err, res)
		}
	}
}

package client

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/countersign/countersign/internal/wire"
)

// TestErrorReadsWireError: Error declares wire.Error's members itself (see
// its comment); it reads every member the server writes and writes them
// back the same.
func TestErrorReadsWireError(t *testing.T) {
	full := wire.Error{Code: "previously_denied", Message: "m", Problems: []wire.Problem{{Code: "unknown_field", Path: "/args/x", Message: "p"}},
		Reason: "r", CallID: "call_x", Hint: "h"}
	b, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var e Error
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("decode %s into client.Error: %v", b, err)
	}
	back, err := json.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, b) {
		t.Errorf("client.Error writes %s, wire.Error %s", back, b)
	}
}

package store

import (
	"reflect"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/tools"
)

// TestColumns: what one engine writes into its JSON columns the other
// reads back the same, none reads as nil, and the approvals either
// engine's history query aggregates decode alike.
func TestColumns(t *testing.T) {
	for _, names := range [][]string{nil, {}, {"olga", "team:payments", "oidc:idp.example.com/00u1"}} {
		text, err := EncodeNames(names)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeNames(text)
		want := names
		if len(want) == 0 {
			want = nil
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("names %q -> %s -> %q, %v", names, text, got, err)
		}
	}
	c := &queue.Call{ID: "call_x", Owners: []string{"olga"}, Approvers: tools.Approvers{Roles: []string{"admin"}, Groups: []string{"Security Team"}}}
	owners, approvers, err := EncodePeople(c)
	if err != nil || owners != `["olga"]` || approvers != `{"roles":["admin"],"groups":["Security Team"]}` {
		t.Fatalf("EncodePeople = %s, %s, %v", owners, approvers, err)
	}
	var back queue.Call
	if err := DecodePeople(&back, owners, approvers); err != nil || !reflect.DeepEqual(back.Owners, c.Owners) || !reflect.DeepEqual(back.Approvers, c.Approvers) {
		t.Errorf("DecodePeople = %+v, %v", back, err)
	}
	if o, a, _ := EncodePeople(&queue.Call{}); o != "[]" || a != "{}" {
		t.Errorf("nobody: %s %s, want [] {}", o, a)
	}

	at := time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	// SQLite's hex() is upper case, PostgreSQL's encode(…, 'hex') lower.
	for _, hexID := range []string{"00FF10", "00ff10"} {
		text := `[{"operator":"bob","channel":"cli","at":` + "1893553445006" + `,"comment":"","passkey_id":null,"passkey_name":null},` +
			`{"operator":"alice","channel":"web","at":1893553445006,"comment":"ok","passkey_id":"` + hexID + `","passkey_name":"laptop"}]`
		got, err := DecodeApprovals("call_x", text)
		want := []queue.Approval{{Operator: "bob", Channel: "cli", At: at},
			{Operator: "alice", Channel: "web", At: at, Comment: "ok", Passkey: &queue.ApprovalPasskey{CredentialID: []byte{0, 0xff, 0x10}, Name: "laptop"}}}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("DecodeApprovals(%s) = %+v, %v; want %+v", hexID, got, err, want)
		}
	}
	if got, err := DecodeApprovals("call_x", "[]"); err != nil || got != nil {
		t.Errorf("no approvals = %+v, %v", got, err)
	}
	for _, bad := range []string{`{`, `[{"operator":"a","passkey_id":"zz"}]`} {
		if _, err := DecodeApprovals("call_x", bad); err == nil {
			t.Errorf("DecodeApprovals(%s) = nil error", bad)
		}
	}
}

// TestNoPeopleDecodeWithoutAllocating: a call with no owners and no
// approvers (most calls) encodes and decodes its people without
// allocating, as json.Marshal and json.Unmarshal would encode and decode
// them; each of a flow's reads of its call decodes them.
func TestNoPeopleDecodeWithoutAllocating(t *testing.T) {
	var c queue.Call
	owners, approvers, err := EncodePeople(&c)
	if err != nil || owners != "[]" || approvers != "{}" {
		t.Fatalf("EncodePeople = %q, %q, %v", owners, approvers, err)
	}
	n := testing.AllocsPerRun(50, func() {
		if o, a, _ := EncodePeople(&c); o != "[]" || a != "{}" {
			t.Fatal("encoded people changed")
		}
		if err := DecodePeople(&c, "[]", "{}"); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("encoding and decoding no people made %.0f allocations, want 0", n)
	}
	if c.Owners != nil || !c.Approvers.Empty() || c.Escalate != nil || c.Reached != 0 {
		t.Errorf("decoded %+v %+v, want none", c.Owners, c.Approvers)
	}
}

package db

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

// loadCall reads a call's approvals and revocation as JSON built by SQLite
// (correlated subqueries), where it read them with statements of their
// own. What it returns must be what those statements returned, whatever
// the names, comments and evidence hold.

// loadCallBefore is loadCall as it read a call with three statements.
func loadCallBefore(t *testing.T, q *sql.DB, id string) *queue.Call {
	t.Helper()
	c, err := scanCall(q.QueryRow(`SELECT `+callColumns+` FROM calls WHERE id = ?`, id))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := q.Query(`SELECT operator, channel, at, comment, passkey_id, passkey_name, evidence FROM approvals WHERE call_id = ?`, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var a queue.Approval
		var at int64
		var pkID []byte
		var pkName, evidence sql.NullString
		if err := rows.Scan(&a.Operator, &a.Channel, &at, &a.Comment, &pkID, &pkName, &evidence); err != nil {
			t.Fatal(err)
		}
		a.At = time.UnixMilli(at).UTC()
		if pkID != nil {
			a.Passkey = &queue.ApprovalPasskey{CredentialID: pkID, Name: pkName.String, Evidence: []byte(evidence.String)}
		}
		c.Approvals = append(c.Approvals, a)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(c.Approvals, func(a, b queue.Approval) int {
		return cmp.Or(a.At.Compare(b.At), strings.Compare(a.Operator, b.Operator))
	})
	if c.Status == queue.StatusApproved {
		var r queue.Revocation
		var at int64
		err := q.QueryRow(`SELECT call_id, jti, revoked_by, channel, reason, revoked_at FROM grant_revocations WHERE call_id = ?`, c.ID).
			Scan(&r.CallID, &r.JTI, &r.By, &r.Channel, &r.Reason, &at)
		switch {
		case err == nil:
			r.At = time.UnixMilli(at).UTC()
			c.Revoked = &r
		case !errors.Is(err, sql.ErrNoRows):
			t.Fatal(err)
		}
	}
	return c
}

// approvalsText prints approvals and a revocation byte for byte (%q),
// evidence absent and empty alike, as every reader of them treats it.
func approvalsText(c *queue.Call) string {
	var b strings.Builder
	for _, a := range c.Approvals {
		fmt.Fprintf(&b, "%q %q %d %q", a.Operator, a.Channel, a.At.UnixMilli(), a.Comment)
		if a.Passkey != nil {
			fmt.Fprintf(&b, " passkey %x %q %q", a.Passkey.CredentialID, a.Passkey.Name, a.Passkey.Evidence)
		}
		b.WriteString("\n")
	}
	if r := c.Revoked; r != nil {
		fmt.Fprintf(&b, "revoked %q %q %q %q %q %d\n", r.CallID, r.JTI, r.By, r.Channel, r.Reason, r.At.UnixMilli())
	}
	return b.String()
}

func TestLoadCallAsBefore(t *testing.T) {
	d := openTestDB(t)
	at := time.Date(2030, 1, 2, 3, 4, 5, 678e6, time.UTC)
	odd := []string{`"quoted"`, `back\slash`, "line\nbreak\r\ttab", "nul\x00byte", "é 日本 🙂", "\u2028\u2029", "</script><b>&amp;",
		"\u202eevil", "\x7f\x01", `{"json":"looking"}`, "null", ""}
	calls := map[string]func(tx queue.Tx) error{}
	// No approvals; one; many with equal times (sorted by name); passkeys
	// with and without evidence; a revocation of an approved call and one
	// kept from a call that is no longer approved.
	calls["call_none"] = func(queue.Tx) error { return nil }
	calls["call_one"] = func(tx queue.Tx) error {
		return tx.AddApproval("call_one", queue.Approval{Operator: "alice", Channel: "web", At: at, Comment: "ok"})
	}
	calls["call_odd"] = func(tx queue.Tx) error {
		for i, s := range odd {
			a := queue.Approval{Operator: fmt.Sprintf("op%02d%s", len(odd)-i, s), Channel: "web" + s, At: at.Add(time.Duration(i%3) * time.Millisecond), Comment: s}
			if i%2 == 0 {
				a.Passkey = &queue.ApprovalPasskey{CredentialID: []byte{byte(i), 0, 0xff}, Name: "key" + s, Evidence: []byte(`{"format":"countersign.passkey-approval.v1","x":` + fmt.Sprintf("%q", s) + `}`)}
			}
			if err := tx.AddApproval("call_odd", a); err != nil {
				return err
			}
		}
		return nil
	}
	calls["call_revoked"] = func(tx queue.Tx) error {
		if err := tx.AddApproval("call_revoked", queue.Approval{Operator: "bob", Channel: "cli", At: at}); err != nil {
			return err
		}
		return tx.InsertRevocation(queue.Revocation{CallID: "call_revoked", JTI: "00ff", By: "carol \"c\"", Channel: "web", Reason: strings.Join(odd, "|"), At: at})
	}
	calls["call_revoked_redeemed"] = func(tx queue.Tx) error {
		return tx.InsertRevocation(queue.Revocation{CallID: "call_revoked_redeemed", JTI: "01ff", By: "carol", Channel: "web", Reason: "late", At: at})
	}
	for id, fn := range calls {
		if err := d.Store().Update(context.Background(), func(tx queue.Tx) error {
			if err := submitLike(tx, id); err != nil {
				return err
			}
			return fn(tx)
		}); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := d.SQL().Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Written outside the store: a passkey approval without evidence or a
	// name, and text that is not UTF-8.
	exec(`INSERT INTO approvals (call_id, operator, channel, at, comment, passkey_id, passkey_name, evidence) VALUES ('call_one', 'zed', 'web', ?, '', x'00', NULL, NULL)`, at.UnixMilli())
	if err := d.Store().Update(context.Background(), func(tx queue.Tx) error { return submitLike(tx, "call_not_utf8") }); err != nil {
		t.Fatal(err)
	}
	exec(`INSERT INTO approvals (call_id, operator, channel, at, comment) VALUES ('call_not_utf8', 'yan', 'web', ?, CAST(x'66ff80' AS TEXT))`, at.UnixMilli())
	exec(`UPDATE calls SET status = 'approved', grant_jti = 'jti-' || id WHERE id IN ('call_revoked', 'call_one', 'call_revoked_redeemed')`)
	exec(`UPDATE calls SET status = 'redeemed' WHERE id = 'call_revoked_redeemed'`)
	for id := range calls {
		want := loadCallBefore(t, d.SQL(), id)
		got, err := d.Store().Call(context.Background(), id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		var inTx *queue.Call
		if err := d.Store().Update(context.Background(), func(tx queue.Tx) (err error) { inTx, err = tx.Call(id); return err }); err != nil {
			t.Fatal(err)
		}
		for _, c := range []*queue.Call{got, inTx} {
			if w, g := approvalsText(want), approvalsText(c); w != g {
				t.Errorf("%s: read by three statements:\n%s\nby one:\n%s", id, w, g)
			}
			if (want.Revoked == nil) != (c.Revoked == nil) {
				t.Errorf("%s: revoked %v, before %v", id, c.Revoked, want.Revoked)
			}
		}
	}
	// The one difference: text that is not UTF-8 comes through SQLite's
	// JSON with U+FFFD for each bad byte, where a column read gave the bytes.
	// No approval stores such text (its audit entry, in the same
	// transaction, refuses it: canonical.Encode).
	c, err := d.Store().Call(context.Background(), "call_not_utf8")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Approvals) != 1 || c.Approvals[0].Comment != "f\uFFFD\uFFFD" {
		t.Errorf("a comment that is not UTF-8 reads as %+v", c.Approvals)
	}
}

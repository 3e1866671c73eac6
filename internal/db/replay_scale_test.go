package db

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/replay"
)

// scaleTools is a candidate tools file for the scale database's twenty
// tools, each with three rules.
func scaleTools() string {
	var b strings.Builder
	b.WriteString("tools:\n")
	for i := range 20 {
		fmt.Fprintf(&b, `  tool.t%02d:
    audience: payments-host
    target: '^invoice:INV-[0-9]+$'
    auto_approve: allowed
    args:
      type: object
      additionalProperties: false
      required: [amount_minor, currency, reason_code]
      properties:
        amount_minor: {type: integer, minimum: 1}
        currency: {type: string, enum: [USD, EUR, JPY]}
        reason_code: {type: string, enum: [duplicate, fraud, requested]}
    rules:
      - id: too-large
        when: args.amount_minor > 400000
        then: deny
        reason: refunds over 4,000.00 go through finance
      - id: fraud-needs-two
        when: args.reason_code == "fraud"
        then: ask
        approvals: 2
      - id: small-refunds
        when: args.currency == "EUR" && args.amount_minor <= 50000 && actor.startsWith("agent:a00")
        then: approve
`, i)
	}
	return b.String()
}

// TestScaleReplay replays the scale database (see TestScale) through a
// candidate tools file:
//
//	COUNTERSIGN_SCALE=1 COUNTERSIGN_SCALE_DIR=/tmp/scale go test -run TestScaleReplay -v -timeout 60m ./internal/db/
func TestScaleReplay(t *testing.T) {
	if os.Getenv("COUNTERSIGN_SCALE") != "1" {
		t.Skip("set COUNTERSIGN_SCALE=1 to run the one-million-call replay (several minutes)")
	}
	n := 1_000_000
	if v := os.Getenv("COUNTERSIGN_SCALE_CALLS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	dir := os.Getenv("COUNTERSIGN_SCALE_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, fmt.Sprintf("scale-%d.db", n))
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var have int
	_ = d.SQL().QueryRow(`SELECT COUNT(*) FROM calls`).Scan(&have)
	if have != n {
		if have != 0 {
			t.Fatalf("%s holds %d calls, not %d: remove it", path, have, n)
		}
		start := time.Now()
		entries := generateScale(t, d, n)
		t.Logf("generated %d calls and %d audit entries in %v", n, entries, time.Since(start).Round(time.Second))
	}
	d.Close()

	pol, err := policy.Parse([]byte(scaleTools()))
	if err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var rep *replay.Report
	measureStream(t, "policy replay, all calls", int64(n), func(io.Writer) error {
		rep, err = replay.Run(context.Background(), ro, pol, time.Time{}, replay.Options{MaxFlagged: 100})
		return err
	}, nil)
	if rep.Calls != int64(n) {
		t.Fatalf("replayed %d calls, want %d", rep.Calls, n)
	}
	var approve, deny int64
	for _, tr := range rep.Tools {
		a, dn := tr.Changed()
		approve += a
		deny += dn
	}
	t.Logf("policy replay: %d calls in %v (%.0f calls/s): %d ask→approve, %d ask→deny, %d flagged (denied by a person or failed, now approved)",
		rep.Calls, rep.Elapsed.Round(time.Millisecond), float64(rep.Calls)/rep.Elapsed.Seconds(), approve, deny, rep.FlaggedTotal)
	if approve == 0 || deny == 0 || rep.FlaggedTotal == 0 {
		t.Errorf("the rules changed nothing (approve %d, deny %d, flagged %d): the replay measured nothing", approve, deny, rep.FlaggedTotal)
	}
}

package main

import (
	"strings"
	"testing"
)

// The queue a newcomer opens holds a refund to approve: the demo agent's
// first refund is above the demo allowance, so it waits for a person
// whatever the timing; later ones show the allowance approving refunds.
func TestDemoFirstRefundWaits(t *testing.T) {
	var amounts []int
	for n := 0; n < 5*len(demoScript); n++ {
		p := demoScript[n%len(demoScript)].proposal(n)
		if p.Tool != "payments.refund" {
			continue
		}
		args := p.Args.(map[string]any)
		if !strings.HasPrefix(p.Target, "invoice:INV-10") || args["currency"] != "USD" {
			t.Fatalf("refund %d (%s, %v) is outside the allowance's target and currency", n, p.Target, args["currency"])
		}
		amounts = append(amounts, args["amount_minor"].(int))
	}
	if len(amounts) == 0 || amounts[0] <= demoAllowanceMax {
		t.Fatalf("the first refunds are %v: the first must be above the allowance's %d to wait for a person", amounts, demoAllowanceMax)
	}
	covered := 0
	for _, a := range amounts {
		if a <= demoAllowanceMax {
			covered++
		}
	}
	if covered == 0 {
		t.Errorf("none of the refunds %v is inside the allowance's %d: the demo never shows one arrive approved", amounts, demoAllowanceMax)
	}
}

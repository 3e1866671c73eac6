package wire

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestMembersInAlphabeticalOrder: the answers that were once maps declare
// their members in the alphabetical order of their JSON names, so that a
// member added later lands where the map put it and the bytes on the wire
// keep their order.
func TestMembersInAlphabeticalOrder(t *testing.T) {
	for _, v := range []any{Call{}, Approvals{}, Approval{}, Decision{}, Revocation{}, Comment{}, Outcome{},
		Resolution{}, Lease{}, Redemption{}, Freeze{}, Health{}, OperatorCall{}, OperatorQueue{}, OperatorApproval{}, Allowance{}, Plan{}, PlanRef{}, Delegation{}, OperatorPlan{}, OperatorPlans{}, OperatorPlanApproval{}, OperatorCounter{}} {
		ty := reflect.TypeOf(v)
		var names []string
		for i := range ty.NumField() {
			name, _, _ := strings.Cut(ty.Field(i).Tag.Get("json"), ",")
			names = append(names, name)
		}
		if !slices.IsSorted(names) {
			t.Errorf("%s declares its members in the order %v, want alphabetical", ty.Name(), names)
		}
	}
}

func TestDecided(t *testing.T) {
	for _, s := range []Status{StatusApproved, StatusDenied, StatusExpired, StatusCancelled, StatusRedeemed, StatusRevoked} {
		if !s.Decided() {
			t.Errorf("%s.Decided() = false, want true", s)
		}
	}
	if StatusPending.Decided() {
		t.Error("pending.Decided() = true, want false")
	}
}

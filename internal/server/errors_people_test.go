package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/queue"
)

// One person's second approval under another account is a 409 that names
// the account it was given as and says what to do next.
func TestSamePersonApprovalError(t *testing.T) {
	err := fmt.Errorf("approve: %w", &queue.SamePersonError{Operator: "oidc:idp.example.com/00u-sam", Other: "sam"})
	ae := ErrorOf(err)
	if ae.Status != http.StatusConflict || ae.Code != "already_approved" || !strings.Contains(ae.Message, "as sam") ||
		!strings.Contains(ae.Message, "ask another operator") {
		t.Errorf("ErrorOf(SamePersonError) = %d %s %q", ae.Status, ae.Code, ae.Message)
	}
}

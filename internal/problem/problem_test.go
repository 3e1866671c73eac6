package problem

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/scope"
	"github.com/countersign/countersign/internal/store"
	"github.com/countersign/countersign/internal/tools"
)

// examples holds one value of every exported error of the packages whose
// refusals reach a person or an agent, by its name in the source.
var examples = map[string]error{
	"queue.ErrNotFound": queue.ErrNotFound, "queue.ErrTooManyPending": queue.ErrTooManyPending, "queue.ErrNotPending": queue.ErrNotPending,
	"queue.ErrDigestMismatch": queue.ErrDigestMismatch, "queue.ErrOwnCall": queue.ErrOwnCall,
	"queue.ErrAlreadyApproved": queue.ErrAlreadyApproved, "queue.ErrReasonRequired": queue.ErrReasonRequired,
	"queue.ErrReasonTooLong": queue.ErrReasonTooLong, "queue.ErrAudienceNotAllow": queue.ErrAudienceNotAllow,
	"queue.ErrNotRedeemed": queue.ErrNotRedeemed, "queue.ErrOutcomeReported": queue.ErrOutcomeReported,
	"queue.ErrInvalidOutcome": queue.ErrInvalidOutcome, "queue.ErrRetryLimit": queue.ErrRetryLimit,
	"queue.ErrNotBlocked": queue.ErrNotBlocked, "queue.ErrPreviouslyDenied": queue.ErrPreviouslyDenied,
	"queue.ErrPreviouslyCountered": queue.ErrPreviouslyCountered, "queue.ErrNotCounterable": queue.ErrNotCounterable,
	"queue.ErrCounterUnchanged": queue.ErrCounterUnchanged, "queue.ErrNotCounter": queue.ErrNotCounter,
	"queue.ErrOperatorRequired": queue.ErrOperatorRequired, "queue.ErrIntegrity": queue.ErrIntegrity,
	"queue.ErrNotApproved": queue.ErrNotApproved, "queue.ErrNotADecider": queue.ErrNotADecider,
	"queue.ErrNotAnAdmin": queue.ErrNotAnAdmin, "queue.ErrCommentTooLong": queue.ErrCommentTooLong,
	"queue.ErrNotLeaseHolder": queue.ErrNotLeaseHolder, "queue.ErrLeaseExpired": queue.ErrLeaseExpired,
	"queue.ErrNotUnresolved": queue.ErrNotUnresolved, "queue.ErrAlreadyResolved": queue.ErrAlreadyResolved,
	"queue.ErrResolveOwnCall": queue.ErrResolveOwnCall, "queue.ErrInvalidVerdict": queue.ErrInvalidVerdict,
	"queue.ErrNoteRequired": queue.ErrNoteRequired, "queue.ErrNoteTooLong": queue.ErrNoteTooLong,
	"queue.ErrInvalidEvidence": queue.ErrInvalidEvidence, "queue.ErrPasskeyRequired": queue.ErrPasskeyRequired,
	"queue.ErrPasskeyChanged": queue.ErrPasskeyChanged, "queue.ErrOwner": queue.ErrOwner,
	"queue.ErrBatchEmpty": queue.ErrBatchEmpty, "queue.ErrBatchTooLarge": queue.ErrBatchTooLarge, "queue.ErrBatchDuplicate": queue.ErrBatchDuplicate,
	"queue.ErrBatchWarning": queue.ErrBatchWarning, "queue.ErrBatchConfirm": queue.ErrBatchConfirm, "queue.ErrBatchPasskey": queue.ErrBatchPasskey,
	"queue.ErrPresentation":      queue.ErrPresentation,
	"queue.ErrNotApprovableFrom": queue.ErrNotApprovableFrom, "queue.ErrListing": queue.ErrListing,
	"queue.NotApprovableFromError": &queue.NotApprovableFromError{Tool: "payments.refund", Channel: "api", Allowed: []string{"web"}},
	"queue.ErrNotAnApprover":       queue.ErrNotAnApprover, "queue.ErrWarningNotAcknowledged": queue.ErrWarningNotAcknowledged,
	"queue.ErrFilter": queue.ErrFilter, "queue.ErrToolChanged": queue.ErrToolChanged,
	"queue.ErrFreezeScope": queue.ErrFreezeScope, "queue.ErrFreezeReason": queue.ErrFreezeReason,
	"queue.ErrNotAdmin":          queue.ErrNotAdmin,
	"queue.ErrAllowanceNotFound": queue.ErrAllowanceNotFound, "queue.ErrScopeMismatch": queue.ErrScopeMismatch,
	"queue.ErrAllowancesPerTool": queue.ErrAllowancesPerTool, "queue.ErrAllowancesPerGiver": queue.ErrAllowancesPerGiver,
	"queue.ErrAllowanceConfirmed": queue.ErrAllowanceConfirmed, "queue.ErrBaseDenied": queue.ErrBaseDenied, "queue.ErrAlreadyConfirmer": queue.ErrAlreadyConfirmer,
	"queue.ErrMayNotRevoke": queue.ErrMayNotRevoke, "queue.ErrAllowanceEnded": queue.ErrAllowanceEnded,
	"queue.AllowanceEndedError":   &queue.AllowanceEndedError{ID: "alw_1", Reason: queue.EndRevoked},
	"queue.ErrDelegationNotFound": queue.ErrDelegationNotFound, "queue.ErrSelfDelegation": queue.ErrSelfDelegation,
	"queue.ErrMutualDelegation": queue.ErrMutualDelegation, "queue.ErrDelegationExists": queue.ErrDelegationExists,
	"queue.ErrDelegationWindow":   queue.ErrDelegationWindow,
	"queue.ErrTooManyDelegations": queue.ErrTooManyDelegations, "queue.ErrMayNotDelegate": queue.ErrMayNotDelegate,
	"queue.ErrNotDelegated": queue.ErrNotDelegated, "queue.ErrDelegationOutlived": queue.ErrDelegationOutlived,

	"queue.ErrPlanNotFound": queue.ErrPlanNotFound, "queue.ErrPlanItem": queue.ErrPlanItem,
	"queue.ErrTooManyPendingPlans": queue.ErrTooManyPendingPlans, "queue.ErrPlanTooLarge": queue.ErrPlanTooLarge,
	"queue.ErrPlanNotApproved": queue.ErrPlanNotApproved, "queue.ErrPlanOrder": queue.ErrPlanOrder,
	"queue.ErrPlanHalted": queue.ErrPlanHalted, "queue.ErrPlanRequirement": queue.ErrPlanRequirement,
	"queue.ErrPlanApprover": queue.ErrPlanApprover, "queue.ErrPlanNotPending": queue.ErrPlanNotPending,
	"queue.PlanStateError": &queue.PlanStateError{Status: queue.PlanExpired},

	"scope.ErrNoAllowance": scope.ErrNoAllowance, "scope.ErrPasskeyTool": scope.ErrPasskeyTool,
	"scope.ErrToolMismatch": scope.ErrToolMismatch, "scope.ErrUses": scope.ErrUses, "scope.ErrUntil": scope.ErrUntil,
	"scope.ErrNotVariable": scope.ErrNotVariable, "scope.ErrAboveMaximum": scope.ErrAboveMaximum,
	"scope.ErrNotInEnum": scope.ErrNotInEnum, "scope.ErrBaseOutside": scope.ErrBaseOutside, "scope.ErrMalformed": scope.ErrMalformed,

	"queue.SamePersonError":    &queue.SamePersonError{Operator: "bob", Other: "oidc:idp/bob"},
	"queue.OwnerError":         &queue.OwnerError{Operator: "bob", Owner: "bob"},
	"queue.ApproversError":     &queue.ApproversError{Operator: "bob", Who: "payments-leads"},
	"queue.DeciderError":       &queue.DeciderError{Operator: "bob"},
	"queue.AdminError":         &queue.AdminError{Operator: "bob"},
	"queue.NotPendingError":    &queue.NotPendingError{Status: queue.StatusApproved},
	"queue.AudienceError":      &queue.AudienceError{Tool: "payments.refund", ToolAudience: "payments-host", TokenAudience: "deploy-host"},
	"queue.ProposalError":      &queue.ProposalError{Kind: queue.KindInvalidArguments, Problems: canonical.Problems{{Code: "unknown_field", Path: "/args/x"}}},
	"queue.DeniedError":        &queue.DeniedError{CallID: "call_1", Reason: "no", At: time.Unix(0, 0)},
	"queue.CounteredError":     &queue.CounteredError{CallID: "call_1", CounterID: "call_2", At: time.Unix(0, 0)},
	"queue.CounterDeniedError": &queue.CounterDeniedError{Rule: "no-fraud", Reason: "no"},
	"queue.ConfirmationError":  &queue.ConfirmationError{Describe: "the target", Want: "service:checkout"},
	"queue.FilterError":        &queue.FilterError{Reason: "bad date"},
	"queue.IntegrityError":     &queue.IntegrityError{ID: "call_1", What: "edited"},
	"queue.FrozenError":        &queue.FrozenError{Freeze: queue.Freeze{Tool: "payments.refund", Reason: "incident"}},
	"queue.PolicyDeniedError":  &queue.PolicyDeniedError{CallID: "call_1", Rule: "no-prod", Reason: "no"},
	"queue.NameError":          &queue.NameError{Field: "tool", Name: "Payments.Refund", Near: []string{"payments.refund"}},

	"account.ErrTooManyPasskeys": account.ErrTooManyPasskeys, "account.ErrMismatch": account.ErrMismatch,
	"account.ErrMalformedHash": account.ErrMalformedHash, "account.ErrWeakPassword": account.ErrWeakPassword,
	"account.ErrLongPassword": account.ErrLongPassword, "account.ErrReservedName": account.ErrReservedName,
	"account.ErrUnknownRole": account.ErrUnknownRole, "account.ErrBadName": account.ErrBadName,
	"account.ErrBadOwner": account.ErrBadOwner, "account.ErrNoRole": account.ErrNoRole,
	"account.ErrLoginDisabled": account.ErrLoginDisabled, "account.ErrBadPrincipal": account.ErrBadPrincipal,
	"account.ErrThrottleFull": account.ErrThrottleFull, "account.ErrUserNotFound": account.ErrUserNotFound,
	"account.ErrUserExists": account.ErrUserExists, "account.ErrUserDisabled": account.ErrUserDisabled,
	"account.ErrSessionNotFound": account.ErrSessionNotFound, "account.ErrTokenNotFound": account.ErrTokenNotFound,
	"account.ErrTokenContext": account.ErrTokenContext, "account.ErrTokenName": account.ErrTokenName,
	"account.ErrSecretNotFound": account.ErrSecretNotFound, "account.ErrPasskeyNotFound": account.ErrPasskeyNotFound,
	"account.ErrPasskeyTaken": account.ErrPasskeyTaken, "account.ErrSSOPassword": account.ErrSSOPassword,
	"account.ErrOperatorTokenScope": account.ErrOperatorTokenScope, "account.ErrOperatorTokenLife": account.ErrOperatorTokenLife,
	"account.ErrOperatorTokenNote": account.ErrOperatorTokenNote, "account.ErrTooManyOperatorTokens": account.ErrTooManyOperatorTokens,
	"account.ErrOperatorTokenRole": account.ErrOperatorTokenRole, "account.ErrOperatorTokenNotFound": account.ErrOperatorTokenNotFound, "account.ErrOperatorTokenInvalid": account.ErrOperatorTokenInvalid,
	"account.InputError":  &account.InputError{Field: "name", Message: "bad name"},
	"account.ShadowError": &account.ShadowError{Name: "alice", Holder: "alice", Local: true},

	"grant.ErrNoNextKey": grant.ErrNoNextKey, "grant.ErrNextKeyPrepared": grant.ErrNextKeyPrepared,
	"grant.ErrNoKeyring": grant.ErrNoKeyring, "grant.ErrKeyringExists": grant.ErrKeyringExists,

	"tools.LintError":       &tools.LintError{Problems: []tools.LintProblem{{Message: "x"}}},
	"tools.QuarantineError": &tools.QuarantineError{},

	"store.ErrReplaced": store.ErrReplaced, "store.ErrUnavailable": store.ErrUnavailable,
	"store.ErrRolledBack": store.ErrRolledBack,
}

// TestEveryDomainErrorHasARow walks the source of queue, account, grant,
// tools and store for their exported errors (package-level Err… values and
// types with an Error method) and fails on one that this table test does
// not list, or that Of answers as an unknown internal error: every refusal
// has its own code, status and message, the same on every transport.
func TestEveryDomainErrorHasARow(t *testing.T) {
	found := exportedErrors(t, "queue", "account", "grant", "tools", "store", "scope")
	if len(found) < 60 {
		t.Fatalf("found only %d exported errors: is the walk reading the right folders?", len(found))
	}
	for _, name := range found {
		err, ok := examples[name]
		if !ok {
			t.Errorf("%s is an exported error with no example here: add one, and a row for it in problem.go", name)
			continue
		}
		p := Of(err)
		if p.Code == "internal" {
			t.Errorf("%s maps to an unknown internal error (%d %s): give it a row in problem.go", name, p.Status, p.Code)
		}
		if p.Status < 400 || p.Status > 599 || p.Code == "" || p.Message == "" {
			t.Errorf("%s maps to %+v: want a 4xx/5xx status, a code and a message", name, p)
		}
		if strings.Contains(p.Message, "%!") {
			t.Errorf("%s: message %q has a formatting error", name, p.Message)
		}
	}
	for name := range examples {
		if !contains(found, name) {
			t.Errorf("%s is listed here but is no longer an exported error of its package: remove it", name)
		}
	}
}

// TestUnknownErrorIsInternal: an error nothing knows is a 500 that says
// nothing was changed, and a wrapped refusal keeps its row.
func TestUnknownErrorIsInternal(t *testing.T) {
	if p := Of(errors.New("boom")); p.Status != http.StatusInternalServerError || p.Code != "internal" {
		t.Errorf("unknown error = %+v, want 500 internal", p)
	}
	if p := Of(fmt.Errorf("approve: %w", queue.ErrDigestMismatch)); p.Code != "digest_mismatch" {
		t.Errorf("wrapped digest mismatch = %s, want digest_mismatch", p.Code)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// exportedErrors lists "pkg.Name" for every exported package-level
// variable named Err… and every exported type with an Error method in the
// non-test Go files of each package folder.
func exportedErrors(t *testing.T, pkgs ...string) []string {
	t.Helper()
	var out []string
	for _, pkg := range pkgs {
		files, err := filepath.Glob(filepath.Join("..", pkg, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files for %s: %v", pkg, err)
		}
		fset := token.NewFileSet()
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			file, err := parser.ParseFile(fset, f, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range file.Decls {
				switch d := d.(type) {
				case *ast.GenDecl:
					if d.Tok != token.VAR {
						continue
					}
					for _, s := range d.Specs {
						for _, n := range s.(*ast.ValueSpec).Names {
							if n.IsExported() && strings.HasPrefix(n.Name, "Err") {
								out = append(out, pkg+"."+n.Name)
							}
						}
					}
				case *ast.FuncDecl:
					if d.Name.Name != "Error" || d.Recv == nil || len(d.Recv.List) != 1 {
						continue
					}
					typ := d.Recv.List[0].Type
					if st, ok := typ.(*ast.StarExpr); ok {
						typ = st.X
					}
					if id, ok := typ.(*ast.Ident); ok && id.IsExported() {
						out = append(out, pkg+"."+id.Name)
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// A resubmitted countered call is answered with the counter to use.
func TestPreviouslyCounteredNamesTheCounter(t *testing.T) {
	e := Of(fmt.Errorf("wrapped: %w", &queue.CounteredError{CallID: "call_1", CounterID: "call_2", At: time.Unix(0, 0)}))
	if e.Status != 409 || e.Code != "previously_countered" || e.CallID != "call_1" || e.CounteredBy != "call_2" ||
		!strings.Contains(e.Message, "/api/v1/calls/call_2/accept") || !e.Refusal() {
		t.Fatalf("Of = %+v", e)
	}
}

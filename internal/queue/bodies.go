package queue

import (
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/tools"
)

// OutcomeReport is what an executor says happened: the body of
// POST /api/v1/calls/{id}/outcome.
type OutcomeReport struct {
	Status, Detail string
}

// ParseOutcome reads an outcome report strictly: an object with status (a
// string) and an optional detail, nothing else. Every problem is listed,
// with its JSON Pointer, in a *ProposalError. Whether status is one of the
// outcomes is ReportOutcome's to say.
func ParseOutcome(body []byte) (OutcomeReport, error) {
	o, err := parseObject(body, "the body must be an object with status and detail")
	if err != nil {
		return OutcomeReport{}, err
	}
	var r OutcomeReport
	var problems canonical.Problems
	for _, m := range o {
		var ok bool
		switch m.Name {
		case "status":
			if r.Status, ok = m.Value.(string); !ok {
				problems = append(problems, canonical.Problem{Code: canonical.CodeWrongType, Path: "/status", Message: "status must be a string"})
			}
		case "detail":
			if r.Detail, ok = m.Value.(string); !ok {
				problems = append(problems, canonical.Problem{Code: canonical.CodeWrongType, Path: "/detail", Message: "detail must be a string"})
			}
		default:
			problems = append(problems, canonical.Problem{Code: canonical.CodeUnknownField, Path: canonical.Pointer(m.Name),
				Message: fmt.Sprintf("%+q is not a member of an outcome (allowed: status, detail)", m.Name)})
		}
	}
	if _, ok := o.Get("status"); !ok {
		problems = append(problems, canonical.Problem{Code: canonical.CodeMissingField, Path: "/status", Message: "status is required: succeeded, failed or unknown"})
	}
	if len(problems) > 0 {
		return OutcomeReport{}, &ProposalError{Kind: KindInvalidArguments, Problems: problems}
	}
	return r, nil
}

// ParseHeartbeat reads a heartbeat's body strictly: empty, or an object
// with at most extend_seconds (an integer from 1 to the longest
// outcome_within a tool may set). It returns how far to extend the lease,
// zero for the tool's own outcome_within.
func ParseHeartbeat(body []byte) (time.Duration, error) {
	if len(body) == 0 {
		return 0, nil
	}
	o, err := parseObject(body, "the body must be an object (or empty)")
	if err != nil {
		return 0, err
	}
	var extend time.Duration
	var problems canonical.Problems
	for _, m := range o {
		switch m.Name {
		case "extend_seconds":
			n, isInt := m.Value.(int64)
			if !isInt {
				problems = append(problems, canonical.Problem{Code: canonical.CodeWrongType, Path: "/extend_seconds",
					Message: "extend_seconds must be an integer number of seconds"})
			} else if n < 1 || n > int64(tools.MaxOutcomeWithin/time.Second) {
				problems = append(problems, canonical.Problem{Code: canonical.CodeOutOfRange, Path: "/extend_seconds",
					Message: "extend_seconds must be at least 1 and at most the tool's outcome_within"})
			} else {
				extend = time.Duration(n) * time.Second
			}
		default:
			problems = append(problems, canonical.Problem{Code: canonical.CodeUnknownField, Path: canonical.Pointer(m.Name),
				Message: fmt.Sprintf("%+q is not a member of a heartbeat (allowed: extend_seconds)", m.Name)})
		}
	}
	if len(problems) > 0 {
		return 0, &ProposalError{Kind: KindInvalidArguments, Problems: problems}
	}
	return extend, nil
}

// parseObject parses body with the canonical parser and requires an
// object; a body that does not parse is a KindParse *ProposalError.
func parseObject(body []byte, notObject string) (canonical.Object, error) {
	v, err := canonical.Parse(body)
	if err != nil {
		var p *canonical.Problem
		if pe, ok := err.(*canonical.Problem); ok {
			p = pe
		} else {
			p = &canonical.Problem{Code: canonical.CodeMalformedJSON, Message: err.Error()}
		}
		return nil, &ProposalError{Kind: KindParse, Problems: canonical.Problems{*p}}
	}
	o, ok := v.(canonical.Object)
	if !ok {
		return nil, &ProposalError{Kind: KindInvalidArguments, Problems: canonical.Problems{{Code: canonical.CodeWrongType, Message: notObject}}}
	}
	return o, nil
}

package queue_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

// problemCodes is "kind: code@path ..." of a refused body, "" when none.
func problemCodes(err error) []string {
	var pe *queue.ProposalError
	if !errors.As(err, &pe) {
		return nil
	}
	out := []string{string(pe.Kind)}
	for _, p := range pe.Problems {
		out = append(out, p.Code+"@"+p.Path)
	}
	return out
}

func TestParseOutcome(t *testing.T) {
	for _, tc := range []struct {
		body string
		want queue.OutcomeReport
		errs []string
	}{
		{`{"status":"succeeded"}`, queue.OutcomeReport{Status: "succeeded"}, nil},
		{`{"status":"failed","detail":"HTTP 502"}`, queue.OutcomeReport{Status: "failed", Detail: "HTTP 502"}, nil},
		{`{}`, queue.OutcomeReport{}, []string{"invalid_arguments", "missing_field@/status"}},
		{`{"status":1,"detail":false,"extra":true}`, queue.OutcomeReport{},
			[]string{"invalid_arguments", "wrong_type@/detail", "unknown_field@/extra", "wrong_type@/status"}},
		{`[]`, queue.OutcomeReport{}, []string{"invalid_arguments", "wrong_type@"}},
		{`{"status":"ok","status":"ok"}`, queue.OutcomeReport{}, []string{"parse", "duplicate_key@/status"}},
		{`{"status":`, queue.OutcomeReport{}, []string{"parse", "malformed_json@/status"}},
	} {
		got, err := queue.ParseOutcome([]byte(tc.body))
		if codes := problemCodes(err); !slices.Equal(codes, tc.errs) || (err == nil) != (tc.errs == nil) {
			t.Errorf("ParseOutcome(%s): %v (%q), want %q", tc.body, err, codes, tc.errs)
		}
		if err == nil && got != tc.want {
			t.Errorf("ParseOutcome(%s) = %+v, want %+v", tc.body, got, tc.want)
		}
	}
}

func TestParseHeartbeat(t *testing.T) {
	for _, tc := range []struct {
		body string
		want time.Duration
		errs []string
	}{
		{``, 0, nil},
		{`{}`, 0, nil},
		{`{"extend_seconds":90}`, 90 * time.Second, nil},
		{`{"extend_seconds":0}`, 0, []string{"invalid_arguments", "out_of_range@/extend_seconds"}},
		{`{"extend_seconds":"60"}`, 0, []string{"invalid_arguments", "wrong_type@/extend_seconds"}},
		{`{"extend":60}`, 0, []string{"invalid_arguments", "unknown_field@/extend"}},
		{`7`, 0, []string{"invalid_arguments", "wrong_type@"}},
	} {
		got, err := queue.ParseHeartbeat([]byte(tc.body))
		if codes := problemCodes(err); !slices.Equal(codes, tc.errs) || (err == nil) != (tc.errs == nil) {
			t.Errorf("ParseHeartbeat(%s): %v (%q), want %q", tc.body, err, codes, tc.errs)
		}
		if got != tc.want {
			t.Errorf("ParseHeartbeat(%s) = %v, want %v", tc.body, got, tc.want)
		}
	}
}

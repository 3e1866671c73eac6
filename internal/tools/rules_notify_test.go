package tools

import (
	"reflect"
	"strings"
	"testing"
)

func TestRuleNotifyChannels(t *testing.T) {
	r, err := Parse([]byte(toolFile(`    rules:
      - id: big
        when: args.n > 100
        then: ask
        approvals: 2
        notify: [oncall, security-team]
      - id: plain
        when: args.n > 100
        then: ask
        approvals: 2
`)))
	if err != nil {
		t.Fatal(err)
	}
	tl, _ := r.Tool("demo.tool")
	big, plain := tl.Rules[0], tl.Rules[1]
	if !reflect.DeepEqual(big.Notify, []string{"oncall", "security-team"}) || plain.Notify != nil {
		t.Fatalf("notify %v and %v", big.Notify, plain.Notify)
	}
	// Who is told is not what is decided: the digest of the rule's text
	// does not cover it.
	big.ID = "plain"
	if ruleDigest(big) != plain.Digest {
		t.Fatal("notify changed the rule's digest")
	}
	for fields, want := range map[string]string{
		"    rules:\n      - {id: a, when: 'true', then: ask, notify: oncall}\n":    "must be a list of notification channel names",
		"    rules:\n      - {id: a, when: 'true', then: ask, notify: [On Call]}\n": "channel names are lower-case",
		"    rules:\n      - {id: a, when: 'true', then: ask, notify: [{a: b}]}\n":  "must be a string",
	} {
		found := false
		for _, p := range lintProblems(t, toolFile(fields)) {
			if p.Path == "rules/a/notify" && strings.Contains(p.Message, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%q: no problem %q in %v", fields, want, lintProblems(t, toolFile(fields)))
		}
	}
}

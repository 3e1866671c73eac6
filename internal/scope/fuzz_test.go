package scope

import (
	"bytes"
	"testing"
	"time"
)

// FuzzParse: Parse never panics, and whatever it accepts is a scope whose
// canonical JSON is exactly the input, so one scope has one spelling and
// one digest.
func FuzzParse(f *testing.F) {
	tool := mustTool(f, "payments.refund")
	base := baseCall(f, tool)
	for _, c := range []Choices{
		{Uses: 3, Until: now.Add(time.Hour)},
		{Uses: 20, Until: now.Add(time.Minute), TargetPrefix: "invoice:", RepeatCalls: true,
			Members: map[string]Member{"/amount_minor": {Max: i64(9000)}, "/reason": {In: []string{"duplicate", "other"}}, "/meta/n": {Max: i64(4)}}},
	} {
		s, err := Materialise(base, tool, c, now)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(s.JSON())
	}
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`{"actor":"a","args":{"/a":{"in":["b","a"]}},"audience":"h","once_per_call":true,"target":{"equals":"t"},"tool":"x","tool_digest":"` +
		"0000000000000000000000000000000000000000000000000000000000000000" + `","until":"2026-12-05T14:30:00Z","uses":1,"v":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			return
		}
		if got := s.JSON(); !bytes.Equal(got, data) {
			t.Fatalf("accepted %q, which encodes as %q", data, got)
		}
	})
}

func TestParseRefusals(t *testing.T) {
	tool := mustTool(t, "payments.refund")
	s, err := Materialise(baseCall(t, tool), tool, Choices{Uses: 3, Until: now.Add(time.Hour), Members: map[string]Member{"/reason": {In: []string{"duplicate", "fraud"}}}}, now)
	if err != nil {
		t.Fatal(err)
	}
	good := string(s.JSON())
	if _, err := Parse([]byte(good)); err != nil {
		t.Fatal(err)
	}
	replace := func(old, new string) string {
		t.Helper()
		if !bytes.Contains([]byte(good), []byte(old)) {
			t.Fatalf("%q is not in %s", old, good)
		}
		return string(bytes.Replace([]byte(good), []byte(old), []byte(new), 1))
	}
	for name, data := range map[string]string{
		"not canonical (space)": replace(`"v":1`, `"v": 1`),
		"unknown member":        replace(`"v":1}`, `"v":1,"w":2}`),
		"missing member":        replace(`"once_per_call":true,`, ``),
		"wrong version":         replace(`"v":1`, `"v":2`),
		"uses a string":         replace(`"uses":3`, `"uses":"3"`),
		"uses zero":             replace(`"uses":3`, `"uses":0`),
		"uses beyond any tool":  replace(`"uses":3`, `"uses":1001`),
		"bad bound":             replace(`"/lines":{"equals":[1,2]}`, `"/lines":{"equal":[1,2]}`),
		"two bounds":            replace(`{"equals":1250}`, `{"equals":1250,"max":5}`),
		"unsorted in":           replace(`["duplicate","fraud"]`, `["fraud","duplicate"]`),
		"repeated in":           replace(`["duplicate","fraud"]`, `["duplicate","duplicate"]`),
		"empty in":              replace(`["duplicate","fraud"]`, `[]`),
		"absent spelled else":   replace(`"/note":"absent"`, `"/note":"missing"`),
		"not a pointer":         replace(`"/note":"absent"`, `"note":"absent"`),
		"overlapping pointers":  replace(`"/note":"absent"`, `"/meta/n/x":"absent","/note":"absent"`),
		"until with offset":     replace(`"until":"2026-12-05T14:30:00Z"`, `"until":"2026-12-05T15:30:00+01:00"`),
		"until fractional":      replace(`"until":"2026-12-05T14:30:00Z"`, `"until":"2026-12-05T14:30:00.5Z"`),
		"target both":           replace(`"target":{"equals":"invoice:INV-2041"}`, `"target":{"equals":"invoice:INV-2041","prefix":"i"}`),
		"bad digest":            replace(`"tool_digest":"`, `"tool_digest":"X`),
	} {
		if _, err := Parse([]byte(data)); err == nil {
			t.Errorf("%s: Parse accepted %s", name, data)
		}
	}
}

package canonical

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// side is one body of an equivalence pair with the trusted context it is
// digested under.
type side struct {
	body     []byte
	actor    string
	audience string
}

type equivalencePair struct {
	want string // "same" or "differ"
	name string
	a, b *side
}

var sectionHeader = regexp.MustCompile(`^-- (same|differ)/([a-z0-9-]+)/(a|b)((?: (?:actor|audience)=\S+)*) --$`)

// readEquivalence reads testdata/equivalence.txt (its format is described at
// the top of the file).
func readEquivalence(tb testing.TB) []equivalencePair {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "equivalence.txt"))
	if err != nil {
		tb.Fatal(err)
	}
	pairs := map[string]*equivalencePair{}
	var cur *side
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if !strings.HasPrefix(line, "-- ") {
			if cur != nil {
				cur.body = append(cur.body, line...)
			}
			continue
		}
		m := sectionHeader.FindStringSubmatch(strings.TrimSuffix(line, "\n"))
		if m == nil {
			tb.Fatalf("bad section header %q", line)
		}
		key := m[1] + "/" + m[2]
		p := pairs[key]
		if p == nil {
			p = &equivalencePair{want: m[1], name: m[2]}
			pairs[key] = p
		}
		cur = &side{actor: "agent:billing-bot", audience: "payments-host"}
		for _, kv := range strings.Fields(m[4]) {
			k, v, _ := strings.Cut(kv, "=")
			if k == "actor" {
				cur.actor = v
			} else {
				cur.audience = v
			}
		}
		slot := &p.a
		if m[3] == "b" {
			slot = &p.b
		}
		if *slot != nil {
			tb.Fatalf("%s/%s appears twice", key, m[3])
		}
		*slot = cur
	}
	var out []equivalencePair
	for key, p := range pairs {
		if p.a == nil || p.b == nil {
			tb.Fatalf("%s: needs both an a and a b section", key)
		}
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].want+out[i].name < out[j].want+out[j].name })
	return out
}

func TestEquivalence(t *testing.T) {
	pairs := readEquivalence(t)
	kinds := map[string]int{}
	for _, p := range pairs {
		kinds[p.want]++
		t.Run(p.want+"/"+p.name, func(t *testing.T) {
			digest := func(s *side) (string, []byte) {
				t.Helper()
				prop, err := ParseProposal(s.body)
				if err != nil {
					t.Fatalf("ParseProposal(%q): %v", s.body, err)
				}
				env := prop.Envelope(s.actor, s.audience)
				c, err := env.Canonical()
				if err != nil {
					t.Fatal(err)
				}
				d, err := env.Digest()
				if err != nil {
					t.Fatal(err)
				}
				ref, err := refDigest(s.body, s.actor, s.audience)
				if err != nil {
					t.Fatal(err)
				}
				if d != ref {
					t.Errorf("digest of %q = %s, reference implementation says %s", s.body, d, ref)
				}
				return d, c
			}
			da, ca := digest(p.a)
			db, cb := digest(p.b)
			switch p.want {
			case "same":
				if da != db || !bytes.Equal(ca, cb) {
					t.Errorf("digests differ, want the same:\n a %s %s\n b %s %s", da, ca, db, cb)
				}
			case "differ":
				if da == db || bytes.Equal(ca, cb) {
					t.Errorf("digests are the same, want different: %s %s", da, ca)
				}
			}
		})
	}
	// The corpus itself must not quietly shrink.
	if kinds["same"] < 15 || kinds["differ"] < 30 {
		t.Errorf("corpus has %d same and %d differ pairs, want at least 15 and 30", kinds["same"], kinds["differ"])
	}
}

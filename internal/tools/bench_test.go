package tools

import (
	"fmt"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/canonical"
)

// proposal4K is a valid email.send proposal of about 4 KiB: ten recipients
// and a body that fills the rest.
func proposal4K(tb testing.TB) []byte {
	tb.Helper()
	var to []string
	for i := range 10 {
		to = append(to, fmt.Sprintf(`{"address":"recipient%02d@example.org","name":"Recipient %02d"}`, i, i))
	}
	head := `{"tool":"email.send","target":"mailbox:support@example.com","rationale":"monthly statement","args":{"to":[` +
		strings.Join(to, ",") + `],"subject":"Your statement for May","body":"`
	tail := `"}}`
	body := strings.Repeat("Lorem ipsum dolor sit amet. ", (4096-len(head)-len(tail))/28+1)
	data := []byte(head + body[:4096-len(head)-len(tail)] + tail)
	if len(data) != 4096 {
		tb.Fatalf("proposal is %d bytes, want 4096", len(data))
	}
	return data
}

func BenchmarkCheck4KiB(b *testing.B) {
	r := MustLoad(b, examplesFile)
	p, err := canonical.ParseProposal(proposal4K(b))
	if err != nil {
		b.Fatal(err)
	}
	if _, ps := r.Check(p); len(ps) != 0 {
		b.Fatalf("benchmark proposal is invalid: %v", ps)
	}
	b.ReportAllocs()
	b.SetBytes(4096)
	for b.Loop() {
		r.Check(p)
	}
}

func BenchmarkParseAndCheck4KiB(b *testing.B) {
	r := MustLoad(b, examplesFile)
	data := proposal4K(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		p, err := canonical.ParseProposal(data)
		if err != nil {
			b.Fatal(err)
		}
		if _, ps := r.Check(p); len(ps) != 0 {
			b.Fatal(ps)
		}
	}
}

// BenchmarkCheckInvalid measures a 4 KiB proposal with many problems: every
// recipient carries a stray member.
func BenchmarkCheckInvalid4KiB(b *testing.B) {
	r := MustLoad(b, examplesFile)
	data := strings.ReplaceAll(string(proposal4K(b)), `"name":"Recipient`, `"bcc":"Recipient`)
	p, err := canonical.ParseProposal([]byte(data))
	if err != nil {
		b.Fatal(err)
	}
	if _, ps := r.Check(p); len(ps) != 10 {
		b.Fatalf("%d problems, want 10", len(ps))
	}
	b.ReportAllocs()
	for b.Loop() {
		r.Check(p)
	}
}

// BenchmarkJSONSchemaV6Check4KiB validates the same args with the reference
// implementation, converting them to map[string]any as it requires, for
// comparison with BenchmarkCheck4KiB.
func BenchmarkJSONSchemaV6Check4KiB(b *testing.B) {
	r := MustLoad(b, examplesFile)
	p, err := canonical.ParseProposal(proposal4K(b))
	if err != nil {
		b.Fatal(err)
	}
	tl, _ := r.Tool(p.Tool)
	ref := compileV6(b, tl)
	b.ReportAllocs()
	b.SetBytes(4096)
	for b.Loop() {
		if err := ref.Validate(toV6(p.Args)); err != nil {
			b.Fatal(err)
		}
	}
}

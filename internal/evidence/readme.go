package evidence

import (
	"bytes"
	"fmt"

	"github.com/countersign/countersign/internal/audit"
)

// readme is the pack's README.md, written for a reader who is not an
// engineer: what the pack is, the summary table, and how to check it.
func readme(res Result, h *audit.ExportHeader, opt Options) []byte {
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	period := func(t string, open string) string {
		if t == "" {
			return open
		}
		return t
	}
	p("# Countersign evidence pack\n\n")
	p("This archive is a record of what AI agents asked to do through Countersign, who or what decided each\n")
	p("request, and what happened next, taken from Countersign's tamper-evident audit trail.\n\n")
	p("- Period: %s to %s (UTC)\n", period(timeText(opt.Since), "the first record"), period(timeText(opt.Until), "the time the pack was made"))
	if opt.Tool != "" || opt.Actor != "" {
		p("- Narrowed to: tool %q, agent %q (the summary and the call histories only; the audit trail section is always whole)\n",
			opt.Tool, opt.Actor)
	}
	p("- Made: %s, from database %s\n", audit.FormatTime(opt.Now), h.Database)
	p("- Audit trail section: entries %d to %d (%d entries), each bound by a signed checkpoint at both ends\n", res.Chain.FromSeq, res.Chain.ToSeq, res.Chain.Count)
	p("- Signed with the audit key %s (fingerprint %s)\n\n", opt.Signer.KID(), Fingerprint(opt.Signer.PublicKey()))

	p("## What it relates to\n\n")
	p("The records here relate to the EU AI Act's Article 12 (automatic recording of events over a system's\n")
	p("life) and Article 14 (human oversight: who decided, what they were shown, and the ability to intervene\n")
	p("and stop, such as denials, counter-proposals, revocations and freezes). The pack is evidence for such an\n")
	p("assessment; it does not by itself show compliance with either article.\n\n")

	s := res.Summary
	p("## Summary\n\n")
	p("| what | count |\n| --- | --- |\n")
	rows := []struct {
		what string
		n    int
	}{
		{"Calls proposed by agents", s.Calls},
		{"Approvals given by a person who was shown the call", s.ApprovedByPerson},
		{"Approvals given by automation: a rule", s.ApprovedByRule},
		{"Approvals given by automation: an allowance a person gave earlier", s.ApprovedByAllow},
		{"Approvals given without a record of what was shown (a command or the operator API)", s.ApprovedUnattest},
		{"Calls denied", s.Denied},
		{"Calls answered with a counter-proposal", s.Countered},
		{"Approvals revoked before use", s.Revoked},
		{"Calls that expired undecided", s.Expired},
		{"Calls run (grant redeemed)", s.Redeemed},
		{"Attempts to run refused", s.RedemptionRefused},
		{"Freezes (stops) put in place", s.Frozen},
		{"Freezes lifted", s.Unfrozen},
		{"Calls whose outcome is still unresolved", s.Unresolved},
	}
	for _, r := range rows {
		p("| %s | %d |\n", r.what, r.n)
	}
	p("\nAn approval given by a person counts once per person: a call that needs two approvers has two.\n")
	p("The same counts are in `summary.json`.\n\n")

	p("## How to check this pack\n\n")
	p("Check it with a verifier from **your own copy of Countersign**, not with the copies in `verify/`: anyone\n")
	p("who could alter this pack could alter those too. You also need the audit key's fingerprint from a\n")
	p("source you trust (the console's operators, a checkpoint you kept, a published value), not from this pack:\n\n")
	p("```sh\n")
	p("console audit verify pack.tar --audit-key-fingerprint FINGERPRINT\n")
	p("python3 scripts/verify_evidence_pack.py pack.tar --audit-key-fingerprint FINGERPRINT\n")
	p("```\n\n")
	p("Either checks the signed manifest and every file's SHA-256, every link of the audit trail, every signed\n")
	p("checkpoint, every passkey signature, and that every call that ran had the exact content that was\n")
	p("approved. A pack signed by a key you did not name is refused (\"signed by a key nothing you gave trusts\").\n")
	p("The Python verifier needs Python 3 and its `cryptography` package (Debian: python3-cryptography); without\n")
	p("it, it exits 3 and says SIGNATURES NOT CHECKED.\n\n")

	p("## Files\n\n")
	p("| file | what it holds |\n| --- | --- |\n")
	p("| `MANIFEST.json`, `MANIFEST.sig` | the SHA-256 of every other file, signed with the audit key |\n")
	p("| `chain.jsonl` | the audit trail section, in full, with its checkpoints (Countersign's export format) |\n")
	p("| `checkpoints.jsonl` | the signed checkpoints within the section |\n")
	p("| `keys/audit.json` | the audit key's public half and fingerprint (compare it with yours) |\n")
	p("| `keys/grant-jwks.json` | the public keys of the grants that let approved calls run |\n")
	p("| `keys/passkeys.jsonl` | the passkeys registered within the section |\n")
	p("| `passkey-evidence.jsonl` | what each passkey signed when a person approved with it |\n")
	p("| `lineage.jsonl` | each call's history: proposed, shown, decided, run, outcome |\n")
	p("| `summary.json` | the summary above |\n")
	p("| `verify/` | copies of the verifiers, to read; run your own |\n")
	return b.Bytes()
}

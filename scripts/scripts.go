// Package scripts carries the verifiers that Countersign copies into the
// evidence packs it makes, so that a reader of a pack can see what the
// checks are. An auditor runs the ones from their own copy.
package scripts

import _ "embed"

// EvidencePackVerifier is verify_evidence_pack.py.
//
//go:embed verify_evidence_pack.py
var EvidencePackVerifier []byte

// PasskeyEvidenceVerifier is verify_passkey_evidence.py, which the
// evidence pack verifier imports.
//
//go:embed verify_passkey_evidence.py
var PasskeyEvidenceVerifier []byte

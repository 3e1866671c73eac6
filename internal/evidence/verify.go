package evidence

import (
	"archive/tar"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/passkey"
)

// MaxPackBytes bounds what a verifier reads of a pack.
const MaxPackBytes = 4 << 30

// Trust is what the person verifying brings from outside the pack: the
// audit keys to trust, and checkpoints they kept. Nothing in the pack is
// trusted by itself.
type Trust struct {
	// PublicKeys are raw Ed25519 public keys, base64url without padding.
	PublicKeys []string
	// Fingerprints are lowercase hex SHA-256 of raw public keys.
	Fingerprints []string
	// Checkpoints kept outside: their keys are trusted, and each that
	// falls within the chain section must match it.
	Checkpoints []audit.Checkpoint
}

// trusts reports whether the key (base64url) is one t trusts.
func (t Trust) trusts(publicKey string) bool {
	fp := Fingerprint(publicKey)
	if fp == "" {
		return false
	}
	if slices.Contains(t.PublicKeys, publicKey) || slices.Contains(t.Fingerprints, fp) {
		return true
	}
	for _, c := range t.Checkpoints {
		if c.PublicKey == publicKey {
			return true
		}
	}
	return false
}

// Empty reports whether t trusts nothing.
func (t Trust) Empty() bool {
	return len(t.PublicKeys) == 0 && len(t.Fingerprints) == 0 && len(t.Checkpoints) == 0
}

// ErrUntrusted is a pack signed by a key the verifier was not given.
var ErrUntrusted = errors.New("signed by a key nothing you gave trusts")

// Damage is a pack that does not verify: the file (and the entry, for the
// chain) where the first problem was found, and what it is.
type Damage struct {
	File   string
	Seq    int64
	Reason string
}

func (d *Damage) Error() string {
	if d.Seq > 0 {
		return fmt.Sprintf("%s: entry %d: %s", d.File, d.Seq, d.Reason)
	}
	if d.File == "" {
		return d.Reason
	}
	return d.File + ": " + d.Reason
}

func damaged(file string, format string, args ...any) *Damage {
	return &Damage{File: file, Reason: fmt.Sprintf(format, args...)}
}

// Report is what a pack that verified holds.
type Report struct {
	Manifest    Manifest
	KID         string
	Files       int
	Checkpoints int
	// Passkeys counts approvals whose passkey signature verified.
	Passkeys int
	// Redeemed counts redemptions whose digest matched an approval's.
	Redeemed int
	Lineage  int
	// Notes say what could not be checked and why.
	Notes []string
}

// Verify checks a pack read from r against what trust brings: the
// manifest's signature and every file's SHA-256, the chain section (every
// link, its signed header, its checkpoints at both ends and the outside
// checkpoints), the passkey evidence of every approval, that every
// redeemed digest equals an approved digest of its call, and the
// lineage against the chain. The error is ErrUntrusted (wrapped) or a
// *Damage.
func Verify(r io.Reader, trust Trust) (Report, error) {
	var rep Report
	files, err := readTar(r)
	if err != nil {
		return rep, err
	}
	sigRaw, ok := files[FileSignature]
	if !ok {
		return rep, damaged(FileSignature, "missing: the pack is not signed")
	}
	manifestRaw, ok := files[FileManifest]
	if !ok {
		return rep, damaged(FileManifest, "missing")
	}
	var sig Signature
	if err := strict(sigRaw, &sig); err != nil {
		return rep, damaged(FileSignature, "does not read: %v", err)
	}
	pub, err := base64.RawURLEncoding.DecodeString(sig.PublicKey)
	if err != nil || len(pub) != ed25519.PublicKeySize || audit.KeyID(pub) != sig.KID {
		return rep, damaged(FileSignature, "its public key is not an Ed25519 key named by its kid")
	}
	if !trust.trusts(sig.PublicKey) {
		return rep, fmt.Errorf("%w: the manifest is signed by audit key %s (fingerprint %s)", ErrUntrusted, sig.KID, Fingerprint(sig.PublicKey))
	}
	rawSig, err := base64.RawURLEncoding.DecodeString(sig.Signature)
	if err != nil || !ed25519.Verify(pub, append([]byte(ManifestPrefix), manifestRaw...), rawSig) {
		return rep, damaged(FileManifest, "its signature does not verify (the manifest was altered or swapped)")
	}
	rep.KID = sig.KID
	if err := strict(manifestRaw, &rep.Manifest); err != nil {
		return rep, damaged(FileManifest, "does not read: %v", err)
	}
	m := rep.Manifest
	if m.Format != Format {
		return rep, damaged(FileManifest, "format %q, want %q", m.Format, Format)
	}
	listed := map[string]bool{}
	for _, f := range m.Files {
		b, ok := files[f.Name]
		if !ok {
			return rep, damaged(f.Name, "listed in the manifest but not in the pack")
		}
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != f.SHA256 || int64(len(b)) != f.Size {
			return rep, damaged(f.Name, "its SHA-256 differs from the manifest's (the file was altered)")
		}
		listed[f.Name] = true
	}
	for name := range files {
		if !listed[name] && name != FileManifest && name != FileSignature {
			return rep, damaged(name, "in the pack but not in the manifest (a file was added)")
		}
	}
	rep.Files = len(m.Files)

	var ak AuditKey
	if err := strict(files[FileAuditKey], &ak); err != nil || ak.PublicKey != sig.PublicKey {
		return rep, damaged(FileAuditKey, "does not name the key that signed the manifest")
	}
	if err := verifyChain(files, trust, sig.PublicKey, &rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// verifyChain checks the chain section and what is derived from it.
func verifyChain(files map[string][]byte, trust Trust, key string, rep *Report) error {
	raw := files[FileChain]
	pk := passkey.NewTrailChecker()
	approved := map[string][]string{}
	check := func(e *audit.Entry) error {
		if err := pk.Check(e); err != nil {
			return err
		}
		switch e.Kind {
		case audit.KindApproved:
			var d decision
			if err := details(e, &d); err != nil {
				return err
			}
			approved[e.CallID] = append(approved[e.CallID], d.Digest)
		case audit.KindRedeemed:
			var d decision
			if err := details(e, &d); err != nil {
				return err
			}
			if len(approved[e.CallID]) == 0 {
				return errors.New("the call was redeemed, but no approval of it is in the chain section")
			}
			if !slices.Contains(approved[e.CallID], d.Digest) {
				return fmt.Errorf("the redeemed digest %s is not a digest any approval of the call approved", d.Digest)
			}
			rep.Redeemed++
		}
		return nil
	}
	c, err := readChain(raw)
	if err != nil {
		return damaged(FileChain, "%v", err)
	}
	// Kept checkpoints after the section are for later periods (their
	// signatures are checked below); those up to its end must match it.
	opts := audit.VerifyOptions{TrustedKeys: []string{key}, Check: check}
	// Checkpoints signed by another key the reader trusts (another
	// replica's, listed in the cluster's trust file) are trusted too, as
	// the Python verifier trusts them.
	for _, cp := range c.checkpoints {
		if trust.trusts(cp.PublicKey) && !slices.Contains(opts.TrustedKeys, cp.PublicKey) {
			opts.TrustedKeys = append(opts.TrustedKeys, cp.PublicKey)
		}
	}
	var later []audit.Checkpoint
	for _, kc := range trust.Checkpoints {
		if !slices.Contains(opts.TrustedKeys, kc.PublicKey) {
			opts.TrustedKeys = append(opts.TrustedKeys, kc.PublicKey)
		}
		if kc.Seq > c.header.ToSeq {
			later = append(later, kc)
		} else {
			opts.Checkpoints = append(opts.Checkpoints, kc)
		}
	}
	r, err := audit.VerifyExport(bytes.NewReader(raw), opts)
	if err != nil {
		var be *audit.BreakError
		if errors.As(err, &be) {
			return &Damage{File: FileChain, Seq: be.Seq, Reason: be.Reason}
		}
		return damaged(FileChain, "%s", audit.ReasonOf(err))
	}
	if r.Header == nil || !r.Header.Signed() {
		return damaged(FileChain, "its header is not signed")
	}
	h := c.header
	m := rep.Manifest
	if (ChainRange{FromSeq: h.FromSeq, ToSeq: h.ToSeq, Count: h.Count, Head: h.Head}) != m.Chain {
		return damaged(FileManifest, "its chain range differs from the chain's header")
	}
	if h.Count == 0 {
		return damaged(FileChain, "holds no entry")
	}
	at := map[int64]bool{}
	for _, cp := range c.checkpoints {
		at[cp.Seq] = true
		if cp.Seq == h.FromSeq-1 && cp.Head == h.PrevHash {
			// The oldest entry kept after a prune: the checkpoint at the
			// last entry removed vouches for its prev_hash.
			at[h.FromSeq] = true
		}
	}
	if h.FromSeq != 1 && !at[h.FromSeq] {
		return &Damage{File: FileChain, Seq: h.FromSeq, Reason: "the section does not start at a signed checkpoint (or at entry 1)"}
	}
	if !at[h.ToSeq] {
		return &Damage{File: FileChain, Seq: h.ToSeq, Reason: "the section does not end at a signed checkpoint (entries were cut from its end)"}
	}
	rep.Checkpoints = len(c.checkpoints)
	// A checkpoint kept outside, signed before the period's end, covers
	// entries of the period: the section must reach it.
	for _, kept := range later {
		if err := kept.Verify(); err != nil {
			return damaged("--checkpoint", "the checkpoint at entry %d: %s", kept.Seq, audit.ReasonOf(err))
		}
		if m.Until != "" && kept.Time < m.Until {
			return &Damage{File: FileChain, Seq: h.ToSeq + 1, Reason: fmt.Sprintf("the section ends at entry %d, but the checkpoint you kept at entry %d was signed at %s, within the period: entries were cut from its end",
				h.ToSeq, kept.Seq, kept.Time)}
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("the checkpoint you gave at entry %d was signed after the period and was not compared", kept.Seq))
	}
	for _, seq := range r.Uncovered {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the checkpoint you gave at entry %d falls outside the section and was not compared", seq))
	}

	var cps bytes.Buffer
	for _, cp := range c.checkpoints {
		line, err := audit.AppendCheckpointLine(nil, cp)
		if err != nil {
			return err
		}
		cps.Write(line)
	}
	if !bytes.Equal(cps.Bytes(), files[FileCheckpoints]) {
		return damaged(FileCheckpoints, "differs from the checkpoints in the chain")
	}
	keys, ev, err := passkeyFiles(c.entries)
	if err != nil {
		return damaged(FileChain, "%v", err)
	}
	if !bytes.Equal(keys, files[FilePasskeys]) {
		return damaged(FilePasskeys, "differs from the passkey registrations in the chain")
	}
	if !bytes.Equal(ev, files[FileEvidence]) {
		return damaged(FileEvidence, "differs from the passkey evidence the chain's approvals hold")
	}
	rep.Passkeys = pk.Verified
	for _, seq := range pk.Unregistered {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the passkey that signed entry %d was registered before the section: its signature verified, its key was not compared with its registration", seq))
	}
	n, err := checkLineage(files[FileLineage], c.entries)
	if err != nil {
		return err
	}
	rep.Lineage = n
	return nil
}

// checkLineage compares each call's lineage with the chain: the proposed
// digest with its submitted entry's, the redeemed digest with its
// redeemed entry's, each approval's digest with the chain's approvals.
func checkLineage(raw []byte, entries []*audit.Entry) (int, error) {
	submitted, redeemed, approved := map[string]string{}, map[string]string{}, map[string][]string{}
	for _, e := range entries {
		var d decision
		switch e.Kind {
		case audit.KindSubmitted, audit.KindRedeemed, audit.KindApproved:
			if err := details(e, &d); err != nil {
				return 0, damaged(FileChain, "%v", err)
			}
		default:
			continue
		}
		switch e.Kind {
		case audit.KindSubmitted:
			submitted[e.CallID] = d.Digest
		case audit.KindRedeemed:
			redeemed[e.CallID] = d.Digest
		case audit.KindApproved:
			approved[e.CallID] = append(approved[e.CallID], d.Digest)
		}
	}
	n := 0
	for i, line := range bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var l struct {
			CallID  string `json:"call_id"`
			Digest  string `json:"digest"`
			Lineage struct {
				Proposed struct {
					Digest string `json:"digest"`
				} `json:"proposed"`
				Decided []struct {
					Digest  string `json:"digest"`
					Verdict string `json:"verdict"`
				} `json:"decided"`
				Redeemed *struct {
					Digest string `json:"digest"`
				} `json:"redeemed"`
			} `json:"lineage"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			return 0, damaged(FileLineage, "line %d does not read: %v", i+1, err)
		}
		bad := func(what string) error {
			return damaged(FileLineage, "line %d (call %s): %s differs from the chain", i+1, l.CallID, what)
		}
		if d, ok := submitted[l.CallID]; ok && (d != l.Lineage.Proposed.Digest || d != l.Digest) {
			return 0, bad("the proposed digest")
		}
		if d, ok := redeemed[l.CallID]; ok && (l.Lineage.Redeemed == nil || l.Lineage.Redeemed.Digest != d) {
			return 0, bad("the redeemed digest")
		}
		if as, ok := approved[l.CallID]; ok {
			for _, dec := range l.Lineage.Decided {
				if dec.Verdict == "approved" && !slices.Contains(as, dec.Digest) {
					return 0, bad("an approval's digest")
				}
			}
		}
		n++
	}
	return n, nil
}

// strict decodes JSON into v, refusing unknown members.
func strict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// readTar reads a pack's files: regular files with clean relative names,
// each once.
func readTar(r io.Reader) (map[string][]byte, error) {
	files := map[string][]byte{}
	tr := tar.NewReader(io.LimitReader(r, MaxPackBytes))
	total := int64(0)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, damaged("", "the pack is not a readable tar archive: %v", err)
		}
		if h.Typeflag != tar.TypeReg {
			return nil, damaged(h.Name, "not a regular file")
		}
		if h.Name != path.Clean(h.Name) || path.IsAbs(h.Name) || strings.HasPrefix(h.Name, "../") || h.Name == ".." {
			return nil, damaged(h.Name, "not a plain relative file name")
		}
		if _, dup := files[h.Name]; dup {
			return nil, damaged(h.Name, "in the pack twice")
		}
		total += h.Size
		if total > MaxPackBytes {
			return nil, damaged("", "the pack is larger than %d bytes", int64(MaxPackBytes))
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, damaged(h.Name, "does not read: %v", err)
		}
		files[h.Name] = b
	}
	return files, nil
}

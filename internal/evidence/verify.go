package evidence

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
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

// MaxManifestBytes bounds MANIFEST.json, MANIFEST.sig and the other small
// files a verifier reads whole (keys/audit.json).
const MaxManifestBytes = 16 << 20

// Verify checks a pack of size bytes read from r against what trust
// brings: the manifest's signature and every file's SHA-256, the chain
// section (every link, its signed header, its checkpoints at both ends and
// the outside checkpoints), the passkey evidence of every approval, that
// every redeemed digest equals an approved digest of its call, and the
// lineage against the chain. The error is ErrUntrusted (wrapped) or a
// *Damage.
//
// It streams: each file is read in pieces, the chain and the lineage side
// by side, and what it holds is bounded by the calls still open at a point
// of the chain (see chainCheck), not by the length of the chain.
func Verify(r io.ReaderAt, size int64, trust Trust) (Report, error) {
	var rep Report
	files, err := indexTar(r, size)
	if err != nil {
		return rep, err
	}
	if _, ok := files[FileSignature]; !ok {
		return rep, damaged(FileSignature, "missing: the pack is not signed")
	}
	if _, ok := files[FileManifest]; !ok {
		return rep, damaged(FileManifest, "missing")
	}
	sigRaw, err := readSmall(files, FileSignature)
	if err != nil {
		return rep, err
	}
	manifestRaw, err := readSmall(files, FileManifest)
	if err != nil {
		return rep, err
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
	sums := map[string]string{}
	for _, f := range m.Files {
		sr, ok := files[f.Name]
		if !ok {
			return rep, damaged(f.Name, "listed in the manifest but not in the pack")
		}
		h := sha256.New()
		n, err := io.Copy(h, io.NewSectionReader(sr, 0, sr.Size()))
		if err != nil {
			return rep, damaged(f.Name, "does not read: %v", err)
		}
		sum := hex.EncodeToString(h.Sum(nil))
		if sum != f.SHA256 || n != f.Size {
			return rep, damaged(f.Name, "its SHA-256 differs from the manifest's (the file was altered)")
		}
		sums[f.Name] = sum
	}
	for name := range files {
		if _, listed := sums[name]; !listed && name != FileManifest && name != FileSignature {
			return rep, damaged(name, "in the pack but not in the manifest (a file was added)")
		}
	}
	rep.Files = len(m.Files)

	var ak AuditKey
	akRaw, err := readSmall(files, FileAuditKey)
	if err != nil {
		return rep, err
	}
	if err := strict(akRaw, &ak); err != nil || ak.PublicKey != sig.PublicKey {
		return rep, damaged(FileAuditKey, "does not name the key that signed the manifest")
	}
	if err := verifyChain(files, sums, trust, sig.PublicKey, &rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// open returns a reader of the pack's file name from its start (an empty
// one when the pack has none).
func open(files map[string]*io.SectionReader, name string) io.Reader {
	sr, ok := files[name]
	if !ok {
		return bytes.NewReader(nil)
	}
	return bufio.NewReaderSize(io.NewSectionReader(sr, 0, sr.Size()), 1<<16)
}

// readSmall reads a small file of the pack whole ("" when the pack has
// none).
func readSmall(files map[string]*io.SectionReader, name string) ([]byte, error) {
	sr, ok := files[name]
	if !ok {
		return nil, nil
	}
	if sr.Size() > MaxManifestBytes {
		return nil, damaged(name, "larger than %d bytes", MaxManifestBytes)
	}
	b, err := io.ReadAll(io.NewSectionReader(sr, 0, sr.Size()))
	if err != nil {
		return nil, damaged(name, "does not read: %v", err)
	}
	return b, nil
}

// emptySum is the SHA-256 of no bytes: that of a file the pack lacks.
var emptySum = func() string { s := sha256.Sum256(nil); return hex.EncodeToString(s[:]) }()

// sumOf is the SHA-256 of the pack's file name, as checked against the
// manifest.
func sumOf(sums map[string]string, name string) string {
	if s, ok := sums[name]; ok {
		return s
	}
	return emptySum
}

// verifyChain checks the chain section and what is derived from it.
func verifyChain(files map[string]*io.SectionReader, sums map[string]string, trust Trust, key string, rep *Report) error {
	h, cpList, err := chainHead(open(files, FileChain))
	if err != nil {
		return damaged(FileChain, "%v", err)
	}
	cc := newChainCheck(open(files, FileLineage))
	// Kept checkpoints after the section are for later periods (their
	// signatures are checked below); those up to its end must match it.
	opts := audit.VerifyOptions{TrustedKeys: []string{key}, Check: cc.check}
	// Checkpoints signed by another key the reader trusts (another
	// replica's, listed in the cluster's trust file) are trusted too, as
	// the Python verifier trusts them.
	for _, cp := range cpList {
		if trust.trusts(cp.PublicKey) && !slices.Contains(opts.TrustedKeys, cp.PublicKey) {
			opts.TrustedKeys = append(opts.TrustedKeys, cp.PublicKey)
		}
	}
	var later []audit.Checkpoint
	for _, kc := range trust.Checkpoints {
		if !slices.Contains(opts.TrustedKeys, kc.PublicKey) {
			opts.TrustedKeys = append(opts.TrustedKeys, kc.PublicKey)
		}
		if kc.Seq > h.ToSeq {
			later = append(later, kc)
		} else {
			opts.Checkpoints = append(opts.Checkpoints, kc)
		}
	}
	r, err := audit.VerifyExport(open(files, FileChain), opts)
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
	m := rep.Manifest
	if (ChainRange{FromSeq: h.FromSeq, ToSeq: h.ToSeq, Count: h.Count, Head: h.Head}) != m.Chain {
		return damaged(FileManifest, "its chain range differs from the chain's header")
	}
	if h.Count == 0 {
		return damaged(FileChain, "holds no entry")
	}
	at := map[int64]bool{}
	for _, cp := range cpList {
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
	rep.Checkpoints = len(cpList)
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

	cps := sha256.New()
	for _, cp := range cpList {
		line, err := audit.AppendCheckpointLine(nil, cp)
		if err != nil {
			return err
		}
		cps.Write(line)
	}
	if hex.EncodeToString(cps.Sum(nil)) != sumOf(sums, FileCheckpoints) {
		return damaged(FileCheckpoints, "differs from the checkpoints in the chain")
	}
	if cc.keysErr != nil || cc.keys.sum() != sumOf(sums, FilePasskeys) {
		return damaged(FilePasskeys, "differs from the passkey registrations in the chain")
	}
	if cc.evErr != nil || cc.ev.sum() != sumOf(sums, FileEvidence) {
		return damaged(FileEvidence, "differs from the passkey evidence the chain's approvals hold")
	}
	rep.Passkeys = cc.pk.Verified
	for _, seq := range cc.pk.Unregistered {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the passkey that signed entry %d was registered before the section: its signature verified, its key was not compared with its registration", seq))
	}
	rep.Redeemed = cc.redeemed
	n, err := cc.finish()
	if errors.Is(err, errOutOfOrder) {
		// A pack whose lineage is sorted by call id, as packs were once
		// written: checked with the chain's calls held in memory.
		n, err = checkLineageInMemory(open(files, FileLineage), open(files, FileChain))
	}
	if err != nil {
		return err
	}
	rep.Lineage = n
	return nil
}

// chainHead reads a chain's header and checkpoints, which come before its
// entries.
func chainHead(r io.Reader) (*audit.ExportHeader, []audit.Checkpoint, error) {
	var h *audit.ExportHeader
	var cps []audit.Checkpoint
	xr := audit.NewExportReader(r)
	for {
		rec, err := xr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read the chain: %w", err)
		}
		if rec.Header != nil {
			h = rec.Header
		} else if rec.Checkpoint != nil {
			cps = append(cps, *rec.Checkpoint)
		} else {
			break
		}
	}
	if h == nil {
		return nil, nil, errors.New("the chain has no header")
	}
	return h, cps, nil
}

// hashWriter is an io.Writer that keeps only the SHA-256 of what it is
// given: a file the verifier derives from the chain, compared by digest
// with the pack's.
type hashWriter struct{ h hash.Hash }

func (w hashWriter) Write(p []byte) (int, error) { return w.h.Write(p) }
func (w hashWriter) sum() string                 { return hex.EncodeToString(w.h.Sum(nil)) }

// The kinds after which a call can be neither approved nor redeemed: its
// status is final (a revoked grant is never redeemed).
var finalKinds = map[string]bool{audit.KindDenied: true, audit.KindExpired: true, audit.KindCancelled: true,
	audit.KindRedeemed: true, audit.KindCountered: true, audit.KindRevoked: true}

// chainCheck is what a verifier checks entry by entry as the chain goes
// by: the passkey trail, that each redeemed digest was approved, the
// passkey files' lines, and each call's lineage line, read side by side
// with the chain (lineage.jsonl is in the order of the calls' first
// entries in the section). It holds, per call still open at that point of
// the chain, the digests its approvals approved and its lineage line; a
// call's state goes when its status is final.
type chainCheck struct {
	pk              *passkey.TrailChecker
	keys, ev        hashWriter
	keysErr, evErr  error
	calls           map[string]*callState
	lineage         *bufio.Reader
	next            *lineageClaim
	nextErr         error
	lineNo, checked int
	redeemed        int
	lineageErr      error
}

// callState is what a verifier holds of a call still open.
type callState struct {
	approved []string
	claim    *lineageClaim
}

// lineageClaim is one line of lineage.jsonl: what it says of its call.
type lineageClaim struct {
	line    int
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

func newChainCheck(lineage io.Reader) *chainCheck {
	c := &chainCheck{pk: passkey.NewTrailChecker(), keys: hashWriter{sha256.New()}, ev: hashWriter{sha256.New()},
		calls: map[string]*callState{}, lineage: bufio.NewReaderSize(lineage, 1<<16)}
	c.advance()
	return c
}

// advance reads the next lineage line (nil at the end).
func (c *chainCheck) advance() {
	c.next = nil
	for c.nextErr == nil {
		line, err := c.lineage.ReadBytes('\n')
		if len(line) == 0 && errors.Is(err, io.EOF) {
			return
		}
		c.lineNo++
		if err != nil && !errors.Is(err, io.EOF) {
			c.nextErr = damaged(FileLineage, "line %d does not read: %v", c.lineNo, err)
			return
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		if len(line) == 0 {
			continue
		}
		l := &lineageClaim{line: c.lineNo}
		if err := json.Unmarshal(line, l); err != nil {
			c.nextErr = damaged(FileLineage, "line %d does not read: %v", c.lineNo, err)
			return
		}
		c.next = l
		return
	}
}

// bad records the first lineage line that differs from the chain; it is
// reported after everything the chain itself says.
func (c *chainCheck) bad(l *lineageClaim, what string) {
	if c.lineageErr == nil {
		c.lineageErr = damaged(FileLineage, "line %d (call %s): %s differs from the chain", l.line, l.CallID, what)
	}
}

// check takes one entry whose hash verified.
func (c *chainCheck) check(e *audit.Entry) error {
	if err := c.pk.Check(e); err != nil {
		return err
	}
	if c.keysErr == nil && c.evErr == nil {
		if err := passkeyLines(e, c.keys, c.ev); err != nil {
			c.keysErr, c.evErr = err, err
		}
	}
	if e.CallID == "" {
		return nil
	}
	st := c.calls[e.CallID]
	if c.next != nil && c.next.CallID == e.CallID && (st == nil || st.claim == nil) {
		if st == nil {
			st = &callState{}
			c.calls[strings.Clone(e.CallID)] = st
		}
		st.claim = c.next
		c.checked++
		c.advance()
	}
	var d decision
	switch e.Kind {
	case audit.KindSubmitted, audit.KindApproved, audit.KindRedeemed:
		if err := details(e, &d); err != nil {
			return err
		}
	}
	switch e.Kind {
	case audit.KindSubmitted:
		if st != nil && st.claim != nil && (st.claim.Lineage.Proposed.Digest != d.Digest || st.claim.Digest != d.Digest) {
			c.bad(st.claim, "the proposed digest")
		}
	case audit.KindApproved:
		if st == nil {
			st = &callState{}
			c.calls[strings.Clone(e.CallID)] = st
		}
		st.approved = append(st.approved, d.Digest)
	case audit.KindRedeemed:
		if st == nil || len(st.approved) == 0 {
			return errors.New("the call was redeemed, but no approval of it is in the chain section")
		}
		if !slices.Contains(st.approved, d.Digest) {
			return fmt.Errorf("the redeemed digest %s is not a digest any approval of the call approved", d.Digest)
		}
		c.redeemed++
		if st.claim != nil && (st.claim.Lineage.Redeemed == nil || st.claim.Lineage.Redeemed.Digest != d.Digest) {
			c.bad(st.claim, "the redeemed digest")
		}
	}
	if st != nil && finalKinds[e.Kind] {
		c.settle(st)
		delete(c.calls, e.CallID)
	}
	return nil
}

// settle checks a call's lineage line against every approval of it the
// chain holds.
func (c *chainCheck) settle(st *callState) {
	if st.claim == nil || len(st.approved) == 0 {
		return
	}
	for _, dec := range st.claim.Lineage.Decided {
		if dec.Verdict == "approved" && !slices.Contains(st.approved, dec.Digest) {
			c.bad(st.claim, "an approval's digest")
			return
		}
	}
}

// finish settles the calls still open at the end of the chain and
// returns how many lineage lines agreed with it.
func (c *chainCheck) finish() (int, error) {
	for _, st := range c.calls {
		c.settle(st)
	}
	if c.lineageErr != nil {
		return 0, c.lineageErr
	}
	if c.nextErr != nil {
		return 0, c.nextErr
	}
	if c.next != nil {
		return 0, errOutOfOrder
	}
	return c.checked, nil
}

// errOutOfOrder is a lineage file whose lines do not follow the chain: a
// pack whose lineage is in the order of the call ids.
var errOutOfOrder = errors.New("the lineage does not follow the chain")

// checkLineageInMemory compares each call's lineage with the chain when
// the lineage does not follow the chain's order: what the chain says of
// every call is held in memory. The proposed digest must equal its
// submitted entry's, the redeemed digest its redeemed entry's, each
// approval's digest one of the chain's approvals of the call.
func checkLineageInMemory(lineage, chain io.Reader) (int, error) {
	submitted, redeemed, approved := map[string]string{}, map[string]string{}, map[string][]string{}
	xr := audit.NewExportReader(chain)
	for {
		rec, err := xr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, damaged(FileChain, "%v", err)
		}
		e := rec.Entry
		if e == nil {
			continue
		}
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
	br := bufio.NewReaderSize(lineage, 1<<16)
	n := 0
	for i := 1; ; i++ {
		line, err := br.ReadBytes('\n')
		if len(line) == 0 && errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, damaged(FileLineage, "line %d does not read: %v", i, err)
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		if len(line) == 0 {
			continue
		}
		var l lineageClaim
		if err := json.Unmarshal(line, &l); err != nil {
			return 0, damaged(FileLineage, "line %d does not read: %v", i, err)
		}
		bad := func(what string) error {
			return damaged(FileLineage, "line %d (call %s): %s differs from the chain", i, l.CallID, what)
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

// indexTar finds a pack's files without reading them: regular files with
// clean relative names, each once, and where each one's bytes are.
func indexTar(r io.ReaderAt, size int64) (map[string]*io.SectionReader, error) {
	files := map[string]*io.SectionReader{}
	size = min(size, MaxPackBytes)
	sr := io.NewSectionReader(r, 0, size)
	tr := tar.NewReader(sr)
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
		// The reader stands at the file's first byte.
		at, err := sr.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, err
		}
		if at+h.Size > size {
			return nil, damaged(h.Name, "does not read: the pack ends inside it")
		}
		files[h.Name] = io.NewSectionReader(r, at, h.Size)
	}
	return files, nil
}

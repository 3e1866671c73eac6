// Package evidence makes and checks evidence packs: one tar archive that
// holds a complete, signed run of the audit chain with its checkpoints,
// the public keys needed to check it, the passkey evidence of the
// approvals in it, each call's lineage, a summary for people and a
// manifest of every file signed with the audit key (docs/evidence.md).
package evidence

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/queue"
)

// Format names the pack format, in MANIFEST.json.
const Format = "countersign-evidence-pack/v1"

// ManifestPrefix is the domain separation prefix of the manifest's
// signature: the signed message is the prefix followed by the bytes of
// MANIFEST.json exactly as the pack holds them.
const ManifestPrefix = audit.EvidenceManifestPrefix

// The files of a pack.
const (
	FileReadme      = "README.md"
	FileManifest    = "MANIFEST.json"
	FileSignature   = "MANIFEST.sig"
	FileChain       = "chain.jsonl"
	FileCheckpoints = "checkpoints.jsonl"
	FileAuditKey    = "keys/audit.json"
	FileGrantKeys   = "keys/grant-jwks.json"
	FilePasskeys    = "keys/passkeys.jsonl"
	FileEvidence    = "passkey-evidence.jsonl"
	FileLineage     = "lineage.jsonl"
	FileSummary     = "summary.json"
	// VerifierDir holds copies of the verifiers, for reading: an auditor
	// runs the ones from their own copy of Countersign.
	VerifierDir = "verify/"
)

// Source is what a pack is made from: the store's audit trail and calls.
type Source interface {
	ExportAudit(ctx context.Context, w io.Writer, opt audit.ExportOptions) (audit.ExportResult, error)
	Checkpoint(ctx context.Context, signer *audit.Signer) (audit.Checkpoint, error)
	Timeline(ctx context.Context, callID string) ([]audit.Entry, error)
	Call(ctx context.Context, id string) (*queue.Call, error)
}

// Options say what a pack covers and what it brings.
type Options struct {
	// Since and Until bound the time the pack is about (entries at or
	// after Since, before Until; zero leaves that end open). The chain
	// section is widened to the checkpoints around them.
	Since, Until time.Time
	// FromSeq and ToSeq, when ToSeq is above 0, ask for the entries from
	// FromSeq (or the oldest kept) to ToSeq instead of a time range: the
	// archive of a prune.
	FromSeq, ToSeq int64
	// Tool and Actor, when set, narrow the lineage and the summary; the
	// chain section is always whole.
	Tool, Actor string
	// Signer is the audit key: it signs the manifest, the chain's header
	// and, when none covers the range's end, a checkpoint made now.
	Signer *audit.Signer
	// GrantKeys is the JWKS of the grant keys' public halves.
	GrantKeys []byte
	// Verifiers are copies of the verifiers to include, by file name.
	Verifiers map[string][]byte
	// Now is the time the pack is made.
	Now time.Time
	// TempDir is where the pack's large files are written before the
	// archive is assembled ("" is the system's temporary directory).
	TempDir string
	// RecentCalls is how many calls a pass over the chain remembers (0 is
	// DefaultRecentCalls); it asks the store again for a call it forgot.
	RecentCalls int
	// MaxBytes bounds the archive (0 is MaxPackBytes, what a verifier
	// reads): a pack that would be larger is refused before a byte of it
	// is written, rather than written and then refused by every verifier.
	MaxBytes int64
}

// ErrEmpty is a pack asked for a time range that holds no entry.
var ErrEmpty = errors.New("evidence: no audit entry in that time range")

// ErrTooLarge is a pack larger than a verifier reads (Options.MaxBytes).
var ErrTooLarge = errors.New("evidence: the pack would be larger than a verifier reads")

// Manifest is MANIFEST.json: what the pack is about and the SHA-256 of
// every other file but MANIFEST.sig.
type Manifest struct {
	Format    string `json:"format"`
	Database  string `json:"database"`
	CreatedAt string `json:"created_at"`
	Since     string `json:"since"`
	Until     string `json:"until"`
	Tool      string `json:"tool"`
	Actor     string `json:"actor"`
	// Chain is the chain section's range and head, as its header says.
	Chain ChainRange `json:"chain"`
	Files []FileSum  `json:"files"`
}

// ChainRange is the run of entries a pack's chain holds.
type ChainRange struct {
	FromSeq int64  `json:"from_seq"`
	ToSeq   int64  `json:"to_seq"`
	Count   int64  `json:"count"`
	Head    string `json:"head"`
}

// FileSum is one file of the pack and its SHA-256.
type FileSum struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// Signature is MANIFEST.sig: the audit key and its signature of the
// manifest's bytes (ManifestPrefix || MANIFEST.json).
type Signature struct {
	KID       string `json:"kid"`
	PublicKey string `json:"public_key"`
	Signature string `json:"signature"`
}

// Result says what a pack holds.
type Result struct {
	Chain    ChainRange
	Calls    int
	Summary  Summary
	Manifest Manifest
	// Signed is the checkpoint made for the pack, when none covered the
	// end of the range (zero otherwise).
	Signed audit.Checkpoint
}

// Write makes a pack from src and writes it to w as a tar archive. It
// streams: the chain is exported to a temporary file in opt.TempDir, read
// back entry by entry to write the other large files (each to its own
// temporary file, its SHA-256 computed as it is written), then the archive
// is assembled, manifest first. What it holds in memory is bounded (see
// RecentCalls), whatever the length of the range.
func Write(ctx context.Context, w io.Writer, src Source, opt Options) (Result, error) {
	var res Result
	if opt.Signer == nil {
		return res, errors.New("evidence: a pack is signed with the audit key, and none was given")
	}
	dir, err := os.MkdirTemp(opt.TempDir, ".countersign-pack-*")
	if err != nil {
		return res, fmt.Errorf("evidence: a directory for the pack's files: %w", err)
	}
	defer os.RemoveAll(dir)
	spools := map[string]*spool{}
	for _, name := range []string{FileChain, FileCheckpoints, FilePasskeys, FileEvidence, FileLineage} {
		sp, err := newSpool(dir, name)
		if err != nil {
			return res, err
		}
		defer sp.close()
		spools[name] = sp
	}
	var s *section
	for fromSeq := int64(0); ; {
		if err := exportChain(ctx, src, opt, fromSeq, spools[FileChain], &res); err != nil {
			return res, err
		}
		for _, name := range []string{FileCheckpoints, FilePasskeys, FileEvidence, FileLineage} {
			if err := spools[name].reset(); err != nil {
				return res, err
			}
		}
		chain, err := spools[FileChain].reader()
		if err != nil {
			return res, err
		}
		s, err = readSection(ctx, src, opt, chain, spools[FileCheckpoints], spools[FilePasskeys], spools[FileEvidence], spools[FileLineage])
		if err != nil {
			return res, err
		}
		if s.header.Count == 0 {
			return res, ErrEmpty
		}
		// A call redeemed in the range whose approvals precede the chain
		// section: start the section at its first entry, so that every
		// redeemed digest can be compared with an approved one.
		if fromSeq == 0 && s.first > 0 && s.first < s.header.FromSeq {
			fromSeq = s.first
			continue
		}
		break
	}
	h := s.header
	res.Chain = ChainRange{FromSeq: h.FromSeq, ToSeq: h.ToSeq, Count: h.Count, Head: h.Head}
	res.Summary, res.Calls = s.summary, s.lineageCalls

	files := map[string][]byte{}
	if files[FileAuditKey], err = jsonFile(AuditKey{KID: opt.Signer.KID(), PublicKey: opt.Signer.PublicKey(), Fingerprint: Fingerprint(opt.Signer.PublicKey())}); err != nil {
		return res, err
	}
	files[FileGrantKeys] = opt.GrantKeys
	if files[FileSummary], err = jsonFile(res.Summary); err != nil {
		return res, err
	}
	for name, b := range opt.Verifiers {
		files[VerifierDir+name] = b
	}
	files[FileReadme] = readme(res, h, opt)

	m := Manifest{Format: Format, Database: h.Database, CreatedAt: audit.FormatTime(opt.Now), Since: timeText(opt.Since),
		Until: timeText(opt.Until), Tool: opt.Tool, Actor: opt.Actor, Chain: res.Chain}
	for name, b := range files {
		sum := sha256.Sum256(b)
		m.Files = append(m.Files, FileSum{Name: name, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(b))})
	}
	for name, sp := range spools {
		m.Files = append(m.Files, FileSum{Name: name, SHA256: sp.sum(), Size: sp.n})
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Name < m.Files[j].Name })
	res.Manifest = m
	manifest, err := jsonFile(m)
	if err != nil {
		return res, err
	}
	sig, err := jsonFile(Sign(opt.Signer, manifest))
	if err != nil {
		return res, err
	}
	files[FileManifest], files[FileSignature] = manifest, sig
	limit := opt.MaxBytes
	if limit <= 0 {
		limit = MaxPackBytes
	}
	if size := tarSize(files, spools); size > limit {
		return res, fmt.Errorf("%w: %d bytes, more than %d: make packs of shorter time ranges (--since, --until)", ErrTooLarge, size, limit)
	}
	return res, writeTar(w, files, spools, opt.Now)
}

// tarSize is at least the size writeTar gives files and spools: each
// member's content rounded up to tar's 512-byte blocks, with its header
// and a PAX record (counted as three blocks; the names are short), and
// the two blocks that end the archive.
func tarSize(files map[string][]byte, spools map[string]*spool) int64 {
	member := func(n int64) int64 { return 3*512 + (n+511)/512*512 }
	size := int64(2 * 512)
	for _, b := range files {
		size += member(int64(len(b)))
	}
	for _, sp := range spools {
		size += member(sp.n)
	}
	return size
}

// Sign signs a manifest's bytes with the audit key.
func Sign(s *audit.Signer, manifest []byte) Signature {
	return Signature{KID: s.KID(), PublicKey: s.PublicKey(), Signature: s.SignEvidenceManifest(manifest)}
}

// AuditKey is keys/audit.json: the public half of the audit key.
type AuditKey struct {
	KID       string `json:"kid"`
	PublicKey string `json:"public_key"`
	// Fingerprint is the lowercase hex SHA-256 of the raw public key,
	// the form --audit-key-fingerprint takes.
	Fingerprint string `json:"fingerprint"`
}

// Fingerprint is the lowercase hex SHA-256 of a raw Ed25519 public key
// given as base64url; "" when it is not one.
func Fingerprint(publicKey string) string {
	raw, err := base64.RawURLEncoding.DecodeString(publicKey)
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return ""
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return audit.FormatTime(t)
}

// jsonFile is v as canonical JSON with a final newline.
func jsonFile(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	x, err := canonical.ParseWith(b, canonical.Options{MaxBytes: len(b) + 1, MaxDepth: 64, Numbers: canonical.NumbersAnywhere()})
	if err != nil {
		return nil, fmt.Errorf("evidence: encode: %w", err)
	}
	out, err := canonical.Append(nil, x)
	if err != nil {
		return nil, fmt.Errorf("evidence: encode: %w", err)
	}
	return append(out, '\n'), nil
}

// writeTar writes files and spools as a tar archive: the README, the
// manifest and its signature first, then the rest by name.
func writeTar(w io.Writer, files map[string][]byte, spools map[string]*spool, now time.Time) error {
	names := make([]string, 0, len(files)+len(spools))
	for n := range files {
		names = append(names, n)
	}
	for n := range spools {
		names = append(names, n)
	}
	rank := map[string]int{FileReadme: 0, FileManifest: 1, FileSignature: 2}
	sort.Slice(names, func(i, j int) bool {
		ri, iok := rank[names[i]]
		rj, jok := rank[names[j]]
		switch {
		case iok && jok:
			return ri < rj
		case iok != jok:
			return iok
		}
		return names[i] < names[j]
	})
	tw := tar.NewWriter(w)
	for _, n := range names {
		var r io.Reader
		var size int64
		if sp, ok := spools[n]; ok {
			var err error
			if r, err = sp.reader(); err != nil {
				return err
			}
			size = sp.n
		} else {
			r, size = bytes.NewReader(files[n]), int64(len(files[n]))
		}
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: size, ModTime: now.UTC().Truncate(time.Second), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := io.Copy(tw, r); err != nil {
			return err
		}
	}
	return tw.Close()
}

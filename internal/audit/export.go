package audit

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/canonical"
)

// ExportFormat names the JSONL export format written by AppendEntryLine and
// friends and read by ExportReader.
//
// A JSONL export is UTF-8 text, one canonical (RFC 8785) JSON object per
// line, in this order:
//
//   - one header line {"export":{...}} (see ExportHeader), signed with the
//     audit key;
//   - one line {"checkpoint":{...}} per signed checkpoint whose seq falls
//     within the exported entries, oldest first;
//   - one line per entry, oldest first, holding every field exactly as
//     hashed plus the hash: {"call_id","channel","details","hash","kind",
//     "prev_hash","principal","seq","time"}.
//
// Because every line is canonical, changing any byte of an entry line is
// detected even where the change would not alter the parsed value.
const ExportFormat = "countersign-audit-export/v2"

// ExportFormatV1 is the earlier format, whose header carried no count and
// no signature. It is still read; its header proves nothing.
const ExportFormatV1 = "countersign-audit-export/v1"

// HeaderPrefix is the domain separation prefix of an export header's
// signature: the signed message is the prefix followed by the canonical
// bytes of the header object without its "signature" member.
const HeaderPrefix = "countersign/v1/export-header:"

// ExportHeader is the first line of a JSONL export. It states the range,
// the head and the count of what follows and is signed with the audit key,
// so a file whose tail and checkpoint lines were dropped cannot be given a
// header that matches what is left.
type ExportHeader struct {
	Format string `json:"format"`
	// Database is the random identity of the database exported.
	Database string `json:"database"`
	// FromSeq and ToSeq are the first and last entries exported (both 0
	// when the export is empty); Count is how many entries follow.
	FromSeq int64 `json:"from_seq"`
	ToSeq   int64 `json:"to_seq"`
	Count   int64 `json:"count"`
	// PrevHash is the hash of entry FromSeq-1 (the genesis hash when
	// FromSeq is 1): where a range export starts its chain.
	PrevHash string `json:"prev_hash"`
	// Head is the hash of entry ToSeq.
	Head string `json:"head"`
	// Since and Until repeat the time filter asked for, if any.
	Since      string `json:"since"`
	Until      string `json:"until"`
	ExportedAt string `json:"exported_at"`
	// KID, PublicKey and Signature are the audit key's id, its public key
	// and its signature of SignedMessage, as in a Checkpoint.
	KID       string `json:"kid"`
	PublicKey string `json:"public_key"`
	Signature string `json:"signature"`
}

func (h *ExportHeader) object() map[string]any {
	o := map[string]any{"format": h.Format, "database": h.Database, "from_seq": h.FromSeq, "to_seq": h.ToSeq,
		"prev_hash": h.PrevHash, "head": h.Head, "since": h.Since, "until": h.Until, "exported_at": h.ExportedAt}
	if h.Format != ExportFormatV1 {
		o["count"], o["kid"], o["public_key"], o["signature"] = h.Count, h.KID, h.PublicKey, h.Signature
	}
	return o
}

// Signed reports whether the header is of the signed format.
func (h *ExportHeader) Signed() bool { return h.Format == ExportFormat }

// SignedMessage returns the bytes the header's signature covers.
func (h *ExportHeader) SignedMessage() ([]byte, error) {
	o := h.object()
	delete(o, "signature")
	body, err := canonical.Encode(o)
	if err != nil {
		return nil, fmt.Errorf("audit: encode export header: %w", err)
	}
	return append([]byte(HeaderPrefix), body...), nil
}

// SignHeader sets the header's format, key and signature.
func (s *Signer) SignHeader(h *ExportHeader) error {
	h.Format, h.KID, h.PublicKey, h.Signature = ExportFormat, s.kid, s.PublicKey(), ""
	msg, err := h.SignedMessage()
	if err != nil {
		return err
	}
	h.Signature = base64.RawURLEncoding.EncodeToString(ed25519.Sign(s.priv, msg))
	return nil
}

// VerifySignature checks that a signed header's KID names its public key
// and that the signature is that key's over SignedMessage. It does not say
// whether the key is one to trust.
func (h *ExportHeader) VerifySignature() error {
	pub, err := base64.RawURLEncoding.DecodeString(h.PublicKey)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return fault("the export header's public_key is not a base64url Ed25519 public key")
	}
	if KeyID(pub) != h.KID {
		return fault("the export header's kid %q does not name its public key", h.KID)
	}
	sig, err := base64.RawURLEncoding.DecodeString(h.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fault("the export header's signature is not a base64url Ed25519 signature")
	}
	msg, err := h.SignedMessage()
	if err != nil {
		return err
	}
	if !ed25519.Verify(pub, msg, sig) {
		return fault("the export header's signature does not verify (the header was altered)")
	}
	return nil
}

// AppendHeaderLine appends the header line (with its newline) to dst.
func AppendHeaderLine(dst []byte, h *ExportHeader) ([]byte, error) {
	dst, err := canonical.Append(dst, map[string]any{"export": h.object()})
	if err != nil {
		return nil, fmt.Errorf("audit: encode export header: %w", err)
	}
	return append(dst, '\n'), nil
}

func (c Checkpoint) object() map[string]any {
	return map[string]any{"seq": c.Seq, "head": c.Head, "time": c.Time, "kid": c.KID,
		"public_key": c.PublicKey, "signature": c.Signature}
}

// AppendCheckpointLine appends a checkpoint line (with its newline) to dst.
func AppendCheckpointLine(dst []byte, c Checkpoint) ([]byte, error) {
	dst, err := canonical.Append(dst, map[string]any{"checkpoint": c.object()})
	if err != nil {
		return nil, fmt.Errorf("audit: encode checkpoint line: %w", err)
	}
	return append(dst, '\n'), nil
}

// AppendEntryLine appends an entry line (with its newline) to dst. When
// details is not nil it is the entry's details as stored (canonical JSON
// text) and is copied as it is; otherwise e.Details is encoded.
func AppendEntryLine(dst []byte, e *Entry, details []byte) ([]byte, error) {
	var err error
	if details == nil {
		if details, err = canonical.Encode(detailsValue(e.Details)); err != nil {
			return nil, fmt.Errorf("audit: encode entry %d: %w", e.Seq, err)
		}
	}
	if dst, err = e.appendObject(dst, details, true); err != nil {
		return nil, err
	}
	return append(dst, '\n'), nil
}

func detailsValue(v any) any {
	if v == nil {
		return canonical.Object{}
	}
	return v
}

// Record is one line of an export: exactly one field is set.
type Record struct {
	Header     *ExportHeader
	Checkpoint *Checkpoint
	Entry      *Entry
}

// MaxLineBytes bounds one line of an export.
const MaxLineBytes = MaxDetailsBytes + 64<<10

// ExportReader reads a JSONL export one line at a time.
type ExportReader struct {
	r    *bufio.Reader
	line int
}

// NewExportReader reads an export from r.
func NewExportReader(r io.Reader) *ExportReader {
	return &ExportReader{r: bufio.NewReaderSize(r, 1<<16)}
}

// Line returns the number of the line Next read last (1-based).
func (x *ExportReader) Line() int { return x.line }

// Next returns the next record, or io.EOF after the last line. A line that
// is not a canonical record is an error naming the line.
func (x *ExportReader) Next() (Record, error) {
	var buf []byte
	for {
		chunk, err := x.r.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > MaxLineBytes {
			x.line++
			return Record{}, fmt.Errorf("line %d is longer than %d bytes", x.line, MaxLineBytes)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			if len(buf) == 0 {
				return Record{}, io.EOF
			}
			x.line++
			return Record{}, fmt.Errorf("line %d does not end with a newline (the file was cut short)", x.line)
		}
		if err != nil {
			return Record{}, err
		}
		break
	}
	x.line++
	rec, err := ParseLine(buf[:len(buf)-1])
	if err != nil {
		return Record{}, fmt.Errorf("line %d: %w", x.line, err)
	}
	return rec, nil
}

// ParseLine reads one export line (without its newline). An entry's
// Details are returned as RawDetails, the canonical text of the line.
func ParseLine(line []byte) (Record, error) {
	v, err := canonical.ParseWith(line, canonical.Options{MaxBytes: MaxLineBytes, MaxDepth: maxDetailsDepth + 1,
		Numbers: canonical.NumbersAnywhere()})
	if err != nil {
		return Record{}, fmt.Errorf("not valid JSON: %v", err)
	}
	o, ok := v.(canonical.Object)
	if !ok {
		return Record{}, errors.New("not a JSON object")
	}
	notCanonical := errors.New("not in canonical form (the line was edited)")
	if len(o) == 1 && (o[0].Name == "export" || o[0].Name == "checkpoint") {
		enc, err := canonical.Encode(v)
		if err != nil {
			return Record{}, err
		}
		if !bytes.Equal(enc, line) {
			return Record{}, notCanonical
		}
		if o[0].Name == "export" {
			h, err := headerFrom(o[0].Value)
			return Record{Header: h}, err
		}
		c, err := checkpointFrom(o[0].Value)
		return Record{Checkpoint: c}, err
	}
	e, err := entryFrom(o)
	if err != nil {
		return Record{}, err
	}
	// In a canonical line the details are the bytes between the top-level
	// "details" and "hash" members (no string value can hold an unescaped
	// quote, and no member after details holds an object). They are kept as
	// the stored text and hashed as they are, so any change to them breaks
	// the hash; the rest of the line must be exactly as written.
	start := bytes.Index(line, []byte(`,"details":`))
	hash, _ := canonical.AppendString([]byte(`,"hash":`), e.Hash)
	end := bytes.LastIndex(line, hash)
	if start < 0 || end < start+len(`,"details":`) {
		return Record{}, notCanonical
	}
	raw := RawDetails(bytes.Clone(line[start+len(`,"details":`) : end]))
	want, err := AppendEntryLine(nil, e, raw)
	if err != nil || !bytes.Equal(want[:len(want)-1], line) {
		return Record{}, notCanonical
	}
	e.Details = raw
	return Record{Entry: e}, nil
}

// fields reads an object's members into typed destinations: *string or
// *int64 (or *any for "details"). Every member must be present and no other
// member is allowed.
func fields(v any, what string, dst map[string]any) error {
	o, ok := v.(canonical.Object)
	if !ok {
		return fmt.Errorf("%s is not an object", what)
	}
	if len(o) != len(dst) {
		return fmt.Errorf("%s has %d members, want %d", what, len(o), len(dst))
	}
	for _, m := range o {
		p, ok := dst[m.Name]
		if !ok {
			return fmt.Errorf("%s has an unknown member %q", what, m.Name)
		}
		switch p := p.(type) {
		case *string:
			s, ok := m.Value.(string)
			if !ok {
				return fmt.Errorf("%s member %q is not a string", what, m.Name)
			}
			*p = s
		case *int64:
			n, ok := m.Value.(int64)
			if !ok {
				return fmt.Errorf("%s member %q is not an integer", what, m.Name)
			}
			*p = n
		case *any:
			*p = m.Value
		}
	}
	return nil
}

func headerFrom(v any) (*ExportHeader, error) {
	var h ExportHeader
	dst := map[string]any{"format": &h.Format, "database": &h.Database,
		"from_seq": &h.FromSeq, "to_seq": &h.ToSeq, "prev_hash": &h.PrevHash, "head": &h.Head,
		"since": &h.Since, "until": &h.Until, "exported_at": &h.ExportedAt}
	if o, ok := v.(canonical.Object); ok {
		if f, _ := o.Get("format"); f != ExportFormatV1 {
			dst["count"], dst["kid"], dst["public_key"], dst["signature"] = &h.Count, &h.KID, &h.PublicKey, &h.Signature
		}
	}
	if err := fields(v, "the export header", dst); err != nil {
		return nil, err
	}
	if h.Format != ExportFormat && h.Format != ExportFormatV1 {
		return nil, fmt.Errorf("the export format is %q; this version reads %q and %q", h.Format, ExportFormat, ExportFormatV1)
	}
	return &h, nil
}

func checkpointFrom(v any) (*Checkpoint, error) {
	var c Checkpoint
	err := fields(v, "the checkpoint", map[string]any{"seq": &c.Seq, "head": &c.Head, "time": &c.Time,
		"kid": &c.KID, "public_key": &c.PublicKey, "signature": &c.Signature})
	if err != nil {
		return nil, err
	}
	return &c, nil
}

func entryFrom(o canonical.Object) (*Entry, error) {
	var e Entry
	err := fields(o, "the entry", map[string]any{"seq": &e.Seq, "time": &e.Time, "kind": &e.Kind,
		"call_id": &e.CallID, "principal": &e.Principal, "channel": &e.Channel, "details": &e.Details,
		"prev_hash": &e.PrevHash, "hash": &e.Hash})
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// ReadCheckpoints reads checkpoints kept by an outside party: one or more
// JSON objects, each either a checkpoint as GET /api/v1/audit/checkpoint
// returns it or an export's {"checkpoint":{...}} line.
func ReadCheckpoints(r io.Reader) ([]Checkpoint, error) {
	dec := json.NewDecoder(r)
	var out []Checkpoint
	for {
		var raw map[string]json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("audit: read checkpoints: %w", err)
		}
		body, _ := json.Marshal(raw)
		if inner, ok := raw["checkpoint"]; ok && len(raw) == 1 {
			body = inner
		}
		var c Checkpoint
		d := json.NewDecoder(bytes.NewReader(body))
		d.DisallowUnknownFields()
		if err := d.Decode(&c); err != nil {
			return nil, fmt.Errorf("audit: read checkpoint %d: %w", len(out)+1, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("audit: read checkpoints: the file holds no checkpoint")
	}
	return out, nil
}

// Report is the result of verifying a chain or a run of it.
type Report struct {
	// Count entries were verified, from FromSeq (whose prev_hash is
	// PrevHash) to LastSeq (whose hash is Head).
	Count    int64
	FromSeq  int64
	PrevHash string
	LastSeq  int64
	Head     string
	// Checkpoints is how many signed checkpoints matched the chain;
	// CheckpointSeq is the newest of them (0 when none).
	Checkpoints   int
	CheckpointSeq int64
	// KeyIDs lists the keys that signed those checkpoints.
	KeyIDs []string
	// Uncovered lists outside checkpoints that fall before the run verified
	// and so could not be compared.
	Uncovered []int64
	// Header is the export's header, when verifying an export.
	Header *ExportHeader
	// Pruned is set when a stored chain starts after entry 1 behind a
	// pruned entry and a checkpoint.
	Pruned bool
}

// VerifyOptions adds what an outside party brings to a verification.
type VerifyOptions struct {
	// Checkpoints kept outside the log; each must match the chain.
	Checkpoints []Checkpoint
	// TrustedKeys, when not empty, are the only keys that checkpoints and
	// an export's header may be signed with: raw Ed25519 public keys,
	// base64url without padding (see Verifier.Trust).
	TrustedKeys []string
	// Check, when set, runs on every entry whose hash verified; an error
	// breaks the chain there (see Verifier.Check).
	Check func(*Entry) error
}

// Prepare applies the options to v.
func (o VerifyOptions) Prepare(v *Verifier) error {
	if o.Check != nil {
		v.Check(o.Check)
	}
	for _, k := range o.TrustedKeys {
		v.Trust(k)
	}
	for _, c := range o.Checkpoints {
		if err := v.AddCheckpoint(c); err != nil {
			return err
		}
	}
	return nil
}

// Report summarizes a verifier that has finished without error.
func (o VerifyOptions) Report(v *Verifier, count int64, head string) Report {
	r := Report{Count: count, Head: head, KeyIDs: v.KeyIDs()}
	r.FromSeq, r.PrevHash = v.First()
	r.LastSeq, _ = v.Last()
	r.Checkpoints, r.CheckpointSeq = v.Checkpoints()
	for _, c := range o.Checkpoints {
		if count == 0 || c.Seq < r.FromSeq {
			r.Uncovered = append(r.Uncovered, c.Seq)
		}
	}
	return r
}

// checkHeaderKey verifies a signed header's signature and, when keys are
// trusted from outside, that one of them signed it. An unsigned (v1)
// header is accepted only when no key is trusted: it proves nothing, and
// the report says so.
func checkHeaderKey(h *ExportHeader, opts VerifyOptions) error {
	if !h.Signed() {
		if len(opts.TrustedKeys) > 0 {
			return errors.New("the export header is not signed (format v1), but audit keys are trusted: export again where the audit key is, to sign it")
		}
		return nil
	}
	if err := h.VerifySignature(); err != nil {
		return err
	}
	if len(opts.TrustedKeys) > 0 && !slices.Contains(opts.TrustedKeys, h.PublicKey) {
		return fmt.Errorf("the export header is signed by key %s, which is not a trusted audit key", h.KID)
	}
	return nil
}

// VerifyExport verifies a JSONL export offline: every entry line against
// the chain, every checkpoint line's signature and head, the header's
// range and head, and the outside checkpoints in opts. An export that
// starts after entry 1 is verified from its first entry's prev_hash, which
// the report returns so it can be matched with the head of the export
// before it. Damage is a *BreakError naming the first bad entry.
func VerifyExport(r io.Reader, opts VerifyOptions) (Report, error) {
	xr := NewExportReader(r)
	var v *Verifier
	var header *ExportHeader
	prepared := false
	prepare := func() error {
		if prepared {
			return nil
		}
		prepared = true
		if header != nil && header.FromSeq == 1 {
			v = NewVerifier()
		} else {
			v = NewRangeVerifier()
		}
		// Checkpoints in a signed export must be signed by the key that
		// signed its header (or by a key trusted from outside).
		if header != nil && header.Signed() && len(opts.TrustedKeys) == 0 {
			v.Trust(header.PublicKey)
		}
		return opts.Prepare(v)
	}
	broken := func(reason string) error {
		next := int64(1)
		if v != nil {
			last, _ := v.Last()
			next = last + 1
			if !v.started && header != nil && header.FromSeq > 0 {
				next = header.FromSeq
			}
		}
		return &BreakError{Seq: next, Reason: reason}
	}
	sawEntry := false
	for {
		rec, err := xr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Report{}, broken(err.Error())
		}
		switch {
		case rec.Header != nil:
			if header != nil || prepared {
				return Report{}, broken(fmt.Sprintf("line %d: a header line must come first, and only once", xr.Line()))
			}
			header = rec.Header
			if err := checkHeaderKey(header, opts); err != nil {
				return Report{}, broken(ReasonOf(err))
			}
		case rec.Checkpoint != nil:
			if err := prepare(); err != nil {
				return Report{}, err
			}
			if err := v.AddCheckpoint(*rec.Checkpoint); err != nil {
				return Report{}, fmt.Errorf("line %d: %w", xr.Line(), err)
			}
		case rec.Entry != nil:
			if err := prepare(); err != nil {
				return Report{}, err
			}
			if !sawEntry && header != nil && rec.Entry.Seq != header.FromSeq {
				return Report{}, broken(fmt.Sprintf("the header says the export starts at entry %d but the first entry is %d", header.FromSeq, rec.Entry.Seq))
			}
			sawEntry = true
			if err := v.Add(rec.Entry); err != nil {
				return Report{}, err
			}
		}
	}
	if err := prepare(); err != nil {
		return Report{}, err
	}
	count, head, err := v.Finish()
	if err != nil {
		return Report{}, err
	}
	if header != nil {
		first, prev := v.First()
		last, _ := v.Last()
		switch {
		case header.ToSeq > last:
			return Report{}, &BreakError{Seq: last + 1, Reason: fmt.Sprintf("the export ends at entry %d but its header says it runs to entry %d (lines were removed from the end)", last, header.ToSeq)}
		case header.ToSeq < last:
			return Report{}, &BreakError{Seq: header.ToSeq + 1, Reason: fmt.Sprintf("the header says the export ends at entry %d but it goes on to %d", header.ToSeq, last)}
		case count > 0 && (header.PrevHash != prev || first != header.FromSeq):
			return Report{}, &BreakError{Seq: first, Reason: "the first entry's prev_hash differs from the header's"}
		case count > 0 && header.Head != head:
			return Report{}, &BreakError{Seq: last, Reason: "the last entry's hash differs from the header's head"}
		case header.Signed() && header.Count != count:
			return Report{}, &BreakError{Seq: last + 1, Reason: fmt.Sprintf("the signed header counts %d entries but the export holds %d", header.Count, count)}
		}
	}
	rep := opts.Report(v, count, head)
	rep.Header = header
	return rep, nil
}

// CSVCell keeps a spreadsheet from reading a cell of a CSV export as a
// formula: text that begins with =, +, -, @, a tab or a carriage return, or
// with the full-width ＝ ＋ － ＠ that some spreadsheets also take for them,
// gets a leading apostrophe. JSONL exports are never altered.
func CSVCell(s string) string {
	r, _ := utf8.DecodeRuneInString(s)
	if s != "" && strings.ContainsRune("=+-@\t\r\uFF1D\uFF0B\uFF0D\uFF20", r) {
		return "'" + s
	}
	return s
}

package evidence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/countersign/countersign/internal/answer"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// chainSection is an anchored JSONL export read back: its bytes, header,
// checkpoints and entries.
type chainSection struct {
	raw         []byte
	header      *audit.ExportHeader
	checkpoints []audit.Checkpoint
	entries     []*audit.Entry
}

// anchoredChain exports the run of entries between opt's times (starting
// no later than fromSeq when above 0), widened to checkpoints; when none
// covers its end it signs one now and exports again.
func anchoredChain(ctx context.Context, src Source, opt Options, fromSeq int64, res *Result) (*chainSection, error) {
	export := func() (*bytes.Buffer, error) {
		var buf bytes.Buffer
		eo := audit.ExportOptions{Since: opt.Since, Until: opt.Until, Format: "jsonl", Signer: opt.Signer, FromSeq: fromSeq, Anchored: true}
		if opt.ToSeq > 0 {
			eo.Since, eo.Until, eo.FromSeq, eo.ToSeq = time.Time{}, time.Time{}, opt.FromSeq, opt.ToSeq
			if fromSeq > 0 {
				eo.FromSeq = min(eo.FromSeq, fromSeq)
			}
		}
		_, err := src.ExportAudit(ctx, &buf, eo)
		return &buf, err
	}
	buf, err := export()
	if errors.Is(err, audit.ErrUnanchored) {
		if res.Signed, err = src.Checkpoint(ctx, opt.Signer); err != nil {
			return nil, fmt.Errorf("evidence: sign a checkpoint for the end of the range: %w", err)
		}
		buf, err = export()
	}
	if err != nil {
		return nil, fmt.Errorf("evidence: export the chain: %w", err)
	}
	c, err := readChain(buf.Bytes())
	if err != nil {
		return nil, err
	}
	if c.header.Count == 0 {
		return nil, ErrEmpty
	}
	return c, nil
}

// readChain reads a JSONL export held in memory.
func readChain(raw []byte) (*chainSection, error) {
	c := &chainSection{raw: raw}
	xr := audit.NewExportReader(bytes.NewReader(raw))
	for {
		rec, err := xr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("evidence: read the chain: %w", err)
		}
		switch {
		case rec.Header != nil:
			c.header = rec.Header
		case rec.Checkpoint != nil:
			c.checkpoints = append(c.checkpoints, *rec.Checkpoint)
		case rec.Entry != nil:
			c.entries = append(c.entries, rec.Entry)
		}
	}
	if c.header == nil {
		return nil, errors.New("evidence: the chain has no header")
	}
	return c, nil
}

// details decodes an entry's details into v.
func details(e *audit.Entry, v any) error {
	raw, ok := e.Details.(audit.RawDetails)
	if !ok {
		b, err := json.Marshal(e.Details)
		if err != nil {
			return err
		}
		raw = b
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("entry %d (%s): %w", e.Seq, e.Kind, err)
	}
	return nil
}

// decision is what the summary and the verifiers read of an approved,
// redeemed or denied entry.
type decision struct {
	Digest   string          `json:"digest"`
	Method   string          `json:"method"`
	Human    string          `json:"human"`
	Status   string          `json:"status"`
	Tool     string          `json:"tool"`
	Actor    string          `json:"actor"`
	Evidence json.RawMessage `json:"evidence"`
	Passkey  json.RawMessage `json:"passkey"`
}

// earliestApproval is the first entry of the calls redeemed in c whose
// approvals precede it (0 when there are none).
func earliestApproval(ctx context.Context, src Source, c *chainSection) (int64, error) {
	approved := map[string]bool{}
	first := int64(0)
	for _, e := range c.entries {
		switch e.Kind {
		case audit.KindApproved:
			approved[e.CallID] = true
		case audit.KindRedeemed:
			if approved[e.CallID] {
				continue
			}
			tl, err := src.Timeline(ctx, e.CallID)
			if err != nil {
				return 0, fmt.Errorf("evidence: call %s: %w", e.CallID, err)
			}
			if len(tl) > 0 && (first == 0 || tl[0].Seq < first) {
				first = tl[0].Seq
			}
		}
	}
	return first, nil
}

// call is what the summary needs to know of a call: its tool and actor.
type call struct{ tool, actor string }

// callInfo finds the tool and actor of every call c's entries name: from
// its submitted entry when the chain holds it, else from the store.
func callInfo(ctx context.Context, src Source, entries []*audit.Entry) (map[string]call, error) {
	out := map[string]call{}
	for _, e := range entries {
		if e.Kind != audit.KindSubmitted || e.CallID == "" {
			continue
		}
		var d decision
		if err := details(e, &d); err != nil {
			return nil, err
		}
		out[e.CallID] = call{tool: d.Tool, actor: e.Principal}
	}
	for _, e := range entries {
		if e.CallID == "" {
			continue
		}
		if _, ok := out[e.CallID]; ok {
			continue
		}
		c, err := src.Call(ctx, e.CallID)
		if errors.Is(err, queue.ErrNotFound) {
			// A rejected proposal's entry names a call that was never
			// stored (a repeat of a denied one names the denied call).
			out[e.CallID] = call{}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("evidence: call %s: %w", e.CallID, err)
		}
		out[e.CallID] = call{tool: c.Tool, actor: c.Actor}
	}
	return out, nil
}

// passkeyFiles are keys/passkeys.jsonl (each passkey registration in the
// chain) and passkey-evidence.jsonl (each approval signed by a passkey,
// with the entry it came from).
func passkeyFiles(entries []*audit.Entry) (keys, evidence []byte, err error) {
	var kb, eb bytes.Buffer
	for _, e := range entries {
		switch e.Kind {
		case audit.KindPasskeyAdded:
			var d map[string]any
			if err := details(e, &d); err != nil {
				return nil, nil, err
			}
			line, err := jsonFile(map[string]any{"seq": e.Seq, "hash": e.Hash, "user": d["user"], "credential_id": d["credential_id"],
				"name": d["name"], "public_key": d["public_key"]})
			if err != nil {
				return nil, nil, err
			}
			kb.Write(line)
		case audit.KindApproved:
			var d decision
			if err := details(e, &d); err != nil {
				return nil, nil, err
			}
			if d.Method != "passkey" {
				continue
			}
			line, err := jsonFile(PasskeyEvidence{Seq: e.Seq, Hash: e.Hash, CallID: e.CallID, Operator: e.Principal, Digest: d.Digest, Evidence: d.Evidence})
			if err != nil {
				return nil, nil, err
			}
			eb.Write(line)
		}
	}
	return kb.Bytes(), eb.Bytes(), nil
}

// PasskeyEvidence is one line of passkey-evidence.jsonl: an approval
// signed with a passkey, as its entry records it.
type PasskeyEvidence struct {
	Seq      int64           `json:"seq"`
	Hash     string          `json:"hash"`
	CallID   string          `json:"call_id"`
	Operator string          `json:"operator"`
	Digest   string          `json:"digest"`
	Evidence json.RawMessage `json:"evidence"`
}

// Summary counts what the entries between Since and Until record, for
// the calls (and freezes) the tool and actor filters keep. Approvals are
// counted per approval given, by who or what gave it.
type Summary struct {
	Calls             int `json:"calls"`
	ApprovedByPerson  int `json:"approved_by_person"`
	ApprovedByRule    int `json:"approved_by_rule"`
	ApprovedByAllow   int `json:"approved_by_allowance"`
	ApprovedUnattest  int `json:"approved_unattested"`
	Denied            int `json:"denied"`
	Countered         int `json:"countered"`
	Revoked           int `json:"revoked"`
	Expired           int `json:"expired_undecided"`
	Redeemed          int `json:"redeemed"`
	RedemptionRefused int `json:"redemptions_refused"`
	Frozen            int `json:"freezes"`
	Unfrozen          int `json:"unfreezes"`
	Unresolved        int `json:"unresolved_outcomes"`
	Entries           int `json:"entries_in_range"`

	callIDs []string
}

// inRange reports whether an entry's time falls between opt's times.
func inRange(e *audit.Entry, opt Options) bool {
	t, err := time.Parse(time.RFC3339Nano, e.Time)
	if err != nil {
		return false
	}
	return (opt.Since.IsZero() || !t.Before(opt.Since)) && (opt.Until.IsZero() || t.Before(opt.Until))
}

// summarize counts the entries in opt's range that its filters keep.
func summarize(entries []*audit.Entry, calls map[string]call, opt Options) Summary {
	var s Summary
	keep := func(tool, actor string) bool {
		return (opt.Tool == "" || tool == opt.Tool) && (opt.Actor == "" || actor == opt.Actor)
	}
	seen := map[string]bool{}
	unresolved := map[string]bool{}
	for _, e := range entries {
		if !inRange(e, opt) {
			continue
		}
		var d decision
		if details(e, &d) != nil {
			continue
		}
		if e.CallID == "" {
			if (e.Kind == "frozen" || e.Kind == "unfrozen") && keep(d.Tool, d.Actor) {
				s.Entries++
				if e.Kind == "frozen" {
					s.Frozen++
				} else {
					s.Unfrozen++
				}
			} else if opt.Tool == "" && opt.Actor == "" {
				s.Entries++
			}
			continue
		}
		c := calls[e.CallID]
		if !keep(c.tool, c.actor) {
			continue
		}
		s.Entries++
		if c.tool != "" && !seen[e.CallID] {
			seen[e.CallID] = true
			s.callIDs = append(s.callIDs, e.CallID)
		}
		switch e.Kind {
		case audit.KindSubmitted:
			s.Calls++
		case audit.KindApproved:
			switch {
			case d.Human == queue.HumanTrue:
				s.ApprovedByPerson++
			case d.Method == queue.MethodPolicy:
				s.ApprovedByRule++
			case d.Method == queue.MethodAllowance:
				s.ApprovedByAllow++
			default:
				s.ApprovedUnattest++
			}
		case audit.KindDenied:
			s.Denied++
		case audit.KindCountered:
			s.Countered++
		case audit.KindRevoked:
			s.Revoked++
		case audit.KindExpired:
			s.Expired++
		case audit.KindRedeemed:
			s.Redeemed++
		case audit.KindRedemptionRefused:
			s.RedemptionRefused++
		case audit.KindLeaseExpired:
			unresolved[e.CallID] = true
		case audit.KindOutcome:
			unresolved[e.CallID] = d.Status == queue.OutcomeUnknown
		case audit.KindResolved:
			unresolved[e.CallID] = false
		}
	}
	for _, u := range unresolved {
		if u {
			s.Unresolved++
		}
	}
	sort.Strings(s.callIDs)
	return s
}

// lineageFile is lineage.jsonl: one line per call, its lineage as the
// agent API gives it, built from the call as stored.
func lineageFile(ctx context.Context, src Source, ids []string, now time.Time) ([]byte, int, error) {
	var b bytes.Buffer
	for _, id := range ids {
		c, err := src.Call(ctx, id)
		if err != nil {
			return nil, 0, fmt.Errorf("evidence: call %s: %w", id, err)
		}
		v, err := answer.CallAsStored(c, now)
		if err != nil {
			return nil, 0, err
		}
		line, err := jsonFile(LineageLine{CallID: c.ID, Tool: c.Tool, Actor: c.Actor, Status: string(v.Status), Digest: c.Digest, Lineage: v.Lineage})
		if err != nil {
			return nil, 0, err
		}
		b.Write(line)
	}
	return b.Bytes(), len(ids), nil
}

// LineageLine is one line of lineage.jsonl.
type LineageLine struct {
	CallID  string `json:"call_id"`
	Tool    string `json:"tool"`
	Actor   string `json:"actor"`
	Status  string `json:"status"`
	Digest  string `json:"digest"`
	Lineage any    `json:"lineage"`
}

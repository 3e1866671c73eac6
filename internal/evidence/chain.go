package evidence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/answer"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// DefaultRecentCalls is how many calls a pass over a chain remembers
// (their tool, actor and whether an approval of them was seen); a call it
// forgot is looked up in the store again. It bounds what writing a pack
// holds, whatever the length of the chain.
const DefaultRecentCalls = 8192

// exportChain writes the run of entries between opt's times (starting no
// later than fromSeq when above 0), widened to checkpoints, to sp; when
// none covers its end it signs one now and exports again.
func exportChain(ctx context.Context, src Source, opt Options, fromSeq int64, sp *spool, res *Result) error {
	export := func() error {
		if err := sp.reset(); err != nil {
			return err
		}
		eo := audit.ExportOptions{Since: opt.Since, Until: opt.Until, Format: "jsonl", Signer: opt.Signer, FromSeq: fromSeq, Anchored: true}
		if opt.ToSeq > 0 {
			eo.Since, eo.Until, eo.FromSeq, eo.ToSeq = time.Time{}, time.Time{}, opt.FromSeq, opt.ToSeq
			if fromSeq > 0 {
				eo.FromSeq = min(eo.FromSeq, fromSeq)
			}
		}
		_, err := src.ExportAudit(ctx, sp, eo)
		return err
	}
	err := export()
	if errors.Is(err, audit.ErrUnanchored) {
		if res.Signed, err = src.Checkpoint(ctx, opt.Signer); err != nil {
			return fmt.Errorf("evidence: sign a checkpoint for the end of the range: %w", err)
		}
		err = export()
	}
	if err != nil {
		return fmt.Errorf("evidence: export the chain: %w", err)
	}
	return nil
}

// section is one pass over an exported chain section, entry by entry: it
// writes the checkpoints, passkey and lineage files as it goes and counts
// the summary. What it holds is bounded: the header, opt.RecentCalls calls,
// and the calls whose outcome is unresolved.
type section struct {
	ctx context.Context
	src Source
	opt Options

	header                 *audit.ExportHeader
	checkpoints            int
	cps, keys, ev, lineage io.Writer
	calls                  *fifo[call]
	approved               *fifo[bool]
	first                  int64
	summary                Summary
	unresolved             map[string]bool
	lineageCalls           int
}

// call is what a pass knows of a call: its tool and actor.
type call struct{ tool, actor string }

// readSection reads the chain section from r.
func readSection(ctx context.Context, src Source, opt Options, r io.Reader, cps, keys, ev, lineage io.Writer) (*section, error) {
	recent := opt.RecentCalls
	if recent <= 0 {
		recent = DefaultRecentCalls
	}
	s := &section{ctx: ctx, src: src, opt: opt, cps: cps, keys: keys, ev: ev, lineage: lineage,
		calls: newFIFO[call](recent), approved: newFIFO[bool](recent), unresolved: map[string]bool{}}
	xr := audit.NewExportReader(r)
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
			s.header = rec.Header
		case rec.Checkpoint != nil:
			line, err := audit.AppendCheckpointLine(nil, *rec.Checkpoint)
			if err != nil {
				return nil, err
			}
			if _, err := s.cps.Write(line); err != nil {
				return nil, err
			}
			s.checkpoints++
		case rec.Entry != nil:
			if s.header == nil {
				return nil, errors.New("evidence: the chain has no header")
			}
			if err := s.entry(rec.Entry); err != nil {
				return nil, err
			}
		}
	}
	if s.header == nil {
		return nil, errors.New("evidence: the chain has no header")
	}
	for _, u := range s.unresolved {
		if u {
			s.summary.Unresolved++
		}
	}
	return s, nil
}

// entry takes one entry of the section into every file and count.
func (s *section) entry(e *audit.Entry) error {
	if err := s.earliestApproval(e); err != nil {
		return err
	}
	if err := passkeyLines(e, s.keys, s.ev); err != nil {
		return err
	}
	var c call
	if e.CallID != "" {
		var err error
		if c, err = s.call(e); err != nil {
			return err
		}
	}
	s.count(e, c)
	return nil
}

// earliestApproval notes the first entry of a call redeemed in the section
// whose approvals precede it, so that the section can start there and
// every redeemed digest be compared with an approved one.
func (s *section) earliestApproval(e *audit.Entry) error {
	switch e.Kind {
	case audit.KindApproved:
		s.approved.put(e.CallID, true)
	case audit.KindRedeemed:
		if _, ok := s.approved.get(e.CallID); ok {
			s.approved.del(e.CallID)
			return nil
		}
		tl, err := s.src.Timeline(s.ctx, e.CallID)
		if err != nil {
			return fmt.Errorf("evidence: call %s: %w", e.CallID, err)
		}
		if len(tl) > 0 && tl[0].Seq < s.header.FromSeq && (s.first == 0 || tl[0].Seq < s.first) {
			s.first = tl[0].Seq
		}
	}
	return nil
}

// call returns the tool and actor of e's call, and writes the call's
// lineage line at its first entry in the section when the call has an
// entry in the period and the filters keep it: lineage.jsonl follows the
// chain, so that a verifier reads the two side by side.
func (s *section) call(e *audit.Entry) (call, error) {
	if c, ok := s.calls.get(e.CallID); ok {
		return c, nil
	}
	first := e.Kind == audit.KindSubmitted
	var c call
	var timeline []audit.Entry
	if first {
		var d decision
		if err := details(e, &d); err != nil {
			return c, err
		}
		c = call{tool: d.Tool, actor: strings.Clone(e.Principal)}
	} else {
		// Forgotten, or proposed before the section: the store says
		// whether this is the call's first entry in the section.
		var err error
		if timeline, err = s.src.Timeline(s.ctx, e.CallID); err != nil {
			return c, fmt.Errorf("evidence: call %s: %w", e.CallID, err)
		}
		first = true
		for _, t := range timeline {
			if t.Seq >= s.header.FromSeq && t.Seq < e.Seq {
				first = false
				break
			}
		}
		stored, err := s.src.Call(s.ctx, e.CallID)
		switch {
		case errors.Is(err, queue.ErrNotFound):
			// A rejected proposal's entry names a call that was never
			// stored (a repeat of a denied one names the denied call).
		case err != nil:
			return c, fmt.Errorf("evidence: call %s: %w", e.CallID, err)
		default:
			c = call{tool: stored.Tool, actor: stored.Actor}
		}
	}
	s.calls.put(e.CallID, c)
	if !first || c.tool == "" || !s.keep(c.tool, c.actor) {
		return c, nil
	}
	inPeriod := inRange(e, s.opt)
	if !inPeriod {
		if timeline == nil {
			var err error
			if timeline, err = s.src.Timeline(s.ctx, e.CallID); err != nil {
				return c, fmt.Errorf("evidence: call %s: %w", e.CallID, err)
			}
		}
		for i := range timeline {
			t := &timeline[i]
			if t.Seq >= s.header.FromSeq && t.Seq <= s.header.ToSeq && inRange(t, s.opt) {
				inPeriod = true
				break
			}
		}
	}
	if inPeriod {
		return c, s.lineageLine(e.CallID)
	}
	return c, nil
}

// lineageLine writes one line of lineage.jsonl: the call's lineage as the
// agent API gives it, built from the call as stored.
func (s *section) lineageLine(id string) error {
	c, err := s.src.Call(s.ctx, id)
	if err != nil {
		return fmt.Errorf("evidence: call %s: %w", id, err)
	}
	v, err := answer.CallAsStored(c, s.opt.Now)
	if err != nil {
		return err
	}
	line, err := jsonFile(LineageLine{CallID: c.ID, Tool: c.Tool, Actor: c.Actor, Status: string(v.Status), Digest: c.Digest, Lineage: v.Lineage})
	if err != nil {
		return err
	}
	s.lineageCalls++
	_, err = s.lineage.Write(line)
	return err
}

func (s *section) keep(tool, actor string) bool {
	return (s.opt.Tool == "" || tool == s.opt.Tool) && (s.opt.Actor == "" || actor == s.opt.Actor)
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

// passkeyLines writes e's line of keys/passkeys.jsonl (a passkey
// registration) or of passkey-evidence.jsonl (an approval signed by a
// passkey), if it has one.
func passkeyLines(e *audit.Entry, keys, evidence io.Writer) error {
	switch e.Kind {
	case audit.KindPasskeyAdded:
		var d map[string]any
		if err := details(e, &d); err != nil {
			return err
		}
		line, err := jsonFile(map[string]any{"seq": e.Seq, "hash": e.Hash, "user": d["user"], "credential_id": d["credential_id"],
			"name": d["name"], "public_key": d["public_key"]})
		if err != nil {
			return err
		}
		_, err = keys.Write(line)
		return err
	case audit.KindApproved:
		var d decision
		if err := details(e, &d); err != nil {
			return err
		}
		if d.Method != "passkey" {
			return nil
		}
		line, err := jsonFile(PasskeyEvidence{Seq: e.Seq, Hash: e.Hash, CallID: e.CallID, Operator: e.Principal, Digest: d.Digest, Evidence: d.Evidence})
		if err != nil {
			return err
		}
		_, err = evidence.Write(line)
		return err
	}
	return nil
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
}

// inRange reports whether an entry's time falls between opt's times.
func inRange(e *audit.Entry, opt Options) bool {
	t, err := time.Parse(time.RFC3339Nano, e.Time)
	if err != nil {
		return false
	}
	return (opt.Since.IsZero() || !t.Before(opt.Since)) && (opt.Until.IsZero() || t.Before(opt.Until))
}

// count adds e to the summary when it is in the period and the filters
// keep it (c is its call's tool and actor).
func (s *section) count(e *audit.Entry, c call) {
	if !inRange(e, s.opt) {
		return
	}
	var d decision
	if details(e, &d) != nil {
		return
	}
	sum := &s.summary
	if e.CallID == "" {
		if (e.Kind == "frozen" || e.Kind == "unfrozen") && s.keep(d.Tool, d.Actor) {
			sum.Entries++
			if e.Kind == "frozen" {
				sum.Frozen++
			} else {
				sum.Unfrozen++
			}
		} else if s.opt.Tool == "" && s.opt.Actor == "" {
			sum.Entries++
		}
		return
	}
	if !s.keep(c.tool, c.actor) {
		return
	}
	sum.Entries++
	switch e.Kind {
	case audit.KindSubmitted:
		sum.Calls++
	case audit.KindApproved:
		switch {
		case d.Human == queue.HumanTrue:
			sum.ApprovedByPerson++
		case d.Method == queue.MethodPolicy:
			sum.ApprovedByRule++
		case d.Method == queue.MethodAllowance:
			sum.ApprovedByAllow++
		default:
			sum.ApprovedUnattest++
		}
	case audit.KindDenied:
		sum.Denied++
	case audit.KindCountered:
		sum.Countered++
	case audit.KindRevoked:
		sum.Revoked++
	case audit.KindExpired:
		sum.Expired++
	case audit.KindRedeemed:
		sum.Redeemed++
	case audit.KindRedemptionRefused:
		sum.RedemptionRefused++
	case audit.KindLeaseExpired:
		s.unresolved[e.CallID] = true
	case audit.KindOutcome:
		if d.Status == queue.OutcomeUnknown {
			s.unresolved[e.CallID] = true
		} else {
			delete(s.unresolved, e.CallID)
		}
	case audit.KindResolved:
		delete(s.unresolved, e.CallID)
	}
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

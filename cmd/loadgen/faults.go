package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/countersign/countersign/client"
	"github.com/countersign/countersign/internal/audit"
)

// The fault soak (--faults): after each accepted redemption the executor
// behaves one way or another, some of them faulty: it crashes right after
// redeeming, crashes after executing (it sent a heartbeat, then nothing),
// reports late (after its lease ran out), reports unknown, works long and
// keeps its lease with heartbeats, or reports succeeded or failed in time.
// An operator then resolves some of the calls waiting for a person. At the
// end every call must be in a terminal, explained state: succeeded, failed,
// resolved, or waiting for a person, each consistent with what its executor
// did and with its audit trail. Anything else is counted as unexplained and
// fails the run.

// behaviour is what an executor does after its redemption was accepted.
type behaviour string

const (
	bSucceeded     behaviour = "reports succeeded"
	bFailed        behaviour = "reports failed"
	bUnknown       behaviour = "reports unknown"
	bHeartbeats    behaviour = "works long with heartbeats"
	bCrashRedeem   behaviour = "crashes after redeem"
	bCrashExecuted behaviour = "crashes after executing"
	bLate          behaviour = "reports late"
)

var behaviours = []behaviour{bSucceeded, bFailed, bUnknown, bHeartbeats, bCrashRedeem, bCrashExecuted, bLate}

// Final states of a call after the soak.
const (
	stSucceeded  = "succeeded"
	stFailed     = "failed"
	stResolved   = "resolved by a person"
	stWaiting    = "waiting for a person"
	stUnexplaind = "UNEXPLAINED"
)

// pick chooses flow n's behaviour: a share of the flows are faulty (the
// three faults in turn), the others mostly succeed. The choice depends on
// n only, so a run is reproducible.
func pick(n int64, share float64) behaviour {
	h := fnv.New64a()
	fmt.Fprintf(h, "flow-%d", n)
	x := h.Sum64()
	if float64(x%10000)/10000 < share {
		return []behaviour{bCrashRedeem, bCrashExecuted, bLate}[(x/10000)%3]
	}
	switch (x / 10000) % 10 {
	case 0:
		return bHeartbeats
	case 1:
		return bUnknown
	case 2:
		return bFailed
	}
	return bSucceeded
}

// timeliner reads a call's audit entries from the console's database.
type timeliner interface {
	Timeline(ctx context.Context, callID string) ([]audit.Entry, error)
}

// faultFlow is one redeemed call of the soak.
type faultFlow struct {
	id     string
	agent  *client.Client
	b      behaviour
	lease  time.Duration // the tool's outcome_within
	within time.Time     // lease end at redemption
	// resolved is the verdict the operator recorded, "" when none.
	resolved string
}

// faults runs the executors' side of the soak.
type faults struct {
	share   float64
	resolve float64
	errs    *errorCounts
	wg      sync.WaitGroup

	mu    sync.Mutex
	flows []*faultFlow
}

// executed is called after an accepted redemption of flow n; it returns
// at once, the executor's work going on in the background where it takes
// time.
func (f *faults) executed(ctx context.Context, c *client.Client, n int64, call *client.Call, r *client.Redemption) {
	fl := &faultFlow{id: call.ID, agent: c, b: pick(n, f.share), lease: time.Duration(r.OutcomeWithin) * time.Second, within: r.LeaseUntil}
	f.mu.Lock()
	f.flows = append(f.flows, fl)
	f.mu.Unlock()
	report := func(ctx context.Context, status, detail string) {
		if _, err := c.ReportOutcome(ctx, fl.id, status, detail); err != nil {
			f.errs.add("outcome:" + errKind(err))
		}
	}
	switch fl.b {
	case bSucceeded:
		report(ctx, client.OutcomeSucceeded, "done")
	case bFailed:
		report(ctx, client.OutcomeFailed, "the forecast service answered 503")
	case bUnknown:
		report(ctx, client.OutcomeUnknown, "the connection broke after the request was sent")
	case bCrashRedeem:
		// Nothing: the executor died before acting.
	case bCrashExecuted:
		// It started, said so, acted, and died before reporting.
		if _, err := c.Heartbeat(ctx, fl.id, 0); err != nil {
			f.errs.add("heartbeat:" + errKind(err))
		}
	case bLate, bHeartbeats:
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			if fl.b == bLate {
				// Past the lease and the sweeper's reaction to it.
				if sleepCtx(ctx, time.Until(fl.within)+2*time.Second) != nil {
					return
				}
				report(ctx, client.OutcomeSucceeded, "done, reported late")
				return
			}
			// Work for one and a half leases, beating every third of one.
			end := time.Now().Add(fl.lease * 3 / 2)
			for time.Now().Before(end) {
				if sleepCtx(ctx, fl.lease/3) != nil {
					return
				}
				if _, err := c.Heartbeat(ctx, fl.id, 0); err != nil {
					f.errs.add("heartbeat:" + errKind(err))
				}
			}
			report(ctx, client.OutcomeSucceeded, "done after a long run")
		}()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// FaultReport is what the soak found.
type FaultReport struct {
	Calls int `json:"calls"`
	// ByBehaviour counts the final states of the calls of each behaviour.
	ByBehaviour map[string]map[string]int `json:"by_behaviour"`
	Final       map[string]int            `json:"final"`
	Unexplained []string                  `json:"unexplained"`
	// LateReplaced counts late reports that replaced lease_expired;
	// LateBeforeSweep those that came after the lease but before the sweep.
	LateReplaced    int     `json:"late_replaced_lease_expired"`
	LateBeforeSweep int     `json:"late_before_sweep"`
	Resolved        int     `json:"resolved"`
	SettleSeconds   float64 `json:"settle_seconds"`
}

// settle waits for the background executors and for every lease to lapse,
// has an operator resolve a share of the calls waiting for a person, and
// checks every call against what its executor did and its audit trail.
func (f *faults) settle(ctx context.Context, trail timeliner, op *webSession) (*FaultReport, error) {
	start := time.Now()
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, errors.New("the executors did not finish within --settle")
	}
	f.mu.Lock()
	flows := append([]*faultFlow(nil), f.flows...)
	f.mu.Unlock()
	// Every call whose executor went silent must get lease_expired by
	// itself, without anything asking for it.
	for _, fl := range flows {
		if fl.b != bCrashRedeem && fl.b != bCrashExecuted {
			continue
		}
		for {
			c, err := fl.agent.Get(ctx, fl.id)
			if err == nil && c.Outcome != nil {
				break
			}
			if sleepCtx(ctx, 250*time.Millisecond) != nil {
				return nil, fmt.Errorf("call %s: no lease_expired by the end of --settle", fl.id)
			}
		}
	}
	// A person resolves a share of what waits for them: a crash after
	// redeem did not run, the others did.
	n := 0
	for _, fl := range flows {
		if fl.b != bCrashRedeem && fl.b != bCrashExecuted && fl.b != bUnknown {
			continue
		}
		n++
		if float64(n%100)/100 >= f.resolve {
			continue
		}
		verdict := "executed"
		if fl.b == bCrashRedeem {
			verdict = "not_executed"
		}
		if err := op.resolve(ctx, fl.id, verdict, "checked the executor's log", "https://logs.example.invalid/"+fl.id); err != nil {
			f.errs.add("resolve:" + err.Error())
			continue
		}
		fl.resolved = verdict
	}
	rep := &FaultReport{Calls: len(flows), ByBehaviour: map[string]map[string]int{}, Final: map[string]int{}}
	for _, fl := range flows {
		c, err := fl.agent.Get(ctx, fl.id)
		if err != nil {
			return nil, fmt.Errorf("read call %s: %w", fl.id, err)
		}
		entries, err := trail.Timeline(ctx, fl.id)
		if err != nil {
			return nil, fmt.Errorf("timeline of %s: %w", fl.id, err)
		}
		final, why := explain(fl, c, entries, rep)
		if why != "" {
			rep.Unexplained = append(rep.Unexplained, fmt.Sprintf("%s (%s): %s", fl.id, fl.b, why))
			final = stUnexplaind
		}
		if final == stResolved {
			rep.Resolved++
		}
		if rep.ByBehaviour[string(fl.b)] == nil {
			rep.ByBehaviour[string(fl.b)] = map[string]int{}
		}
		rep.ByBehaviour[string(fl.b)][final]++
		rep.Final[final]++
	}
	rep.SettleSeconds = time.Since(start).Seconds()
	return rep, nil
}

// explain gives a call's final state, or why it is not what its executor's
// behaviour explains.
func explain(fl *faultFlow, c *client.Call, entries []audit.Entry, rep *FaultReport) (string, string) {
	kinds := map[string]int{}
	var order []string
	for _, e := range entries {
		kinds[e.Kind]++
		order = append(order, e.Kind)
	}
	if c.Status != client.StatusRedeemed || kinds[audit.KindRedeemed] != 1 {
		return "", fmt.Sprintf("status %s with %d redeemed entries", c.Status, kinds[audit.KindRedeemed])
	}
	if c.Outcome == nil {
		return "", "no outcome and no lease_expired after the lease ended"
	}
	o := c.Outcome.Status
	waiting := func() (string, string) {
		if fl.resolved != "" {
			if c.Resolution == nil || c.Resolution.Verdict != fl.resolved || kinds[audit.KindResolved] != 1 {
				return "", fmt.Sprintf("resolved %s but the call shows %+v", fl.resolved, c.Resolution)
			}
			return stResolved, ""
		}
		if c.Resolution != nil {
			return "", "a resolution nobody made"
		}
		return stWaiting, ""
	}
	switch fl.b {
	case bSucceeded, bFailed:
		want := map[behaviour]string{bSucceeded: stSucceeded, bFailed: stFailed}[fl.b]
		if o != want || kinds[audit.KindLeaseExpired] != 0 {
			return "", fmt.Sprintf("outcome %s, %d lease expiries", o, kinds[audit.KindLeaseExpired])
		}
		return want, ""
	case bHeartbeats:
		if o != client.OutcomeSucceeded || kinds[audit.KindLeaseExpired] != 0 || kinds[audit.KindLeaseExtended] == 0 {
			return "", fmt.Sprintf("outcome %s, %d heartbeats, %d lease expiries: the heartbeats did not keep the lease",
				o, kinds[audit.KindLeaseExtended], kinds[audit.KindLeaseExpired])
		}
		return stSucceeded, ""
	case bLate:
		if o != client.OutcomeSucceeded {
			return "", "the late report was not accepted: outcome " + o
		}
		if kinds[audit.KindLeaseExpired] == 1 && strings.Join(order[len(order)-2:], ",") == "lease_expired,outcome" {
			rep.LateReplaced++
		} else if kinds[audit.KindLeaseExpired] == 0 {
			rep.LateBeforeSweep++
		} else {
			return "", "timeline " + strings.Join(order, ",")
		}
		return stSucceeded, ""
	case bUnknown:
		if o != client.OutcomeUnknown || kinds[audit.KindLeaseExpired] != 0 {
			return "", "outcome " + o
		}
		return waiting()
	case bCrashRedeem, bCrashExecuted:
		if o != client.OutcomeLeaseExpired || kinds[audit.KindLeaseExpired] != 1 || kinds[audit.KindOutcome] != 0 {
			return "", fmt.Sprintf("outcome %s after a crash", o)
		}
		if fl.b == bCrashExecuted && kinds[audit.KindLeaseExtended] == 0 {
			return "", "its heartbeat is not on the timeline"
		}
		return waiting()
	}
	return "", "unknown behaviour"
}

func printFaults(w io.Writer, r *FaultReport) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	states := []string{stSucceeded, stFailed, stResolved, stWaiting, stUnexplaind}
	fmt.Fprintf(tw, "faults\t%d redeemed calls, settled in %.1f s\n", r.Calls, r.SettleSeconds)
	fmt.Fprintf(tw, "executor\t%s\n", strings.Join(states, "\t"))
	for _, b := range behaviours {
		row := r.ByBehaviour[string(b)]
		if row == nil {
			continue
		}
		cells := make([]string, len(states))
		for i, s := range states {
			cells[i] = fmt.Sprint(row[s])
		}
		fmt.Fprintf(tw, "  %s\t%s\n", b, strings.Join(cells, "\t"))
	}
	cells := make([]string, len(states))
	for i, s := range states {
		cells[i] = fmt.Sprint(r.Final[s])
	}
	fmt.Fprintf(tw, "  all\t%s\n", strings.Join(cells, "\t"))
	fmt.Fprintf(tw, "late reports\t%d replaced lease_expired, %d came before the sweep\n", r.LateReplaced, r.LateBeforeSweep)
	tw.Flush()
	sort.Strings(r.Unexplained)
	for i, u := range r.Unexplained {
		if i == 20 {
			fmt.Fprintf(w, "  ... and %d more\n", len(r.Unexplained)-20)
			break
		}
		fmt.Fprintf(w, "  unexplained: %s\n", u)
	}
}

// resolve records a resolution through the web endpoint, as the Unresolved
// page's form does.
func (s *webSession) resolve(ctx context.Context, id, verdict, note, evidence string) error {
	code, err := s.post(ctx, "/calls/"+url.PathEscape(id)+"/resolve", url.Values{"csrf": {s.csrf}, "verdict": {verdict},
		"note": {note}, "evidence": {evidence}, "from": {"unresolved"}})
	if err != nil {
		return errors.New("transport")
	}
	if code != http.StatusSeeOther {
		return fmt.Errorf("status_%d", code)
	}
	return nil
}

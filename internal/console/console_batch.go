package console

import (
	"errors"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/web/templates"
)

// Batch review: the queue's selected calls are read together on one page
// (GET /batch?id=…&id=…) and decided together (POST /batch/approve or
// /batch/deny), each call on its own, bound to the digest the page showed.
// Nothing approves from the queue itself.

func (c *Console) routesBatch(e *echo.Echo, post func(string, echo.HandlerFunc, ...echo.MiddlewareFunc)) {
	e.GET("/batch", c.batchPage, c.requireSession, c.requireDecider)
	post("/batch/approve", c.approveBatch, c.requireDecider)
	post("/batch/deny", c.denyBatch, c.requireDecider)
}

func (c *Console) batchPage(ec echo.Context) error {
	return c.renderBatch(ec, http.StatusOK, ec.QueryParams()["id"], nil, "")
}

// renderBatch shows the review page of the calls ids (each once, in the
// order given) with the refusal err, if any, and the reason typed.
func (c *Console) renderBatch(ec echo.Context, status int, ids []string, refusal error, reason string) error {
	v := viewerOf(ec)
	now := c.now()
	bv := templates.BatchView{Page: c.page(v, "Review calls together", "queue", "", now), CSRF: v.csrf, Reason: reason,
		Differs: map[string]bool{}}
	ids = once(ids)
	switch {
	case len(ids) == 0:
		refusal = queue.ErrBatchEmpty
	case len(ids) > queue.MaxBatch:
		refusal, ids = queue.ErrBatchTooLarge, nil
	}
	if refusal != nil {
		ae := server.ErrorOf(refusal)
		if ae.Status >= 500 {
			return refusal
		}
		bv.Error = ae.Message
		if status == http.StatusOK {
			status = ae.Status
		}
	}
	var calls []*queue.Call
	for _, id := range ids {
		call, err := c.q.Call(ec.Request().Context(), id)
		if errors.Is(err, queue.ErrNotFound) {
			bv.Gone = append(bv.Gone, templates.BatchLine{ID: id, Why: "no such call"})
			continue
		}
		if err != nil {
			return err
		}
		if call.Status != queue.StatusPending {
			bv.Gone = append(bv.Gone, templates.BatchLine{ID: id, Why: "it is " + string(call.Status) + " already; open it to see who decided"})
			continue
		}
		cv, err := c.callContent(call)
		if err != nil {
			return err
		}
		bc := templates.BatchCall{CallView: cv, Digest: call.Digest}
		if err := c.q.BatchPreview(call, v.user); err != nil {
			bc.Drops = server.ErrorOf(err).Message
		}
		bv.Calls = append(bv.Calls, bc)
		calls = append(calls, call)
	}
	markDiffers(&bv, calls)
	bv.Presented = c.presentBatch(v, calls)
	return c.render(ec, status, templates.BatchPage(bv))
}

// presentBatch is the presentation token of a batch's review page over
// every call it shows, posted back with its decision.
func (c *Console) presentBatch(v *viewer, calls []*queue.Call) string {
	return c.q.Present(present.PageBatch, v.user.Name, calls...)
}

// once is ids without repeats, in their first order.
func once(ids []string) []string {
	var out []string
	for _, id := range ids {
		if id != "" && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// markDiffers marks the facts and the argument values that are not the
// same in every call of the batch (a value missing from some call
// differs).
func markDiffers(bv *templates.BatchView, calls []*queue.Call) {
	if len(calls) < 2 {
		return
	}
	for _, f := range []struct {
		name string
		of   func(*queue.Call) string
	}{
		{"tool", func(c *queue.Call) string { return c.Tool }},
		{"target", func(c *queue.Call) string { return c.Target }},
		{"actor", func(c *queue.Call) string { return c.Actor }},
		{"audience", func(c *queue.Call) string { return c.Audience }},
	} {
		for _, c := range calls[1:] {
			if f.of(c) != f.of(calls[0]) {
				bv.Differs[f.name] = true
			}
		}
	}
	seen := make([]map[string]string, len(bv.Calls))
	all := map[string]bool{}
	for i := range bv.Calls {
		seen[i] = map[string]string{}
		signatures(bv.Calls[i].Args, seen[i])
		for p := range seen[i] {
			all[p] = true
		}
	}
	differ := map[string]bool{}
	for p := range all {
		first, ok := seen[0][p]
		for _, m := range seen[1:] {
			if s, has := m[p]; !has || !ok || s != first {
				differ[p] = true
			}
		}
	}
	for i := range bv.Calls {
		mark(&bv.Calls[i].Args, differ)
	}
}

// signatures records, for every node under n, what it shows: its kind and,
// for a value, the value as shown. An object or an array is the same in
// two calls when its kind is; its members are compared one by one.
func signatures(n templates.ArgNode, into map[string]string) {
	sig := n.Kind
	if len(n.Children) == 0 {
		sig += "\x00" + shownText(n.Value) + "\x00" + n.Money
	}
	into[n.Pointer] = sig
	for _, ch := range n.Children {
		signatures(ch, into)
	}
}

func mark(n *templates.ArgNode, differ map[string]bool) {
	n.Differs = n.Pointer != "" && differ[n.Pointer]
	for i := range n.Children {
		mark(&n.Children[i], differ)
	}
}

// batchItems reads the calls and the digests a batch's form posted, in
// pairs.
func batchItems(ec echo.Context) ([]queue.BatchItem, []string, bool) {
	form := ec.Request().PostForm
	ids, digests := form["id"], form["digest"]
	if len(ids) != len(digests) {
		return nil, ids, false
	}
	items := make([]queue.BatchItem, len(ids))
	for i := range ids {
		items[i] = queue.BatchItem{CallID: ids[i], Digest: digests[i]}
	}
	return items, ids, true
}

func (c *Console) approveBatch(ec echo.Context) error {
	return c.decideBatch(ec, false)
}

func (c *Console) denyBatch(ec echo.Context) error {
	return c.decideBatch(ec, true)
}

// decideBatch makes the batch decision the form posted and shows what it
// did; a refusal of the whole batch shows the review page again with the
// reason.
func (c *Console) decideBatch(ec echo.Context, deny bool) error {
	v := viewerOf(ec)
	form := ec.Request().PostForm
	items, ids, ok := batchItems(ec)
	if !ok {
		return c.renderBatch(ec, http.StatusBadRequest, ids, errBatchForm, form.Get("reason"))
	}
	in := queue.BatchInput{Operator: v.user.Name, Channel: audit.ChannelWeb, Items: items, Reason: form.Get("reason"),
		Presented: form.Get("presented")}
	ctx := ec.Request().Context()
	var res *queue.BatchResult
	var err error
	if deny {
		res, err = c.q.DenyBatch(ctx, in)
	} else {
		res, err = c.q.ApproveBatch(ctx, in)
	}
	if err != nil {
		return c.renderBatch(ec, http.StatusOK, ids, err, form.Get("reason"))
	}
	rv := templates.BatchResultView{Page: c.page(v, "Batch decision", "queue", "", c.now()), Denied: deny}
	for _, d := range res.Decided {
		rv.Decided = append(rv.Decided, templates.BatchLine{ID: d.ID, Tool: reveal.Of(d.Tool), Target: reveal.Of(d.Target)})
		if d.Denial != nil {
			rv.Reason = d.Denial.Reason
		}
	}
	for _, d := range res.Dropped {
		l := templates.BatchLine{ID: d.CallID, Tool: reveal.Of(d.CallID), Why: droppedWhy(d.Err)}
		if call, err := c.q.Call(ctx, d.CallID); err == nil {
			l.Tool, l.Target = reveal.Of(call.Tool), reveal.Of(call.Target)
		}
		rv.Dropped = append(rv.Dropped, l)
	}
	return c.render(ec, http.StatusOK, templates.BatchResultPage(rv))
}

// droppedWhy says why a call dropped out of a batch and what to do: the
// refusal's own message, except for a call that someone decided (or that
// expired) meanwhile, which needs nothing more from this batch's decider.
func droppedWhy(err error) string {
	var np *queue.NotPendingError
	if errors.As(err, &np) {
		if np.Expired {
			return "its decision deadline passed before this decision; it is expired, and the agent must propose it again if it is still needed"
		}
		return "it was decided meanwhile (it is " + string(np.Status) + " now); open it to see by whom, nothing more is needed from you"
	}
	return server.ErrorOf(err).Message
}

// errBatchForm refuses a batch form whose calls and digests do not pair
// up: it was not posted by the review page.
var errBatchForm = problem.New(http.StatusBadRequest, "batch_form",
	"the batch's calls and digests do not pair up; select the calls again on the queue and review them")

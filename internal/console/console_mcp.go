package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/mcp/catalog"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/web/templates"
)

// routesMCP serves the review of MCP servers' tool definitions: the list
// (admins), one definition (anyone logged in: operators open it from a
// call's page) and the review itself (admins).
func (c *Console) routesMCP(e *echo.Echo) {
	if c.cfg.Catalog == nil {
		return
	}
	e.GET("/admin/mcp", c.mcpReviewPage, c.requireSession, c.requireAdmin)
	e.GET("/tools/mcp/:server/:tool/:digest", c.mcpDefinitionPage, c.requireSession)
	e.POST("/admin/mcp/review", c.mcpReview, c.requireSession, c.requireCSRF, c.requireAdmin)
	e.POST("/admin/mcp/release", c.mcpRelease, c.requireSession, c.requireCSRF, c.requireAdmin)
}

// definitionURL is the page of one pinned definition.
func definitionURL(server, tool, digest string) string {
	return catalog.DefinitionPath(server, tool, digest)
}

// mcpCallInfo says where a call of a mirrored tool came from, or nil for
// any other call.
func mcpCallInfo(call *queue.Call) *templates.MCPCallInfo {
	server, tool, ok := canonical.SplitMirrored(call.Tool)
	if !ok {
		return nil
	}
	info := &templates.MCPCallInfo{Server: server, Tool: reveal.Of(tool)}
	if canonical.IsDigest(call.ToolDigest) {
		info.DefinitionURL = definitionURL(server, tool, call.ToolDigest)
	}
	return info
}

func (c *Console) mcpReviewPage(ec echo.Context) error {
	return c.renderReview(ec, http.StatusOK, "", "")
}

// renderReview shows the review list with a notice or an error.
func (c *Console) renderReview(ec echo.Context, status int, notice, errMsg string) error {
	v := viewerOf(ec)
	cat := c.cfg.Catalog
	view := templates.MCPReviewView{Page: c.page(v, "MCP tools", "admin", "", c.now()), CSRF: v.csrf, Notice: notice, Error: errMsg}
	for _, server := range cat.Servers() {
		sv := templates.MCPServerView{Name: server}
		q, held, err := cat.Quarantine(ec.Request().Context(), server)
		if err != nil {
			return err
		}
		if held {
			sv.Quarantined, sv.QuarantinedAt, sv.QuarantineReason = true, q.FirstSeen, strings.Join(q.Reasons, "; ")
		}
		entries := cat.Entries(server)
		// Pending first: they are what needs doing.
		for _, pendingFirst := range []bool{true, false} {
			for _, e := range entries {
				if (e.Status == catalog.Pending) != pendingFirst {
					continue
				}
				tool := reveal.Of(e.Pin.Tool)
				row := templates.MCPToolRow{Tool: tool, Status: string(e.Status), Digest: e.Digest, FirstSeen: e.FirstSeen,
					Changed: e.Previous != nil, URL: definitionURL(server, e.Pin.Tool, e.Digest),
					ReasonsCSV: strings.Join(e.Reasons, "; "), RulesMisfit: len(e.RuleProblems) > 0}
				row.Deceptive = tool.Deceptive() || reveal.Of(string(e.Definition)).Deceptive()
				sv.Tools = append(sv.Tools, row)
			}
		}
		view.Servers = append(view.Servers, sv)
	}
	return c.render(ec, status, templates.MCPReviewPage(view))
}

// mcpRelease lifts a server's quarantine.
func (c *Console) mcpRelease(ec echo.Context) error {
	v, server := viewerOf(ec), ec.Request().PostForm.Get("server")
	err := c.cfg.Catalog.Release(ec.Request().Context(), server, v.user.Name)
	switch {
	case errors.Is(err, catalog.ErrNotQuarantined):
		return c.renderReview(ec, http.StatusConflict, "", server+" is not quarantined.")
	case err != nil:
		return err
	}
	if c.cfg.Catalog.Quarantined(server) {
		return c.renderReview(ec, http.StatusOK, "", "Released, but "+server+" still lists more new definitions than may await review, so it is quarantined again. "+
			"Review its pending definitions, or have the server list fewer tools, then release it again.")
	}
	return c.renderReview(ec, http.StatusOK, "Released: "+server+"'s approved tools are served again.", "")
}

func (c *Console) mcpDefinitionPage(ec echo.Context) error {
	return c.renderDefinition(ec, http.StatusOK, ec.Param("server"), ec.Param("tool"), ec.Param("digest"), "", "")
}

// renderDefinition shows one pinned definition with a notice or an error.
func (c *Console) renderDefinition(ec echo.Context, status int, server, tool, digest, notice, errMsg string) error {
	v := viewerOf(ec)
	pin, prev, err := c.cfg.Catalog.Definition(ec.Request().Context(), server, tool, digest)
	if errors.Is(err, catalog.ErrNotFound) {
		c.ErrorPage(ec, http.StatusNotFound, "No such pinned definition: the server, tool or digest is unknown.")
		return nil
	}
	if err != nil {
		return err
	}
	dv := templates.MCPDefinitionView{
		Page:   c.page(v, server+"/"+tool, "admin", "", c.now()),
		Server: server, ToolName: tool, Tool: reveal.Of(tool), Status: string(pin.Status), Digest: pin.Digest,
		DigestGroups: groupsOfFour(pin.Digest), FirstSeen: pin.FirstSeen, Reasons: pin.Reasons,
		Lines: definitionLines(pin.Definition), Notice: notice, Error: errMsg,
		CanReview: v.user.Role.CanAdminister(), CSRF: v.csrf,
	}
	if pin.DecidedBy != "" {
		dv.DecidedBy, dv.DecidedAt = optText(pin.DecidedBy), pin.DecidedAt
	}
	var def struct {
		Description string          `json:"description"`
		Annotations json.RawMessage `json:"annotations"`
	}
	if json.Unmarshal(pin.Definition, &def) == nil {
		dv.Description = reveal.Of(def.Description)
		if len(def.Annotations) > 0 && string(def.Annotations) != "null" {
			dv.Annotations = definitionLines(def.Annotations)
		}
	}
	for _, e := range c.cfg.Catalog.Entries(server) {
		if e.Pin.Tool == tool && e.Digest == digest && e.Tool != nil && e.Tool.Mirror != nil {
			dv.Notes = e.Tool.Mirror.Notes
			dv.RuleProblems = e.RuleProblems
		}
	}
	if prev != nil {
		dv.PreviousURL = definitionURL(server, tool, prev.Digest)
		dv.Diff = diffLines(definitionLines(prev.Definition), dv.Lines)
	}
	return c.render(ec, status, templates.MCPDefinitionPage(dv))
}

func (c *Console) mcpReview(ec echo.Context) error {
	v, form := viewerOf(ec), ec.Request().PostForm
	server, tool, digest := form.Get("server"), form.Get("tool"), form.Get("digest")
	var approve bool
	switch form.Get("decision") {
	case "approve":
		approve = true
	case "reject":
	default:
		return c.renderDefinition(ec, http.StatusBadRequest, server, tool, digest, "", "choose approve or reject")
	}
	err := c.cfg.Catalog.Review(ec.Request().Context(), server, tool, digest, v.user.Name, approve)
	switch {
	case errors.Is(err, catalog.ErrNotPending):
		return c.renderDefinition(ec, http.StatusConflict, server, tool, digest, "", "This definition was already reviewed.")
	case errors.Is(err, catalog.ErrNotFound):
		c.ErrorPage(ec, http.StatusNotFound, "No such pinned definition: the server, tool or digest is unknown.")
		return nil
	case err != nil:
		return err
	}
	notice := "Rejected: calls of " + server + "/" + tool + " under this definition are refused."
	if approve {
		notice = "Approved: " + server + "/" + tool + " is callable while its server lists this definition."
	}
	return c.renderDefinition(ec, http.StatusOK, server, tool, digest, notice, "")
}

// definitionLines is canonical JSON indented, one revealed line each: the
// numbers and strings are exactly as pinned.
func definitionLines(def []byte) []templates.Text {
	var buf bytes.Buffer
	if err := json.Indent(&buf, def, "", "  "); err != nil {
		buf.Reset()
		buf.Write(def)
	}
	var out []templates.Text
	for _, l := range strings.Split(buf.String(), "\n") {
		out = append(out, reveal.Of(l))
	}
	return out
}

// maxDiffCells bounds the table of a definition diff. The lines come from
// an upstream: a 1 MiB schema indents to some 250,000 lines, and a longest
// common subsequence of two such would need hundreds of gigabytes.
const maxDiffCells = 4 << 20

// diffLines marks the lines of b against a: the common first and last
// lines, and a longest common subsequence of whole lines between them
// (definitions are small). When what lies between is too large for that,
// it is shown as removed, then added.
func diffLines(a, b []templates.Text) []templates.DiffLine {
	ka, kb := make([]string, len(a)), make([]string, len(b))
	for i, t := range a {
		ka[i] = shownText(t)
	}
	for j, t := range b {
		kb[j] = shownText(t)
	}
	pre := 0
	for pre < len(a) && pre < len(b) && ka[pre] == kb[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && ka[len(a)-1-suf] == kb[len(b)-1-suf] {
		suf++
	}
	out := make([]templates.DiffLine, 0, len(b)+len(a)-pre-suf)
	for j := range pre {
		out = append(out, templates.DiffLine{Op: " ", Text: b[j]})
	}
	tail := b[len(b)-suf:]
	a, b, ka, kb = a[pre:len(a)-suf], b[pre:len(b)-suf], ka[pre:len(ka)-suf], kb[pre:len(kb)-suf]
	n, m := len(a), len(b)
	if (n+1)*(m+1) > maxDiffCells {
		for i := range a {
			out = append(out, templates.DiffLine{Op: "-", Text: a[i]})
		}
		for j := range b {
			out = append(out, templates.DiffLine{Op: "+", Text: b[j]})
		}
	} else {
		lcs := make([][]int, n+1)
		for i := range lcs {
			lcs[i] = make([]int, m+1)
		}
		for i := n - 1; i >= 0; i-- {
			for j := m - 1; j >= 0; j-- {
				if ka[i] == kb[j] {
					lcs[i][j] = lcs[i+1][j+1] + 1
				} else {
					lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
				}
			}
		}
		i, j := 0, 0
		for i < n && j < m {
			switch {
			case ka[i] == kb[j]:
				out = append(out, templates.DiffLine{Op: " ", Text: b[j]})
				i, j = i+1, j+1
			case lcs[i+1][j] >= lcs[i][j+1]:
				out = append(out, templates.DiffLine{Op: "-", Text: a[i]})
				i++
			default:
				out = append(out, templates.DiffLine{Op: "+", Text: b[j]})
				j++
			}
		}
		for ; i < n; i++ {
			out = append(out, templates.DiffLine{Op: "-", Text: a[i]})
		}
		for ; j < m; j++ {
			out = append(out, templates.DiffLine{Op: "+", Text: b[j]})
		}
	}
	for _, t := range tail {
		out = append(out, templates.DiffLine{Op: " ", Text: t})
	}
	return out
}

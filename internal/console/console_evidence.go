package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/evidence"
)

// EvidencePackFunc writes an evidence pack of the entries between since
// and until to w, narrowed to tool and actor when they are set
// (evidence.Write with the console's audit key, grant keys and
// verifiers). A period with no entry is evidence.ErrEmpty.
type EvidencePackFunc func(ctx context.Context, w io.Writer, since, until time.Time, tool, actor string) error

// evidencePack is the admin page's "Download evidence pack": the pack of
// the period the form names, as a tar attachment. The pack is made in
// memory first, so that a failure is a page that says so, not half a
// file.
func (c *Console) evidencePack(ec echo.Context) error {
	if c.cfg.EvidencePack == nil {
		return c.renderAdmin(ec, http.StatusNotFound, "", "This console makes no evidence packs: it was started without its audit key.", nil)
	}
	form := ec.Request().PostForm
	tool, actor := strings.TrimSpace(form.Get("tool")), strings.TrimSpace(form.Get("actor"))
	since, err := packDate(form.Get("since"))
	var until time.Time
	if err == nil {
		until, err = packDate(form.Get("until"))
		until = until.AddDate(0, 0, 1) // the last day named is included
	}
	if err == nil && !until.After(since) {
		err = errors.New("the last day must not come before the first")
	}
	if err != nil {
		return c.renderAdmin(ec, http.StatusBadRequest, "", "Evidence pack: "+err.Error()+". Give the first and the last day of the period (YYYY-MM-DD, UTC).", nil)
	}
	var buf bytes.Buffer
	err = c.cfg.EvidencePack(ec.Request().Context(), &buf, since, until, tool, actor)
	if errors.Is(err, evidence.ErrEmpty) {
		return c.renderAdmin(ec, http.StatusNotFound, "", fmt.Sprintf("Evidence pack: the audit trail has no entry from %s to %s; choose another period.",
			since.Format(time.DateOnly), until.AddDate(0, 0, -1).Format(time.DateOnly)), nil)
	}
	if err != nil {
		return err
	}
	name := fmt.Sprintf("countersign-evidence-%s-%s.tar", since.Format("20060102"), until.AddDate(0, 0, -1).Format("20060102"))
	h := ec.Response().Header()
	h.Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`"`)
	h.Set("Cache-Control", "no-store")
	return ec.Blob(http.StatusOK, "application/x-tar", buf.Bytes())
}

// packDate reads a day of the evidence pack form: YYYY-MM-DD, UTC.
func packDate(s string) (time.Time, error) {
	t, err := time.Parse(time.DateOnly, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a day (YYYY-MM-DD)", s)
	}
	return t, nil
}

package console

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
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

// maxPacks bounds the evidence packs made at once: each reads the audit
// trail of its period and the calls it names, and spools the pack to a
// temporary file. One account makes one at a time.
const (
	maxPacks           = 1
	maxPacksPerAccount = 1
)

// evidencePack is the admin page's "Download evidence pack": the pack of
// the period the form names, as a tar attachment. The pack is written to
// a temporary file first, so that a failure is a page that says so, not
// half a file, and a pack of gigabytes is not held in memory.
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
	release, err := c.packs.take(viewerOf(ec).user.Name)
	switch {
	case errors.Is(err, errOwnerSlotsFull):
		return c.renderAdmin(ec, http.StatusTooManyRequests, "", "Evidence pack: the one you asked for is still being made; wait for its download, then ask again.", nil)
	case err != nil:
		return c.renderAdmin(ec, http.StatusTooManyRequests, "", "Evidence pack: another administrator's pack is being made; try again in a minute.", nil)
	}
	defer release()
	f, err := os.CreateTemp("", "countersign-evidence-*.tar")
	if err != nil {
		return fmt.Errorf("console: evidence pack: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	err = c.cfg.EvidencePack(ec.Request().Context(), bw, since, until, tool, actor)
	if errors.Is(err, evidence.ErrEmpty) {
		return c.renderAdmin(ec, http.StatusNotFound, "", fmt.Sprintf("Evidence pack: the audit trail has no entry from %s to %s; choose another period.",
			since.Format(time.DateOnly), until.AddDate(0, 0, -1).Format(time.DateOnly)), nil)
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		return err
	}
	name := fmt.Sprintf("countersign-evidence-%s-%s.tar", since.Format("20060102"), until.AddDate(0, 0, -1).Format("20060102"))
	w := newAttachment(ec, "application/x-tar", name)
	_, err = io.Copy(w, f)
	return w.finish(err, c.log)
}

// packDate reads a day of the evidence pack form: YYYY-MM-DD, UTC.
func packDate(s string) (time.Time, error) {
	t, err := time.Parse(time.DateOnly, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a day (YYYY-MM-DD)", s)
	}
	return t, nil
}

package console

import (
	"io"
	"net/http/httptest"

	"github.com/PuerkitoBio/goquery"

	"github.com/countersign/countersign/web/static"
)

type goquerySelection = goquery.Selection

// cssForTest fetches the stylesheet the pages link to.
func (e *consoleEnv) cssForTest() string {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", static.URL("app.css"), nil)
	req.Host = "127.0.0.1"
	e.srv.Handler().ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

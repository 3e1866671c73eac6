package static

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestHashedURLs(t *testing.T) {
	h := Handler()
	for _, name := range []string{"app.css", "app.js", "notify.js", "sw.js", "htmx.min.js", "htmx-ext-ws.min.js"} {
		u := URL(name)
		if !regexp.MustCompile(`^/static/[a-z.-]+\.[0-9a-f]{12}\.(css|js)$`).MatchString(u) {
			t.Errorf("URL(%s) = %q, want a content-hashed name", name, u)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", u, nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Header().Get("Cache-Control"), "immutable") {
			t.Errorf("GET %s = %d, Cache-Control %q", u, rec.Code, rec.Header().Get("Cache-Control"))
		}
		wantType := "text/css"
		if strings.HasSuffix(name, ".js") {
			wantType = "text/javascript"
		}
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, wantType) {
			t.Errorf("GET %s Content-Type = %q, want %s", u, ct, wantType)
		}
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", Prefix+name, nil))
		if rec.Code != http.StatusOK || rec.Header().Get("Cache-Control") != "no-cache" {
			t.Errorf("GET plain %s = %d, Cache-Control %q", name, rec.Code, rec.Header().Get("Cache-Control"))
		}
	}
	for _, bad := range []string{Prefix + "nope.js", Prefix + "app.000000000000.css", Prefix + "../static.go", Prefix} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", bad, nil))
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", bad, rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", URL("app.js"), nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST = %d, want 405", rec.Code)
	}
}

func TestVendoredVersions(t *testing.T) {
	for name, want := range map[string]string{"htmx.min.js": `version:"2.0.11"`, "htmx-ext-ws.min.js": `defineExtension("ws"`} {
		b, err := files.ReadFile(name)
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s does not contain %s (%v)", name, want, err)
		}
	}
}

func TestURLPanicsOnUnknownAsset(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("URL of an unknown asset did not panic")
		}
	}()
	URL("missing.css")
}

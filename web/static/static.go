// Package static embeds the console's browser assets (CSS, its script, and
// the vendored htmx with its WebSocket extension) and serves them under
// content-hashed names, so that a page always loads the assets it was
// rendered with and browsers may cache them forever.
package static

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed *.css *.js *.svg
var files embed.FS

// Prefix is the URL path the assets are served under.
const Prefix = "/static/"

type asset struct {
	name   string // file name, e.g. app.css
	hashed string // name with the content hash, e.g. app.3f2a9c1b0d4e.css
	url    string // Prefix and hashed, made once: every page links its assets
	body   []byte
	ctype  string
}

// assets is built once at start-up from the embedded files and only read
// afterwards.
var assets, byHashed = load()

func load() (map[string]*asset, map[string]*asset) {
	byName, byHash := map[string]*asset{}, map[string]*asset{}
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		body, err := files.ReadFile(e.Name())
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(body)
		ext := path.Ext(e.Name())
		a := &asset{name: e.Name(), body: body, ctype: mime.TypeByExtension(ext),
			hashed: strings.TrimSuffix(e.Name(), ext) + "." + hex.EncodeToString(sum[:6]) + ext}
		a.url = Prefix + a.hashed
		if a.ctype == "" {
			a.ctype = "application/octet-stream"
		}
		byName[a.name], byHash[a.hashed] = a, a
	}
	return byName, byHash
}

// URL returns the cache-busting URL of an asset by file name. It panics on
// a name that is not embedded, which the templates' tests catch.
func URL(name string) string {
	a, ok := assets[name]
	if !ok {
		panic("static: no asset " + name)
	}
	return a.url
}

// Handler serves the assets under Prefix. Hashed names are cached for a
// year; plain names are served too, revalidated on every use.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, Prefix)
		a, immutable := byHashed[name]
		if !immutable {
			a = assets[name]
		}
		if a == nil {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.ctype)
		if immutable {
			h.Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			h.Set("Cache-Control", "no-cache")
		}
		h.Set("ETag", `"`+a.hashed+`"`)
		http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.body))
	})
}

// Plain serves one asset under whatever path it is routed to, revalidated
// on every use: the service worker, whose URL must not change.
func Plain(name string) http.Handler {
	a, ok := assets[name]
	if !ok {
		panic("static: no asset " + name)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", a.ctype)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", `"`+a.hashed+`"`)
		http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.body))
	})
}

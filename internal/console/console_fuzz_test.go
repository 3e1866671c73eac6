package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
)

// forgetStrikes deletes every failed login the throttle keeps.
func forgetStrikes(tb testing.TB, e *consoleEnv) {
	tb.Helper()
	far := e.clock.Now().Add(100 * 365 * 24 * time.Hour)
	if err := e.db.Accounts().Update(context.Background(), func(tx account.Tx) error { return tx.PruneLoginStrikes(far) }); err != nil {
		tb.Fatal(err)
	}
}

// FuzzLoginForm posts arbitrary form bodies to the login handler. Pages
// send nothing meaningful on their sockets, so the login form is the
// console's parser of untrusted input. Whatever arrives, the handler
// answers with a page (never a 5xx), and logs in only with the right
// name, password, form token and cookie.
func FuzzLoginForm(f *testing.F) {
	e := newConsoleEnv(f)
	e.addUser("olivia", account.RoleOperator, rolePassword)
	h := e.srv.Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", e.url+"/login", nil))
	pre := findCookie(rec.Result(), e.c.cookieName)
	if pre == nil {
		f.Fatal("no login cookie")
	}
	token, _ := fragmentDoc(f, rec.Body.String()).Find(`input[name="csrf"]`).Attr("value")

	f.Add("name=olivia&password="+url.QueryEscape(rolePassword), true, true)
	f.Add("name=olivia&password=wrong", true, true)
	f.Add("name=olivia&password="+url.QueryEscape(rolePassword), false, true)
	f.Add("name=olivia&password="+url.QueryEscape(rolePassword), true, false)
	f.Add("name=%3Cscript%3Ealert(1)%3C%2Fscript%3E&password=x", true, true)
	f.Add("name=olivia&name=adam&password="+url.QueryEscape(rolePassword), true, true)
	f.Add("csrf=forged&name=olivia&password="+url.QueryEscape(rolePassword), true, true)
	f.Add("%zz", true, true)
	f.Add("", false, false)

	f.Fuzz(func(t *testing.T, body string, withToken, withCookie bool) {
		// Throttling would hide the handler behind 429s; it has its own tests.
		forgetStrikes(t, e)
		form := body
		if withToken {
			form += "&csrf=" + token
		}
		req := httptest.NewRequest("POST", e.url+"/login", strings.NewReader(form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if withCookie {
			req.AddCookie(pre)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusSeeOther, http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests:
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, form, rec.Body.String())
		}
		if rec.Header().Get("Content-Security-Policy") == "" {
			t.Fatal("response without the CSP")
		}
		vals, perr := url.ParseQuery(form)
		right := perr == nil && withCookie && vals.Get("csrf") == token &&
			vals.Get("name") == "olivia" && vals.Get("password") == rolePassword
		if (rec.Code == http.StatusSeeOther) != right {
			t.Fatalf("form %q (token %v, cookie %v): status %d, want a login exactly when everything is right", form, withToken, withCookie, rec.Code)
		}
		if rec.Code != http.StatusSeeOther {
			// The page is the login form again; the name is kept only when
			// it is a valid account name, and nothing was injected.
			doc := fragmentDoc(t, rec.Body.String())
			if kept, _ := doc.Find(`input[name="name"]`).Attr("value"); kept != "" && (kept != vals.Get("name") || account.CheckName(kept) != nil) {
				t.Fatalf("the form kept the name %q", kept)
			}
			if n := doc.Find("script").Length(); n != 5 {
				t.Fatalf("%d script elements, want the 5 static ones", n)
			}
			doc.Find("*").Each(func(_ int, s *goquerySelection) {
				for _, a := range s.Nodes[0].Attr {
					if strings.HasPrefix(a.Key, "on") {
						t.Fatalf("injected attribute %s", a.Key)
					}
				}
			})
			return
		}
		// The new cookie authenticates, and it is not the login form's.
		sess := findCookie(rec.Result(), e.c.cookieName)
		if sess == nil || sess.Value == pre.Value {
			t.Fatal("login without a new session cookie")
		}
		req = httptest.NewRequest("GET", e.url+"/", nil)
		req.AddCookie(sess)
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("the new session cookie: GET / = %d", rec.Code)
		}
	})
}

package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/client"
	"github.com/countersign/countersign/docs"
	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/mcp/catalog"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
	"github.com/countersign/countersign/internal/wire"
)

// apiDoc is docs/openapi.yaml read for checking: every operation with its
// documented responses, each response schema compiled as JSON Schema.
type apiDoc struct {
	ops      map[string]*docOp // "GET /api/v1/calls/{id}"
	compiler *jsonschema.Compiler
	schemas  map[string]*jsonschema.Schema
	// components are the component schemas as written, for following the
	// members an answer sends (cover).
	components map[string]any
	// seen holds the members of the description's objects that some
	// checked answer carried, as "Schema.member.member".
	seen map[string]bool
}

type docOp struct {
	public bool
	// responses maps a status code to media type to the $defs key of the
	// schema of its body.
	responses map[string]map[string]string
	// raw maps a status code to media type to the response's schema and
	// examples as written.
	raw map[string]map[string]docMedia
}

type docMedia struct {
	schema   any
	examples map[string]any // name (or "example") to value
}

const docRoot = "https://countersign.invalid/openapi.json"

var docMethods = []string{"get", "put", "post", "delete", "patch", "head", "options"}

func loadAPIDoc(t *testing.T) *apiDoc {
	t.Helper()
	var raw any
	if err := yaml.Unmarshal(docs.OpenAPI, &raw); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	root := jsonCompatible(t, raw).(map[string]any)
	if got := root["openapi"]; got != "3.1.0" {
		t.Fatalf("openapi=%v, want 3.1.0", got)
	}
	components := mapAt(t, root, "components")
	if _, ok := mapAt(t, components, "securitySchemes")["bearer"]; !ok {
		t.Fatalf("components.securitySchemes has no bearer scheme")
	}
	defs := map[string]any{}
	for name, s := range mapAt(t, components, "schemas") {
		defs[name] = rewriteRefs(s)
	}
	d := &apiDoc{ops: map[string]*docOp{}, schemas: map[string]*jsonschema.Schema{},
		components: mapAt(t, components, "schemas"), seen: map[string]bool{}}
	responses := mapAt(t, components, "responses")
	globalPublic := isEmptyList(root["security"])

	n := 0
	for path, item := range mapAt(t, root, "paths") {
		for _, method := range docMethods {
			o, ok := item.(map[string]any)[method].(map[string]any)
			if !ok {
				continue
			}
			key := strings.ToUpper(method) + " " + path
			op := &docOp{public: globalPublic, responses: map[string]map[string]string{}, raw: map[string]map[string]docMedia{}}
			if sec, ok := o["security"]; ok {
				op.public = isEmptyList(sec)
			}
			rs := mapAt(t, o, "responses")
			if len(rs) == 0 {
				t.Errorf("%s documents no responses", key)
			}
			for status, r := range rs {
				resp := r.(map[string]any)
				if ref, ok := resp["$ref"].(string); ok {
					name, _ := strings.CutPrefix(ref, "#/components/responses/")
					var found bool
					if resp, found = responses[name].(map[string]any); !found {
						t.Fatalf("%s %s: $ref %s does not resolve", key, status, ref)
					}
				}
				if _, ok := resp["description"].(string); !ok {
					t.Errorf("%s %s has no description", key, status)
				}
				op.responses[status] = map[string]string{}
				op.raw[status] = map[string]docMedia{}
				content, _ := resp["content"].(map[string]any)
				for mt, m := range content {
					schema, ok := m.(map[string]any)["schema"]
					if !ok {
						t.Errorf("%s %s %s has no schema", key, status, mt)
						continue
					}
					op.raw[status][mt] = docMedia{schema: schema, examples: mediaExamples(t, key+" "+status+" "+mt, m.(map[string]any))}
					n++
					def := fmt.Sprintf("response_%d", n)
					defs[def] = rewriteRefs(schema)
					op.responses[status][mt] = def
				}
			}
			d.ops[key] = op
		}
	}
	text, err := json.Marshal(map[string]any{"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": defs})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	d.compiler = jsonschema.NewCompiler()
	d.compiler.AssertFormat()
	if err := d.compiler.AddResource(docRoot, doc); err != nil {
		t.Fatal(err)
	}
	// Every schema compiles, so a dangling $ref fails here.
	for name := range defs {
		if _, err := d.schema(name); err != nil {
			t.Errorf("schema %s: %v", name, err)
		}
	}
	return d
}

func (d *apiDoc) schema(def string) (*jsonschema.Schema, error) {
	if s, ok := d.schemas[def]; ok {
		return s, nil
	}
	s, err := d.compiler.Compile(docRoot + "#/$defs/" + def)
	if err != nil {
		return nil, err
	}
	d.schemas[def] = s
	return s, nil
}

// conform checks that op documents the response's status, content type and
// body.
func (d *apiDoc) conform(t *testing.T, op string, status int, contentType string, body []byte) {
	t.Helper()
	o, ok := d.ops[op]
	if !ok {
		t.Errorf("%s is not documented", op)
		return
	}
	media, ok := o.responses[strconv.Itoa(status)]
	if !ok {
		t.Errorf("%s answered %d, which is not documented: %s", op, status, body)
		return
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		t.Errorf("%s %d: Content-Type %q: %v", op, status, contentType, err)
		return
	}
	def, ok := media[mt]
	if !ok {
		t.Errorf("%s %d answered %s, documented %v", op, status, mt, media)
		return
	}
	s, err := d.schema(def)
	if err != nil {
		t.Errorf("%s %d: %v", op, status, err)
		return
	}
	var v any = string(body)
	if mt == "application/json" || strings.HasSuffix(mt, "+json") {
		if v, err = jsonschema.UnmarshalJSON(bytes.NewReader(body)); err != nil {
			t.Errorf("%s %d: body is not JSON: %v", op, status, err)
			return
		}
	}
	if err := s.Validate(v); err != nil {
		t.Errorf("%s %d: the body does not match the documented schema: %v\nbody: %s", op, status, err, body)
	}
	d.cover(o.raw[strconv.Itoa(status)][mt].schema, v, op+" "+strconv.Itoa(status))
}

// mediaExamples reads a media type's example, or its named examples.
func mediaExamples(t *testing.T, where string, m map[string]any) map[string]any {
	t.Helper()
	out := map[string]any{}
	if v, ok := m["example"]; ok {
		out["example"] = v
	}
	if ex, ok := m["examples"]; ok {
		named, ok := ex.(map[string]any)
		if !ok {
			t.Fatalf("%s: examples is not a mapping of named examples", where)
		}
		for name, e := range named {
			v, ok := e.(map[string]any)["value"]
			if !ok {
				t.Fatalf("%s: example %s has no value", where, name)
			}
			out[name] = v
		}
	}
	return out
}

// ref resolves a reference to a component schema: its name and schema.
func (d *apiDoc) ref(s map[string]any) (string, map[string]any, bool) {
	r, ok := s["$ref"].(string)
	if !ok {
		return "", nil, false
	}
	name, _ := strings.CutPrefix(r, "#/components/schemas/")
	c, _ := d.components[name].(map[string]any)
	return name, c, true
}

// isObject reports whether a schema declares an object type.
func isObject(s map[string]any) bool {
	switch ty := s["type"].(type) {
	case string:
		return ty == "object"
	case []any:
		for _, x := range ty {
			if x == "object" {
				return true
			}
		}
	}
	return false
}

// fields adds to into every member the objects reachable from schema
// declare, as "Schema.member": the members of the component schemas an
// answer may carry. A schema that only narrows another (allOf with
// properties but no type) declares none.
func (d *apiDoc) fields(schema any, key string, into, done map[string]bool) {
	s, ok := schema.(map[string]any)
	if !ok {
		return
	}
	if name, c, ok := d.ref(s); ok {
		if !done[name] {
			done[name] = true
			d.fields(c, name, into, done)
		}
		return
	}
	for _, k := range []string{"allOf", "oneOf", "anyOf"} {
		list, _ := s[k].([]any)
		for _, sub := range list {
			d.fields(sub, key, into, done)
		}
	}
	if props, ok := s["properties"].(map[string]any); ok && isObject(s) {
		for p, ps := range props {
			into[key+"."+p] = true
			d.fields(ps, key+"."+p, into, done)
		}
	}
	if items, ok := s["items"]; ok {
		d.fields(items, key+"[]", into, done)
	}
}

// cover records in seen the declared members that value carries, walking
// schema and value together.
func (d *apiDoc) cover(schema, value any, key string) {
	s, ok := schema.(map[string]any)
	if !ok {
		return
	}
	if name, c, ok := d.ref(s); ok {
		d.cover(c, value, name)
		return
	}
	for _, k := range []string{"allOf", "oneOf", "anyOf"} {
		list, _ := s[k].([]any)
		for _, sub := range list {
			d.cover(sub, value, key)
		}
	}
	if props, ok := s["properties"].(map[string]any); ok && isObject(s) {
		if obj, ok := value.(map[string]any); ok {
			for p, ps := range props {
				if v, ok := obj[p]; ok {
					d.seen[key+"."+p] = true
					d.cover(ps, v, key+"."+p)
				}
			}
		}
	}
	if items, ok := s["items"]; ok {
		if list, ok := value.([]any); ok {
			for _, e := range list {
				d.cover(items, e, key+"[]")
			}
		}
	}
}

// unsent lists the members the answers' schemas declare that no checked
// answer carried.
func (d *apiDoc) unsent() []string {
	all, done := map[string]bool{}, map[string]bool{}
	for _, o := range d.ops {
		for _, media := range o.raw {
			for _, m := range media {
				d.fields(m.schema, "", all, done)
			}
		}
	}
	var out []string
	for f := range all {
		if !d.seen[f] {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

func mapAt(t *testing.T, m map[string]any, key string) map[string]any {
	t.Helper()
	v, ok := m[key].(map[string]any)
	if !ok {
		t.Fatalf("%s is missing or not a mapping", key)
	}
	return v
}

func isEmptyList(v any) bool {
	l, ok := v.([]any)
	return ok && len(l) == 0
}

// jsonCompatible turns YAML values into what encoding/json writes.
func jsonCompatible(t *testing.T, v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonCompatible(t, e)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = jsonCompatible(t, e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonCompatible(t, e)
		}
		return out
	case nil, string, bool, int, int64, float64:
		return x
	}
	t.Fatalf("unexpected YAML value %T", v)
	return nil
}

// rewriteRefs points component schema references into $defs.
func rewriteRefs(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if s, ok := e.(string); ok && k == "$ref" {
				e = strings.Replace(s, "#/components/schemas/", "#/$defs/", 1)
			}
			out[k] = rewriteRefs(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = rewriteRefs(e)
		}
		return out
	}
	return v
}

// docPath turns a router path (/api/v1/calls/:id) into the OpenAPI form.
func docPath(p string) string {
	return regexp.MustCompile(`:([A-Za-z_][A-Za-z0-9_]*)`).ReplaceAllString(p, "{$1}")
}

// documentedPrefixes are the parts of the URL space the description covers;
// the browser console is outside it.
func documented(path string) bool {
	return path == "/healthz" || path == "/metrics" || strings.HasPrefix(path, "/api/v1/")
}

// openAPIStack is a real server on 127.0.0.1, booted like `console serve`.
type openAPIStack struct {
	url   string
	db    *db.DB
	queue *queue.Service
	srv   *server.Server
	cat   *catalog.Catalog
}

// openAPIOption changes how a stack is booted: a tools file with rules, a
// replica's listener.
type openAPIOption func(*queue.Config, *server.Config)

func startOpenAPIStack(t *testing.T, opts ...openAPIOption) *openAPIStack {
	t.Helper()
	dir := t.TempDir()
	d, err := db.Open(filepath.Join(dir, "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := grant.OpenKeyring(filepath.Join(dir, "keys"), "countersign", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.Load("../../examples/tools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	testkit.SeedUsers(t, d.Accounts(), account.RoleOperator, "alice")
	shown, err := present.NewKey([]byte("the API tests' presentation key."))
	if err != nil {
		t.Fatal(err)
	}
	qcfg := queue.Config{Store: d.Store(), Tools: reg, Signer: keys, Logger: log, Presentations: shown}
	scfg := server.Config{Accounts: account.NewService(d.Accounts(), nil), Audit: d, Ping: d.Ping, Keys: keys, Logger: log, OpenAPI: docs.OpenAPI,
		OperatorAPI: true}
	for _, o := range opts {
		o(&qcfg, &scfg)
	}
	q := queue.NewService(qcfg)
	scfg.Queue = q
	if scfg.Catalog == nil {
		scfg.Catalog = catalog.New(catalog.Config{Store: d.Catalog(), Registry: qcfg.Tools, Logger: log})
	}
	srv, err := server.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		q.Shutdown()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		d.Close()
	})
	return &openAPIStack{url: "http://" + ln.Addr().String(), db: d, queue: q, srv: srv, cat: scfg.Catalog}
}

func (st *openAPIStack) token(t *testing.T, actor, audience string) string {
	t.Helper()
	_, secret, err := account.NewService(st.db.Accounts(), nil).CreateToken(context.Background(), actor, audience, "", "test", audit.ChannelCLI)
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// disconnected is a replica's listener that has lost its connection.
type disconnected struct{}

func (disconnected) Connected() bool   { return false }
func (disconnected) Reconnects() int64 { return 1 }

type docRequest struct {
	op          string // documented operation: "POST /api/v1/calls"
	path        string // concrete path and query
	token       string
	contentType string // default application/json when there is a body
	body        string
}

type docResponse struct {
	status      int
	contentType string
	body        []byte
	json        map[string]any
}

func (st *openAPIStack) do(t *testing.T, r docRequest) docResponse {
	t.Helper()
	method, _, _ := strings.Cut(r.op, " ")
	var rd io.Reader
	if r.body != "" {
		rd = strings.NewReader(r.body)
	}
	req, err := http.NewRequest(method, st.url+r.path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if r.body != "" {
		ct := r.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, r.path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := docResponse{status: res.StatusCode, contentType: res.Header.Get("Content-Type"), body: body}
	if strings.Contains(out.contentType, "json") {
		_ = json.Unmarshal(body, &out.json)
	}
	return out
}

func TestOpenAPIRoutesMatchServer(t *testing.T) {
	doc := loadAPIDoc(t)
	st := startOpenAPIStack(t)

	served := map[string]bool{}
	for _, r := range st.srv.Routes() {
		method, path, _ := strings.Cut(r, " ")
		if documented(path) {
			served[method+" "+docPath(path)] = true
		}
	}
	if len(served) == 0 {
		t.Fatalf("Routes() listed no API routes: %v", st.srv.Routes())
	}
	var undocumented, unserved []string
	for r := range served {
		if doc.ops[r] == nil {
			undocumented = append(undocumented, r)
		}
	}
	for op := range doc.ops {
		if !served[op] {
			unserved = append(unserved, op)
		}
	}
	sort.Strings(undocumented)
	sort.Strings(unserved)
	if len(undocumented) > 0 {
		t.Errorf("routes served but not in docs/openapi.yaml: %v", undocumented)
	}
	if len(unserved) > 0 {
		t.Errorf("operations in docs/openapi.yaml that the server does not route: %v", unserved)
	}

	// Every documented operation answers, and asks for a token exactly
	// when the description says so.
	token := st.token(t, "agent:doc-bot", "payments-host")
	call := st.do(t, docRequest{op: "POST /api/v1/calls", path: "/api/v1/calls", token: token,
		body: `{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":1,"currency":"USD","reason_code":"fraud"}}`})
	id, _ := call.json["id"].(string)
	if call.status != http.StatusCreated || id == "" {
		t.Fatalf("submit: %d %s", call.status, call.body)
	}
	ops := make([]string, 0, len(doc.ops))
	for op := range doc.ops {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		method, path, _ := strings.Cut(op, " ")
		concrete := strings.ReplaceAll(strings.ReplaceAll(path, "{id}", id), "{n}", "0")
		if strings.Contains(concrete, "{") {
			t.Errorf("%s: no value for a path parameter in the test", op)
			continue
		}
		body := ""
		if method == http.MethodPost {
			body = `{}`
		}
		anon := st.do(t, docRequest{op: op, path: concrete, body: body})
		if doc.ops[op].public {
			if anon.status == http.StatusUnauthorized {
				t.Errorf("%s is documented as public but answered 401", op)
			}
			doc.conform(t, op, anon.status, anon.contentType, anon.body)
		} else {
			if anon.status != http.StatusUnauthorized {
				t.Errorf("%s without a token: %d, want 401 (the description requires a bearer token)", op, anon.status)
			}
		}
		authed := st.do(t, docRequest{op: op, path: concrete, token: token, body: body})
		// The router answers an unknown path 404 "no such route" and a known
		// path with another method 405.
		for _, r := range []docResponse{anon, authed} {
			if r.status == http.StatusMethodNotAllowed ||
				r.status == http.StatusNotFound && strings.Contains(string(r.body), "no such route") {
				t.Errorf("%s: %d %s, want the route to answer", op, r.status, r.body)
			}
		}
	}
}

func TestOpenAPIDescribesResponses(t *testing.T) {
	doc := loadAPIDoc(t)
	st := startOpenAPIStack(t)
	ctx := context.Background()
	token := st.token(t, "agent:billing-bot", "payments-host")
	seen := map[string]map[int]bool{}

	checkOn := func(st *openAPIStack, r docRequest, want int) docResponse {
		t.Helper()
		res := st.do(t, r)
		if res.status != want {
			t.Errorf("%s %s: %d %s, want %d", r.op, r.path, res.status, res.body, want)
		}
		doc.conform(t, r.op, res.status, res.contentType, res.body)
		if seen[r.op] == nil {
			seen[r.op] = map[int]bool{}
		}
		seen[r.op][res.status] = true
		return res
	}
	check := func(r docRequest, want int) docResponse {
		t.Helper()
		return checkOn(st, r, want)
	}
	const submit = "POST /api/v1/calls"
	const get = "GET /api/v1/calls/{id}"
	const cancel = "DELETE /api/v1/calls/{id}"
	const outcome = "POST /api/v1/calls/{id}/outcome"
	const redeem = "POST /api/v1/redeem"
	const heartbeat = "POST /api/v1/calls/{id}/heartbeat"
	refund := func(amount int) string {
		return fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-9","args":{"amount_minor":%d,"currency":"USD","reason_code":"duplicate","notes":"<&>"},"rationale":"charged twice"}`, amount)
	}

	created := check(docRequest{op: submit, path: "/api/v1/calls", token: token, body: refund(1299)}, http.StatusCreated)
	id, _ := created.json["id"].(string)
	digest, _ := created.json["digest"].(string)
	check(docRequest{op: submit, path: "/api/v1/calls", token: token, body: refund(1299)}, http.StatusOK)
	check(docRequest{op: submit, path: "/api/v1/calls", token: token, body: `{"tool":"payments.refund","tool":"x"}`}, http.StatusBadRequest)
	check(docRequest{op: submit, path: "/api/v1/calls", body: refund(1)}, http.StatusUnauthorized)
	check(docRequest{op: submit, path: "/api/v1/calls", token: token,
		body: `{"tool":"files.delete","target":"file:/srv/shared/a","args":{"reason":"old"}}`}, http.StatusForbidden)
	check(docRequest{op: submit, path: "/api/v1/calls", token: token,
		body: `{"tool":"payments.refund","target":"invoice:INV-9","args":{"notes":"` + strings.Repeat("a", 300<<10) + `"}}`}, http.StatusRequestEntityTooLarge)
	check(docRequest{op: submit, path: "/api/v1/calls", token: token, contentType: "text/plain", body: refund(1)}, http.StatusUnsupportedMediaType)
	check(docRequest{op: submit, path: "/api/v1/calls", token: token,
		body: `{"tool":"payments.refund","target":"invoice:INV-9","args":{"amount_minor":5,"reason_code":"fraud","sql":"DROP"}}`}, http.StatusUnprocessableEntity)
	check(docRequest{op: submit, path: "/api/v1/calls", token: token,
		body: `{"tool":"payments.teleport","target":"invoice:INV-9","args":{}}`}, http.StatusUnprocessableEntity)

	loopy := st.token(t, "agent:loopy", "payments-host")
	for range queue.RetryLimit {
		check(docRequest{op: submit, path: "/api/v1/calls", token: loopy,
			body: `{"tool":"payments.refund","target":"invoice:INV-9","args":{"sql":"1"}}`}, http.StatusUnprocessableEntity)
	}
	check(docRequest{op: submit, path: "/api/v1/calls", token: loopy, body: refund(2)}, http.StatusTooManyRequests)

	denied := check(docRequest{op: submit, path: "/api/v1/calls", token: token, body: refund(3)}, http.StatusCreated)
	deniedID, _ := denied.json["id"].(string)
	if _, err := st.queue.Deny(ctx, "alice", "cli", deniedID, "already refunded"); err != nil {
		t.Fatal(err)
	}
	check(docRequest{op: get, path: "/api/v1/calls/" + deniedID, token: token}, http.StatusOK) // with its decision
	check(docRequest{op: submit, path: "/api/v1/calls", token: token, body: refund(3)}, http.StatusConflict)

	check(docRequest{op: get, path: "/api/v1/calls/" + id, token: token}, http.StatusOK)
	check(docRequest{op: get, path: "/api/v1/calls/" + id + "?wait=50ms", token: token}, http.StatusOK)
	check(docRequest{op: get, path: "/api/v1/calls/" + id + "?wait=soon", token: token}, http.StatusBadRequest)
	check(docRequest{op: get, path: "/api/v1/calls/" + id}, http.StatusUnauthorized)
	check(docRequest{op: get, path: "/api/v1/calls/call_nope", token: token}, http.StatusNotFound)

	// An approval through a delegation: bob approves for alice, and the
	// call object and its lineage say whom it was for.
	testkit.SeedUsers(t, st.db.Accounts(), account.RoleOperator, "bob")
	if _, err := st.queue.GiveDelegation(ctx, queue.DelegationInput{By: "alice", Channel: audit.ChannelCLI,
		Delegator: "alice", Delegate: "bob", Until: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	delegated := check(docRequest{op: submit, path: "/api/v1/calls", token: token, body: refund(77)}, http.StatusCreated)
	delegatedID, _ := delegated.json["id"].(string)
	delegatedDigest, _ := delegated.json["digest"].(string)
	if _, err := st.queue.ApproveWith(ctx, queue.ApproveInput{Operator: "bob", Channel: audit.ChannelCLI, CallID: delegatedID,
		Digest: delegatedDigest, For: "alice"}); err != nil {
		t.Fatal(err)
	}
	if c := check(docRequest{op: get, path: "/api/v1/calls/" + delegatedID, token: token}, http.StatusOK); !strings.Contains(string(c.body), `"by":"bob","channel":"cli","digest":"`+delegatedDigest+`","for":"alice"`) {
		t.Errorf("an approval for alice by bob: %s", c.body)
	}

	withdrawn := check(docRequest{op: submit, path: "/api/v1/calls", token: token, body: refund(4)}, http.StatusCreated)
	withdrawnID, _ := withdrawn.json["id"].(string)
	check(docRequest{op: cancel, path: "/api/v1/calls/" + withdrawnID, token: token}, http.StatusOK)
	check(docRequest{op: cancel, path: "/api/v1/calls/" + withdrawnID, token: token}, http.StatusConflict)
	check(docRequest{op: cancel, path: "/api/v1/calls/call_nope", token: token}, http.StatusNotFound)
	check(docRequest{op: cancel, path: "/api/v1/calls/" + withdrawnID}, http.StatusUnauthorized)

	check(docRequest{op: outcome, path: "/api/v1/calls/" + id + "/outcome", token: token, body: `{"status":"succeeded"}`}, http.StatusConflict)
	check(docRequest{op: heartbeat, path: "/api/v1/calls/" + id + "/heartbeat", token: token}, http.StatusConflict)

	if _, err := st.queue.Approve(ctx, "alice", "cli", id, digest); err != nil {
		t.Fatal(err)
	}
	approved := check(docRequest{op: get, path: "/api/v1/calls/" + id + "?wait=5s", token: token}, http.StatusOK)
	grantToken, _ := approved.json["grant"].(string)
	if grantToken == "" {
		t.Fatalf("approved call has no grant: %s", approved.body)
	}
	redeemBody := func(args string) string {
		g, _ := json.Marshal(grantToken)
		return `{"grant":` + string(g) + `,"call":{"tool":"payments.refund","target":"invoice:INV-9","args":` + args + `}}`
	}
	exact := `{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}`
	check(docRequest{op: redeem, path: "/api/v1/redeem", token: token, body: `{"grant":"x"}`}, http.StatusBadRequest)
	check(docRequest{op: redeem, path: "/api/v1/redeem", body: redeemBody(exact)}, http.StatusUnauthorized)
	check(docRequest{op: redeem, path: "/api/v1/redeem", token: token, contentType: "text/plain", body: redeemBody(exact)}, http.StatusUnsupportedMediaType)
	check(docRequest{op: redeem, path: "/api/v1/redeem", token: token,
		body: `{"grant":"x","call":{"tool":"payments.refund","target":"invoice:INV-9","args":{"notes":"` + strings.Repeat("a", 300<<10) + `"}}}`}, http.StatusRequestEntityTooLarge)
	check(docRequest{op: redeem, path: "/api/v1/redeem", token: token, body: redeemBody(`{"amount_minor":9999,"currency":"USD","reason_code":"duplicate"}`)}, http.StatusForbidden)
	check(docRequest{op: redeem, path: "/api/v1/redeem", token: token, body: `{"grant":"not.a.grant","call":{"tool":"payments.refund","target":"invoice:INV-9","args":{}}}`}, http.StatusForbidden)
	accepted := check(docRequest{op: redeem, path: "/api/v1/redeem", token: token, body: redeemBody(exact)}, http.StatusOK)
	check(docRequest{op: redeem, path: "/api/v1/redeem", token: token, body: redeemBody(exact)}, http.StatusConflict)
	if env, _ := accepted.json["envelope"].(string); env == "" || !strings.HasPrefix(env, `{"actor":"agent:billing-bot"`) {
		t.Errorf("accepted redemption carries envelope %q", env)
	}

	hb := "/api/v1/calls/" + id + "/heartbeat"
	sibling := st.token(t, "agent:billing-bot", "payments-host")
	check(docRequest{op: heartbeat, path: hb, token: token}, http.StatusOK)
	check(docRequest{op: heartbeat, path: hb, token: token, body: `{}`}, http.StatusOK)
	check(docRequest{op: heartbeat, path: hb, token: token, body: `{"extend_seconds":30}`}, http.StatusOK)
	check(docRequest{op: heartbeat, path: hb, token: token, body: `{"extend_seconds":86400}`}, http.StatusUnprocessableEntity)
	check(docRequest{op: heartbeat, path: hb, token: token, body: `{"extend_seconds":1.5}`}, http.StatusBadRequest)
	check(docRequest{op: heartbeat, path: hb, token: token, body: `{"for":"10s"}`}, http.StatusUnprocessableEntity)
	check(docRequest{op: heartbeat, path: hb, token: token, contentType: "text/plain", body: `{}`}, http.StatusUnsupportedMediaType)
	check(docRequest{op: heartbeat, path: hb, token: token, body: `{"extend_seconds":"` + strings.Repeat("a", 300<<10) + `"}`}, http.StatusRequestEntityTooLarge)
	check(docRequest{op: heartbeat, path: hb}, http.StatusUnauthorized)
	check(docRequest{op: heartbeat, path: "/api/v1/calls/call_nope/heartbeat", token: token}, http.StatusNotFound)
	check(docRequest{op: heartbeat, path: hb, token: sibling}, http.StatusNotFound)

	check(docRequest{op: outcome, path: "/api/v1/calls/" + id + "/outcome", token: token, body: `{"status":"great"}`}, http.StatusUnprocessableEntity)
	check(docRequest{op: outcome, path: "/api/v1/calls/" + id + "/outcome", token: token, body: `{"state":"succeeded"}`}, http.StatusUnprocessableEntity)
	check(docRequest{op: outcome, path: "/api/v1/calls/" + id + "/outcome", token: token, body: `{"status":`}, http.StatusBadRequest)
	check(docRequest{op: outcome, path: "/api/v1/calls/" + id + "/outcome", token: token, contentType: "text/plain", body: `{}`}, http.StatusUnsupportedMediaType)
	check(docRequest{op: outcome, path: "/api/v1/calls/" + id + "/outcome", body: `{"status":"succeeded"}`}, http.StatusUnauthorized)
	check(docRequest{op: outcome, path: "/api/v1/calls/call_nope/outcome", token: token, body: `{"status":"succeeded"}`}, http.StatusNotFound)
	check(docRequest{op: outcome, path: "/api/v1/calls/" + id + "/outcome", token: token, body: `{"status":"succeeded","detail":"issued"}`}, http.StatusOK)
	check(docRequest{op: outcome, path: "/api/v1/calls/" + id + "/outcome", token: token, body: `{"status":"failed"}`}, http.StatusConflict)
	check(docRequest{op: get, path: "/api/v1/calls/" + id, token: token}, http.StatusOK) // redeemed, with its outcome
	check(docRequest{op: heartbeat, path: hb, token: token}, http.StatusConflict)

	// A lease that ran out: lease_expired on the call, a late report
	// replaces it, and a person's resolution shows on the call.
	lapsed := check(docRequest{op: submit, path: "/api/v1/calls", token: token, body: refund(5)}, http.StatusCreated)
	lapsedID, _ := lapsed.json["id"].(string)
	a, err := st.queue.Approve(ctx, "alice", "cli", lapsedID, lapsed.json["digest"].(string))
	if err != nil {
		t.Fatal(err)
	}
	g, _ := json.Marshal(a.Grant)
	check(docRequest{op: redeem, path: "/api/v1/redeem", token: token, body: `{"grant":` + string(g) +
		`,"call":{"tool":"payments.refund","target":"invoice:INV-9","args":{"amount_minor":5,"currency":"USD","reason_code":"duplicate"}}}`}, http.StatusOK)
	if _, err := st.db.SQL().Exec(`UPDATE calls SET lease_until = 1 WHERE id = ?`, lapsedID); err != nil {
		t.Fatal(err)
	}
	if n, err := st.queue.ExpireLeases(ctx); err != nil || n != 1 {
		t.Fatalf("ExpireLeases = %d, %v", n, err)
	}
	expired := check(docRequest{op: get, path: "/api/v1/calls/" + lapsedID, token: token}, http.StatusOK)
	if o, _ := expired.json["outcome"].(map[string]any); o["status"] != "lease_expired" {
		t.Errorf("outcome %v, want lease_expired", expired.json["outcome"])
	}
	check(docRequest{op: heartbeat, path: "/api/v1/calls/" + lapsedID + "/heartbeat", token: token}, http.StatusConflict)
	if _, err := st.queue.Resolve(ctx, "alice", "web", lapsedID, "executed", "the refund is in the ledger", "https://ledger.example/r/5"); err != nil {
		t.Fatal(err)
	}
	check(docRequest{op: get, path: "/api/v1/calls/" + lapsedID, token: token}, http.StatusOK) // with its resolution
	check(docRequest{op: outcome, path: "/api/v1/calls/" + lapsedID + "/outcome", token: token, body: `{"status":"succeeded"}`}, http.StatusOK)

	// A token that names its agent's owners: the call carries them as
	// people see them (the principal pinned beside a provider user name is
	// stored, not shown to the agent), and each approval says how it was
	// given.
	if err := st.db.Accounts().Update(ctx, func(tx account.Tx) error {
		return tx.InsertUser(account.User{Name: "oidc:idp.example.com/00u-olga", Role: account.RoleOperator, Kind: account.KindOIDC,
			Issuer: "https://idp.example.com", Subject: "00u-olga", ShortName: "olga", CreatedAt: time.Now().UTC().Truncate(time.Millisecond)})
	}); err != nil {
		t.Fatal(err)
	}
	testkit.SeedUsers(t, st.db.Accounts(), account.RoleOperator, "bob")
	ownedTok, owned, err := account.NewService(st.db.Accounts(), nil).CreateTokenWith(ctx, account.TokenSpec{Actor: "agent:deploy-bot",
		Audience: "deploy-host", Owners: []string{"olga", "team:payments"}}, "test", audit.ChannelCLI)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(ownedTok.Owners), "[olga oidc:idp.example.com/00u-olga team:payments]"; got != want {
		t.Errorf("stored owners = %s, want %s", got, want)
	}
	mine := check(docRequest{op: submit, path: "/api/v1/calls", token: owned, // two approvals
		body: `{"tool":"releases.deploy","target":"service:api","args":{"version":"v1.4.2","environment":"staging","change_ticket":"CHG-1234"}}`}, http.StatusCreated)
	wantOwners := []any{"olga", "team:payments"}
	if got := mine.json["owners"]; fmt.Sprint(got) != fmt.Sprint(wantOwners) {
		t.Errorf("owners = %v, want %v", got, wantOwners)
	}
	if ap, _ := mine.json["approvals"].(map[string]any); ap["given"] != nil {
		t.Errorf("a pending call's approvals = %v, want no given", ap)
	}
	mineID, _ := mine.json["id"].(string)
	// Alice approves it on a batch review page, which presented it.
	mineCall, err := st.queue.Call(ctx, mineID)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := st.queue.ApproveBatch(ctx, queue.BatchInput{Operator: "alice", Channel: audit.ChannelWeb,
		Items: []queue.BatchItem{{CallID: mineID, Digest: mineCall.Digest}}, Presented: st.queue.Present(present.PageBatch, "alice", mineCall)}); err != nil || len(res.Decided) != 1 {
		t.Fatalf("batch approval: %+v, %v", res, err)
	}
	if _, err := st.queue.Approve(ctx, "bob", audit.ChannelCLI, mineID, mine.json["digest"].(string)); err != nil {
		t.Fatal(err)
	}
	twice := check(docRequest{op: get, path: "/api/v1/calls/" + mineID, token: owned}, http.StatusOK)
	var given []string
	ap, _ := twice.json["approvals"].(map[string]any)
	list, _ := ap["given"].([]any)
	for _, g := range list {
		m, _ := g.(map[string]any)
		given = append(given, fmt.Sprint(m["by"], " ", m["channel"], " ", m["method"]))
		if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(m["at"])); err != nil {
			t.Errorf("approval at %v: %v", m["at"], err)
		}
	}
	if want := []string{"alice web batch", "bob cli command"}; twice.json["status"] != "approved" || fmt.Sprint(given) != fmt.Sprint(want) {
		t.Errorf("status %v, approvals given %q; want approved, %q", twice.json["status"], given, want)
	}

	// An approval with a comment: the agent receives it.
	commented := check(docRequest{op: submit, path: "/api/v1/calls", token: token, body: refund(6)}, http.StatusCreated)
	commentedID, _ := commented.json["id"].(string)
	commentedCall, err := st.queue.Call(ctx, commentedID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.queue.ApproveWith(ctx, queue.ApproveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: commentedID,
		Digest: commented.json["digest"].(string), Comment: "refund only the duplicate",
		Presented: st.queue.Present(present.PageCall, "alice", commentedCall)}); err != nil {
		t.Fatal(err)
	}
	if c := check(docRequest{op: get, path: "/api/v1/calls/" + commentedID, token: token}, http.StatusOK); c.json["comments"] == nil {
		t.Errorf("an approval's comment is not on the call: %s", c.body)
	}

	// A revoked grant: the call shows the revocation and the grant is
	// refused.
	revoked := check(docRequest{op: submit, path: "/api/v1/calls", token: token, body: refund(7)}, http.StatusCreated)
	revokedID, _ := revoked.json["id"].(string)
	rv, err := st.queue.Approve(ctx, "alice", audit.ChannelCLI, revokedID, revoked.json["digest"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.queue.RevokeGrant(ctx, "alice", audit.ChannelWeb, revokedID, "wrong invoice"); err != nil {
		t.Fatal(err)
	}
	if c := check(docRequest{op: get, path: "/api/v1/calls/" + revokedID, token: token}, http.StatusOK); c.json["status"] != "revoked" || c.json["revocation"] == nil {
		t.Errorf("a revoked call: %s", c.body)
	}
	g, _ = json.Marshal(rv.Grant)
	check(docRequest{op: redeem, path: "/api/v1/redeem", token: token, body: `{"grant":` + string(g) +
		`,"call":{"tool":"payments.refund","target":"invoice:INV-9","args":{"amount_minor":7,"currency":"USD","reason_code":"duplicate"}}}`}, http.StatusForbidden)

	// A freeze refuses the redemption of a grant approved before it.
	frozenTok := st.token(t, "agent:frozen-bot", "payments-host")
	cold := check(docRequest{op: submit, path: "/api/v1/calls", token: frozenTok, body: refund(8)}, http.StatusCreated)
	cc, err := st.queue.Approve(ctx, "alice", audit.ChannelCLI, cold.json["id"].(string), cold.json["digest"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.queue.Freeze(ctx, "alice", audit.ChannelCLI, "payments.refund", "agent:frozen-bot", "incident 42"); err != nil {
		t.Fatal(err)
	}
	g, _ = json.Marshal(cc.Grant)
	if r := check(docRequest{op: redeem, path: "/api/v1/redeem", token: frozenTok, body: `{"grant":` + string(g) +
		`,"call":{"tool":"payments.refund","target":"invoice:INV-9","args":{"amount_minor":8,"currency":"USD","reason_code":"duplicate"}}}`},
		http.StatusServiceUnavailable); r.json["freeze"] == nil {
		t.Errorf("a frozen redemption carries no freeze: %s", r.body)
	}

	// A tools file with rules: a rule approves one call and denies another.
	ruled := startOpenAPIStack(t, func(q *queue.Config, _ *server.Config) {
		pol, err := policy.Load("../../examples/policy.yaml")
		if err != nil {
			t.Fatal(err)
		}
		q.Tools, q.Policy = pol.Registry(), pol
	})
	billing := ruled.token(t, "agent:billing-bot", "payments-host")
	small := checkOn(ruled, docRequest{op: submit, path: "/api/v1/calls", token: billing, body: refund(1200)}, http.StatusCreated)
	if small.json["status"] != "approved" || small.json["decided_by_rule"] != "small-refunds" {
		t.Errorf("a small refund under the rules: %s", small.body)
	}
	large := checkOn(ruled, docRequest{op: submit, path: "/api/v1/calls", token: billing, body: refund(2000000)}, http.StatusForbidden)
	denial, _ := large.json["error"].(map[string]any)
	largeID, _ := denial["call_id"].(string)
	if c := checkOn(ruled, docRequest{op: get, path: "/api/v1/calls/" + largeID, token: billing}, http.StatusOK); c.json["decided_by_rule"] != "too-large" {
		t.Errorf("a call a rule denied: %s", c.body)
	}

	// A counter-proposal: an operator edits a pending call; the original
	// answers countered with the counter, the agent accepts the counter
	// and gets its grant, and the same call again is previously_countered.
	countering := startOpenAPIStack(t)
	agentTok := countering.token(t, "agent:billing-bot", "payments-host")
	asked := checkOn(countering, docRequest{op: submit, path: "/api/v1/calls", token: agentTok, body: refund(40000)}, http.StatusCreated)
	askedID, _ := asked.json["id"].(string)
	counter, err := countering.queue.Counter(ctx, queue.CounterInput{Operator: "alice", Channel: audit.ChannelCLI, CallID: askedID,
		Digest: asked.json["digest"].(string), Edits: map[string]json.RawMessage{"/amount_minor": json.RawMessage("4000")}})
	if err != nil {
		t.Fatal(err)
	}
	if c := checkOn(countering, docRequest{op: get, path: "/api/v1/calls/" + askedID + "?wait=1s", token: agentTok}, http.StatusOK); c.json["status"] != "countered" ||
		mapAt(t, c.json, "countered_by")["id"] != counter.ID {
		t.Errorf("a countered call: %s", c.body)
	}
	const accept = "POST /api/v1/calls/{id}/accept"
	checkOn(countering, docRequest{op: accept, path: "/api/v1/calls/" + askedID + "/accept", token: agentTok}, http.StatusConflict)
	if c := checkOn(countering, docRequest{op: accept, path: "/api/v1/calls/" + counter.ID + "/accept", token: agentTok}, http.StatusOK); c.json["status"] != "approved" ||
		c.json["grant"] == nil || c.json["countered_from"] != askedID || c.json["accepted_at"] == nil ||
		mapAt(t, mapAt(t, c.json, "lineage"), "proposed")["edited_by"] != "alice" {
		t.Errorf("an accepted counter: %s", c.body)
	}
	if r := checkOn(countering, docRequest{op: submit, path: "/api/v1/calls", token: agentTok, body: refund(40000)}, http.StatusConflict); mapAt(t, r.json, "error")["countered_by"] != counter.ID {
		t.Errorf("the countered call again: %s", r.body)
	}

	checkPlansAgainstDoc(t, checkOn)

	// A replica that does not hear the others is degraded.
	deaf := startOpenAPIStack(t, func(_ *queue.Config, s *server.Config) { s.Live = disconnected{} })
	checkOn(deaf, docRequest{op: "GET /healthz", path: "/healthz"}, http.StatusServiceUnavailable)

	check(docRequest{op: "GET /api/v1/keys", path: "/api/v1/keys"}, http.StatusOK)
	spec := check(docRequest{op: "GET /api/v1/openapi.yaml", path: "/api/v1/openapi.yaml"}, http.StatusOK)
	if !bytes.Equal(spec.body, docs.OpenAPI) {
		t.Errorf("/api/v1/openapi.yaml differs from docs/openapi.yaml")
	}
	check(docRequest{op: "GET /healthz", path: "/healthz"}, http.StatusOK)
	check(docRequest{op: "GET /metrics", path: "/metrics"}, http.StatusOK)
	const checkpoint = "GET /api/v1/audit/checkpoint"
	check(docRequest{op: checkpoint, path: "/api/v1/audit/checkpoint"}, http.StatusNotFound)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.db.Checkpoint(ctx, audit.NewSigner(priv)); err != nil {
		t.Fatal(err)
	}
	check(docRequest{op: checkpoint, path: "/api/v1/audit/checkpoint"}, http.StatusOK)

	operatorFlow(t, st, check)
	mcpReviewFlow(t, checkOn)

	// Every member the answers' schemas declare was sent by some answer:
	// the description names nothing the server does not write.
	if unsent := doc.unsent(); len(unsent) > 0 {
		t.Errorf("docs/openapi.yaml declares members that no answer in the flow carried: %v", unsent)
	}

	// Every documented operation was seen succeeding.
	for op := range doc.ops {
		ok := false
		for status := range seen[op] {
			ok = ok || status/100 == 2
		}
		if !ok {
			t.Errorf("%s: no successful answer checked against the description", op)
		}
	}
}

func TestOpenAPIDescriptionRefusesDrift(t *testing.T) {
	doc := loadAPIDoc(t)
	// The schemas are closed: a member the description does not name fails.
	good := `{"id":"call_abcdefghijklmnopqrstuvwx","status":"pending","actor":"a","audience":"b","tool":"payments.refund",
		"target":"invoice:INV-1","args":{},"digest":"` + strings.Repeat("ab", 32) + `","created_at":"2025-01-02T03:04:05.123Z",
		"decide_by":"2025-01-02T03:19:05.123Z","approvals":{"required":1,"received":0},
		"lineage":{"proposed":{"by":"a","at":"2025-01-02T03:04:05.123Z"}}}`
	tests := []struct {
		name string
		body string
		ok   bool
	}{
		{"a pending call", good, true},
		{"an unknown member", strings.Replace(good, `"status"`, `"colour":"red","status"`, 1), false},
		{"an unknown status", strings.Replace(good, `"pending"`, `"parked"`, 1), false},
		{"a grant without its expiry", strings.Replace(good, `"status"`, `"grant":"a.b.c","status"`, 1), false},
		{"a bad time", strings.Replace(good, `2025-01-02T03:04:05.123Z`, `yesterday`, 1), false},
		{"no lineage", strings.Replace(good, `,
		"lineage":{"proposed":{"by":"a","at":"2025-01-02T03:04:05.123Z"}}`, ``, 1), false},
		{"an unknown method's human", strings.Replace(good, `"by":"a","at"`, `"by":"a","human":"maybe","at"`, 1), false},
	}
	o := doc.ops["GET /api/v1/calls/{id}"]
	if o == nil {
		t.Fatal("GET /api/v1/calls/{id} is not documented")
	}
	s, err := doc.schema(o.responses["200"]["application/json"])
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(v); (err == nil) != tt.ok {
			t.Errorf("%s: valid=%v, want %v (%v)", tt.name, err == nil, tt.ok, err)
		}
	}
}

// exampleTypes are, for each schema of the description an answer has, the
// Go types the server writes it from and the Go client reads it into.
var exampleTypes = map[string][]func() any{
	"Call":               {func() any { return new(wire.Call) }, func() any { return new(client.Call) }},
	"Lease":              {func() any { return new(wire.Lease) }, func() any { return new(client.Lease) }},
	"RedemptionAccepted": {func() any { return new(wire.Redemption) }, func() any { return new(client.Redemption) }},
	"RedemptionRejected": {func() any { return new(wire.Redemption) }, func() any { return new(client.Redemption) }},
	"Checkpoint":         {func() any { return new(wire.Checkpoint) }},
	"Health":             {func() any { return new(wire.Health) }},
	"ErrorResponse": {func() any { return new(wire.ErrorBody) }, func() any {
		return new(struct {
			Error client.Error `json:"error"`
		})
	}},
	"JWKS": {func() any {
		return new(struct {
			Keys []grant.JWK `json:"keys"`
		})
	}},
}

// bases lists the schemas of exampleTypes that schema is, or narrows
// (allOf), or may be (oneOf).
func (d *apiDoc) bases(schema any) []string {
	s, ok := schema.(map[string]any)
	if !ok {
		return nil
	}
	if name, c, ok := d.ref(s); ok {
		if _, known := exampleTypes[name]; known {
			return []string{name}
		}
		return d.bases(c)
	}
	var out []string
	for _, k := range []string{"allOf", "oneOf", "anyOf"} {
		list, _ := s[k].([]any)
		for _, sub := range list {
			out = append(out, d.bases(sub)...)
		}
	}
	return out
}

// decodesAs reports why example is not exactly what one of the schema's Go
// types writes: each type reads it with no member left unknown, and writes
// back the same members and values (times as the server writes them,
// nothing the server would leave out or add). It returns "" when one type
// of each base does.
func decodesAs(example any, bases []string) string {
	text, err := json.Marshal(example)
	if err != nil {
		return err.Error()
	}
	var why []string
	for _, base := range bases {
		ok := true
		for _, newT := range exampleTypes[base] {
			v := newT()
			dec := json.NewDecoder(bytes.NewReader(text))
			dec.DisallowUnknownFields()
			if err := dec.Decode(v); err != nil {
				why = append(why, fmt.Sprintf("%s as %T: %v", base, v, err))
				ok = false
				continue
			}
			back, err := json.Marshal(v)
			if err != nil {
				why = append(why, fmt.Sprintf("%s as %T: %v", base, v, err))
				ok = false
				continue
			}
			var got, want any
			_ = json.Unmarshal(back, &got)
			_ = json.Unmarshal(text, &want)
			if !reflect.DeepEqual(got, want) {
				why = append(why, fmt.Sprintf("%s as %T writes it back as %s", base, v, back))
				ok = false
			}
		}
		if ok {
			return ""
		}
	}
	if len(why) == 0 {
		return fmt.Sprintf("no Go type for schemas %v", bases)
	}
	return strings.Join(why, "; ")
}

// TestOpenAPIExamplesAreAnswers: every example of an answer in
// docs/openapi.yaml is what the server writes: it matches its schema, and
// the server's types (and the Go client's) read it strictly and write it
// back unchanged. So is every example of a schema answers have.
func TestOpenAPIExamplesAreAnswers(t *testing.T) {
	doc := loadAPIDoc(t)
	n := 0
	for key, op := range doc.ops {
		for status, media := range op.raw {
			for mt, m := range media {
				for name, example := range m.examples {
					n++
					where := fmt.Sprintf("%s %s %s example %s", key, status, mt, name)
					s, err := doc.schema(op.responses[status][mt])
					if err != nil {
						t.Fatal(err)
					}
					text, _ := json.Marshal(example)
					v, err := jsonschema.UnmarshalJSON(bytes.NewReader(text))
					if err != nil {
						t.Fatal(err)
					}
					if err := s.Validate(v); err != nil {
						t.Errorf("%s does not match its schema: %v", where, err)
					}
					if why := decodesAs(example, doc.bases(m.schema)); why != "" {
						t.Errorf("%s is not an answer the server writes: %s", where, why)
					}
				}
			}
		}
	}
	for name := range exampleTypes {
		c, _ := doc.components[name].(map[string]any)
		list, _ := c["examples"].([]any)
		for i, example := range list {
			n++
			if why := decodesAs(example, []string{name}); why != "" {
				t.Errorf("schema %s example %d is not an answer the server writes: %s", name, i, why)
			}
		}
	}
	if n < 20 {
		t.Errorf("docs/openapi.yaml holds %d examples of answers, want at least 20: one for every kind of answer", n)
	}
}

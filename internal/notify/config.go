package notify

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the notifications section: channels, routes and delivery
// policy. Every address a message is sent to comes from here (or, for Web
// Push, from a browser's subscription to a push service on the allowlist).
type Config struct {
	// PublicURL is the console's address in links; empty means the
	// address the console serves on.
	PublicURL string
	Channels  map[string]*ChannelConfig
	// Routes pick channels per tool; the first route whose patterns match
	// the tool applies. Without a routes section every channel hears about
	// every tool.
	Routes []Route
	Retry  RetryPolicy
	// Lease is how long a claimed row is reserved for the dispatcher that
	// claimed it; after a crash another dispatcher takes it over once the
	// lease has run out.
	Lease time.Duration
	// Keep is how long finished rows stay listed before they are pruned.
	Keep time.Duration
}

// Channel types.
const (
	TypeWebhook = "webhook"
	TypeSlack   = "slack"
	TypeEmail   = "email"
	TypePush    = "push"
)

// ChannelConfig is one named channel.
type ChannelConfig struct {
	Name string
	Type string
	// Events limits the channel to these event types; nil means all.
	Events []string
	// IncludeArgs puts the call's arguments in the body (webhooks only).
	IncludeArgs bool
	// Timeout bounds one delivery attempt.
	Timeout time.Duration

	Webhook *WebhookConfig
	Slack   *SlackConfig
	Email   *EmailConfig
	Push    *PushConfig
}

// Wants reports whether the channel takes events of this type.
func (c *ChannelConfig) Wants(kind string) bool {
	if c.Events == nil {
		return true
	}
	for _, k := range c.Events {
		if k == kind {
			return true
		}
	}
	return false
}

// WebhookConfig posts Standard Webhooks.
type WebhookConfig struct {
	URL string
	// Secret is the HMAC key (decoded from whsec_…); SigningKey, when set,
	// adds an Ed25519 v1a signature (decoded from whsk_…).
	Secret     []byte
	SigningKey []byte
}

// SlackConfig posts to Slack through an incoming webhook or, with a bot
// token, chat.postMessage and chat.update.
type SlackConfig struct {
	WebhookURL string
	Token      string
	Channel    string
	APIURL     string // ends with a slash
}

// EmailConfig sends mail over SMTP.
type EmailConfig struct {
	Host     string
	Port     int
	TLS      string // starttls, tls or none
	Username string
	Password string
	// CAFile, when set, is the only set of roots the server's certificate
	// is checked against.
	CAFile        string
	From          string
	To            []string
	SubjectPrefix string
}

// PushConfig sends Web Push messages to subscribed browsers.
type PushConfig struct {
	// Subject is the VAPID contact, mailto: or https:.
	Subject string
	// PrivateKey is the VAPID private key (base64url); empty means the
	// console's own key from its data directory.
	PrivateKey string
	// Allow lists the push services' hosts that may be posted to: a host,
	// host:port, or *.domain for any subdomain.
	Allow []string
	// TTL is how long a push service keeps a message for an offline
	// browser.
	TTL time.Duration
}

// DefaultPushServices are the push services of the major browsers.
var DefaultPushServices = []string{
	"fcm.googleapis.com",                // Chrome, Edge, Opera, Brave
	"updates.push.services.mozilla.com", // Firefox
	"*.push.apple.com",                  // Safari
	"*.notify.windows.com",              // legacy Edge
}

// Route is the notification policy of the tools it matches.
type Route struct {
	// Tools are glob patterns (path.Match) over tool names; "*" matches
	// every tool.
	Tools []string
	// Notify lists the channels that hear of every event of the call.
	Notify []string
	// EscalateAfter, when set, sends call.escalated to EscalateTo if the
	// call is still pending that long after submission; the escalation
	// channels then hear of the decision too.
	EscalateAfter time.Duration
	EscalateTo    []string
	// RemindBefore, when set, sends call.reminder to Notify that long
	// before decide_by if the call is still pending.
	RemindBefore time.Duration
}

// Matches reports whether the route applies to tool.
func (r *Route) Matches(tool string) bool {
	for _, p := range r.Tools {
		if p == "*" {
			return true
		}
		if ok, _ := path.Match(p, tool); ok {
			return true
		}
	}
	return false
}

// RetryPolicy is the backoff between attempts: First, doubling up to
// MaxInterval, each delay jittered to between half and all of itself, until
// GiveUpAfter has passed since the row came due; then the row is dead.
type RetryPolicy struct {
	First       time.Duration
	MaxInterval time.Duration
	GiveUpAfter time.Duration
}

// Defaults.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultLease       = 60 * time.Second
	DefaultKeep        = 7 * 24 * time.Hour
	DefaultFirstRetry  = 5 * time.Second
	DefaultMaxInterval = time.Hour
	DefaultGiveUpAfter = 24 * time.Hour
	DefaultPushTTL     = 15 * time.Minute
)

// Env is how a configuration reads its secrets.
type Env struct {
	Getenv   func(string) string
	ReadFile func(string) ([]byte, error)
	// Dir resolves relative file names (the configuration file's folder).
	Dir string
}

func (e Env) defaults() Env {
	if e.Getenv == nil {
		e.Getenv = os.Getenv
	}
	if e.ReadFile == nil {
		e.ReadFile = os.ReadFile
	}
	return e
}

// ConfigError lists every problem found in a configuration.
type ConfigError struct {
	File     string
	Problems []string
}

func (e *ConfigError) Error() string {
	where := "notifications"
	if e.File != "" {
		where = e.File
	}
	return fmt.Sprintf("%s: %d problem(s):\n  %s", where, len(e.Problems), strings.Join(e.Problems, "\n  "))
}

// LoadConfig reads a notifications file: its top level holds channels,
// routes, retry, lease, keep and public_url. Relative secret files are
// resolved from the file's folder.
func LoadConfig(file string, env Env) (*Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("notify: %w", err)
	}
	env.Dir = filepath.Dir(file)
	c, err := ParseConfig(data, env)
	var ce *ConfigError
	if errors.As(err, &ce) {
		ce.File = file
	}
	return c, err
}

// ParseConfig reads a notifications document (see LoadConfig).
func ParseConfig(data []byte, env Env) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &ConfigError{Problems: []string{err.Error()}}
	}
	if doc.Kind == 0 {
		return nil, &ConfigError{Problems: []string{"the file is empty"}}
	}
	return parseNode(doc.Content[0], env)
}

// FromToolsFile reads the notifications section of a tools file, its
// top-level member "notifications". It returns nil, nil when there is none.
func FromToolsFile(data []byte, env Env) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &ConfigError{Problems: []string{err.Error()}}
	}
	if doc.Kind == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil
	}
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "notifications" {
			return parseNode(root.Content[i+1], env)
		}
	}
	return nil, nil
}

// The document as YAML sees it. Channels are read field by field below so
// that a field another type uses is reported rather than ignored.
type rawConfig struct {
	PublicURL string               `yaml:"public_url"`
	Channels  map[string]yaml.Node `yaml:"channels"`
	Routes    []rawRoute           `yaml:"routes"`
	Retry     struct {
		First       duration `yaml:"first"`
		MaxInterval duration `yaml:"max_interval"`
		GiveUpAfter duration `yaml:"give_up_after"`
	} `yaml:"retry"`
	Lease duration `yaml:"lease"`
	Keep  duration `yaml:"keep"`
}

type rawRoute struct {
	Tools         []string `yaml:"tools"`
	Notify        []string `yaml:"notify"`
	EscalateAfter duration `yaml:"escalate_after"`
	EscalateTo    []string `yaml:"escalate_to"`
	RemindBefore  duration `yaml:"remind_before"`
}

type rawChannel struct {
	Type        string   `yaml:"type"`
	Events      []string `yaml:"events"`
	IncludeArgs bool     `yaml:"include_args"`
	Timeout     duration `yaml:"timeout"`
	// webhook
	URL        string     `yaml:"url"`
	Secret     *secretRef `yaml:"secret"`
	SigningKey *secretRef `yaml:"signing_key"`
	// slack
	WebhookURL *secretRef `yaml:"webhook_url"`
	Token      *secretRef `yaml:"token"`
	Channel    string     `yaml:"channel"`
	APIURL     string     `yaml:"api_url"`
	// email
	SMTP struct {
		Host     string     `yaml:"host"`
		Port     int        `yaml:"port"`
		TLS      string     `yaml:"tls"`
		Username string     `yaml:"username"`
		Password *secretRef `yaml:"password"`
		CAFile   string     `yaml:"ca_file"`
	} `yaml:"smtp"`
	From          string   `yaml:"from"`
	To            []string `yaml:"to"`
	SubjectPrefix string   `yaml:"subject_prefix"`
	// push
	Subject    string     `yaml:"subject"`
	PrivateKey *secretRef `yaml:"vapid_private_key"`
	Allow      []string   `yaml:"allow"`
	TTL        duration   `yaml:"ttl"`
}

// fieldsOf lists the fields each channel type accepts.
var fieldsOf = map[string][]string{
	TypeWebhook: {"url", "secret", "signing_key", "include_args"},
	TypeSlack:   {"webhook_url", "token", "channel", "api_url"},
	TypeEmail:   {"smtp", "from", "to", "subject_prefix"},
	TypePush:    {"subject", "vapid_private_key", "allow", "ttl"},
}

var commonFields = []string{"type", "events", "timeout"}

// secretRef names where a secret lives: a file or an environment variable.
// A secret written into the configuration itself is refused.
type secretRef struct {
	File   string `yaml:"file"`
	Env    string `yaml:"env"`
	inline bool
}

// UnmarshalYAML takes note of a secret written inline, to refuse it with
// the other problems.
func (s *secretRef) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		s.inline = true
		return nil
	}
	type plain secretRef
	return n.Decode((*plain)(s))
}

type duration time.Duration

func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return fmt.Errorf("line %d: a duration is written with a unit, like 30s or 10m", n.Line)
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: %q is not a duration like 30s or 10m", n.Line, n.Value)
	}
	*d = duration(v)
	return nil
}

var channelName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

type parser struct {
	env      Env
	problems []string
}

func (p *parser) add(format string, args ...any) {
	p.problems = append(p.problems, fmt.Sprintf(format, args...))
}

func parseNode(n *yaml.Node, env Env) (*Config, error) {
	p := &parser{env: env.defaults()}
	var raw rawConfig
	if problems := decodeStrict(n, &raw); len(problems) > 0 {
		return nil, &ConfigError{Problems: problems}
	}
	c := &Config{
		PublicURL: strings.TrimRight(raw.PublicURL, "/"),
		Channels:  map[string]*ChannelConfig{},
		Retry: RetryPolicy{First: orDefault(raw.Retry.First, DefaultFirstRetry),
			MaxInterval: orDefault(raw.Retry.MaxInterval, DefaultMaxInterval),
			GiveUpAfter: orDefault(raw.Retry.GiveUpAfter, DefaultGiveUpAfter)},
		Lease: orDefault(raw.Lease, DefaultLease),
		Keep:  orDefault(raw.Keep, DefaultKeep),
	}
	if c.PublicURL != "" {
		if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			p.add("public_url %q must be an http or https address such as https://approvals.example.com", raw.PublicURL)
		}
	}
	if c.Retry.MaxInterval < c.Retry.First {
		p.add("retry: max_interval (%s) is shorter than first (%s)", c.Retry.MaxInterval, c.Retry.First)
	}
	names := make([]string, 0, len(raw.Channels))
	for name := range raw.Channels {
		names = append(names, name)
	}
	sort.Strings(names)
	var longest time.Duration
	for _, name := range names {
		node := raw.Channels[name]
		ch := p.channel(name, &node)
		if ch != nil {
			c.Channels[name] = ch
			longest = max(longest, ch.Timeout)
		}
	}
	var pushes []string
	for _, name := range names {
		if ch := c.Channels[name]; ch != nil && ch.Type == TypePush {
			pushes = append(pushes, name)
		}
	}
	if len(pushes) > 1 {
		p.add("channels %s: only one push channel may be configured (browsers subscribe once, with one key)", strings.Join(pushes, ", "))
	}
	if c.Lease < longest+10*time.Second {
		p.add("lease (%s) must exceed the longest channel timeout (%s) by at least 10s, or a slow delivery could be claimed twice", c.Lease, longest)
	}
	for i, r := range raw.Routes {
		c.Routes = append(c.Routes, p.route(i, r, c.Channels))
	}
	if raw.Routes == nil && len(c.Channels) > 0 {
		all := make([]string, 0, len(c.Channels))
		for _, name := range names {
			if c.Channels[name] != nil {
				all = append(all, name)
			}
		}
		c.Routes = []Route{{Tools: []string{"*"}, Notify: all}}
	}
	if len(p.problems) > 0 {
		return nil, &ConfigError{Problems: p.problems}
	}
	return c, nil
}

// decodeStrict decodes n into v and reports every member that v has no
// field for, with its line, so a misspelt field is an error, not silence.
// Each problem is one entry, which the linter prints on a line of its own.
func decodeStrict(n *yaml.Node, v any) []string {
	var problems []string
	checkKeys(n, reflect.TypeOf(v).Elem(), "", &problems)
	if err := n.Decode(v); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			problems = append(problems, te.Errors...)
		} else {
			problems = append(problems, err.Error())
		}
	}
	return problems
}

func checkKeys(n *yaml.Node, t reflect.Type, where string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode && t != reflect.TypeOf(yaml.Node{}):
		fields := map[string]reflect.Type{}
		var names []string
		for i := 0; i < t.NumField(); i++ {
			tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
			if tag != "" && tag != "-" {
				fields[tag] = t.Field(i).Type
				names = append(names, tag)
			}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			ft, ok := fields[k]
			if !ok {
				*out = append(*out, fmt.Sprintf("line %d: unknown field %s%s (fields: %s)", n.Content[i].Line, where, k, strings.Join(names, ", ")))
				continue
			}
			checkKeys(n.Content[i+1], ft, where+k+".", out)
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, item := range n.Content {
			checkKeys(item, t.Elem(), fmt.Sprintf("%s[%d].", strings.TrimSuffix(where, "."), i), out)
		}
	}
}

func orDefault(d duration, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return time.Duration(d)
}

func (p *parser) channel(name string, n *yaml.Node) *ChannelConfig {
	if !channelName.MatchString(name) {
		p.add("channel name %q: use lower-case letters, digits, - and _, starting with a letter", name)
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.add("channel %s: must be a mapping with a type", name)
		return nil
	}
	var raw rawChannel
	if problems := decodeStrict(n, &raw); len(problems) > 0 {
		for _, problem := range problems {
			p.add("channel %s: %s", name, problem)
		}
		return nil
	}
	allowed, ok := fieldsOf[raw.Type]
	if !ok {
		p.add("channel %s: type %q is not one of webhook, slack, email, push", name, raw.Type)
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		if !contains(allowed, key) && !contains(commonFields, key) {
			p.add("channel %s: %s is not a field of a %s channel (fields: %s)", name, key, raw.Type,
				strings.Join(append(append([]string(nil), commonFields...), allowed...), ", "))
		}
	}
	ch := &ChannelConfig{Name: name, Type: raw.Type, IncludeArgs: raw.IncludeArgs,
		Timeout: orDefault(raw.Timeout, DefaultTimeout)}
	if raw.Events != nil {
		ch.Events = []string{}
		for _, k := range raw.Events {
			if !knownKind(k) {
				p.add("channel %s: event %q is not one of %s", name, k, strings.Join(Kinds, ", "))
			}
			ch.Events = append(ch.Events, k)
		}
	}
	switch raw.Type {
	case TypeWebhook:
		ch.Webhook = p.webhook(name, &raw)
	case TypeSlack:
		ch.Slack = p.slack(name, &raw)
	case TypeEmail:
		ch.Email = p.email(name, &raw)
	case TypePush:
		ch.Push = p.push(name, &raw)
	}
	return ch
}

func (p *parser) webhook(name string, raw *rawChannel) *WebhookConfig {
	w := &WebhookConfig{URL: raw.URL}
	p.checkURL(name, "url", raw.URL)
	if raw.Secret == nil {
		p.add("channel %s: secret is required ({file: PATH} or {env: NAME} holding a whsec_… secret)", name)
	} else if s, ok := p.secret(name, "secret", raw.Secret); ok {
		key, err := decodePrefixed(s, "whsec_")
		switch {
		case err != nil:
			p.add("channel %s: secret: %v", name, err)
		case len(key) < 24 || len(key) > 64:
			p.add("channel %s: secret: the key is %d bytes; Standard Webhooks keys are 24 to 64 bytes", name, len(key))
		}
		w.Secret = key
	}
	if raw.SigningKey != nil {
		if s, ok := p.secret(name, "signing_key", raw.SigningKey); ok {
			key, err := decodePrefixed(s, "whsk_")
			if err == nil {
				err = checkSigningKey(key)
			}
			if err != nil {
				p.add("channel %s: signing_key: %v", name, err)
			}
			w.SigningKey = key
		}
	}
	return w
}

// checkSigningKey accepts an Ed25519 private key as its 32-byte seed, or as
// the 64 bytes of seed and public key when the second half is the public
// key of the first: a key whose halves disagree would sign with one key and
// list another, and no receiver could verify what it signs.
func checkSigningKey(key []byte) error {
	switch len(key) {
	case ed25519.SeedSize:
		return nil
	case ed25519.PrivateKeySize:
		pub := ed25519.NewKeyFromSeed(key[:ed25519.SeedSize]).Public().(ed25519.PublicKey)
		if !bytes.Equal(pub, key[ed25519.SeedSize:]) {
			return errors.New("the last 32 bytes of the 64-byte key are not the public key of its first 32 (the seed); give the 32-byte seed alone, or seed and its public key")
		}
		return nil
	}
	return fmt.Errorf("an Ed25519 key is 32 (seed) or 64 bytes (seed and public key), not %d", len(key))
}

func (p *parser) slack(name string, raw *rawChannel) *SlackConfig {
	s := &SlackConfig{Channel: raw.Channel, APIURL: raw.APIURL}
	switch {
	case raw.WebhookURL != nil && raw.Token != nil:
		p.add("channel %s: give either webhook_url or token and channel, not both", name)
	case raw.WebhookURL != nil:
		if v, ok := p.secret(name, "webhook_url", raw.WebhookURL); ok {
			s.WebhookURL = strings.TrimSpace(v)
			p.checkURL(name, "webhook_url", s.WebhookURL)
		}
		if raw.Channel != "" || raw.APIURL != "" {
			p.add("channel %s: an incoming webhook posts to the Slack channel it was made for: drop channel and api_url", name)
		}
	case raw.Token != nil:
		if v, ok := p.secret(name, "token", raw.Token); ok {
			s.Token = strings.TrimSpace(v)
		}
		if raw.Channel == "" {
			p.add("channel %s: channel is required with a token (the Slack channel id, e.g. C0123456789)", name)
		}
		if s.APIURL == "" {
			s.APIURL = "https://slack.com/api/"
		}
		if !strings.HasSuffix(s.APIURL, "/") {
			s.APIURL += "/"
		}
		p.checkURL(name, "api_url", s.APIURL)
	default:
		p.add("channel %s: a slack channel needs webhook_url, or token and channel", name)
	}
	return s
}

func (p *parser) email(name string, raw *rawChannel) *EmailConfig {
	e := &EmailConfig{Host: raw.SMTP.Host, Port: raw.SMTP.Port, TLS: raw.SMTP.TLS, Username: raw.SMTP.Username,
		CAFile: raw.SMTP.CAFile, From: raw.From, To: raw.To, SubjectPrefix: raw.SubjectPrefix}
	if e.Host == "" {
		p.add("channel %s: smtp.host is required", name)
	}
	if e.TLS == "" {
		e.TLS = "starttls"
	}
	switch e.TLS {
	case "starttls", "tls":
	case "none":
		if !loopback(e.Host) {
			p.add("channel %s: smtp.tls none is allowed only for a relay on this machine (127.0.0.1, ::1, localhost), not %s", name, e.Host)
		}
	default:
		p.add("channel %s: smtp.tls must be starttls, tls or none", name)
	}
	if e.Port == 0 {
		e.Port = 587
		if e.TLS == "tls" {
			e.Port = 465
		}
	}
	if e.Port < 1 || e.Port > 65535 {
		p.add("channel %s: smtp.port %d is not a port", name, e.Port)
	}
	if raw.SMTP.Password != nil {
		if v, ok := p.secret(name, "smtp.password", raw.SMTP.Password); ok {
			e.Password = strings.TrimRight(v, "\r\n")
		}
		if e.Username == "" {
			p.add("channel %s: smtp.password needs smtp.username", name)
		}
	}
	if e.CAFile != "" && !filepath.IsAbs(e.CAFile) && p.env.Dir != "" {
		e.CAFile = filepath.Join(p.env.Dir, e.CAFile)
	}
	if e.CAFile != "" {
		if pem, err := p.env.ReadFile(e.CAFile); err != nil {
			p.add("channel %s: smtp.ca_file: %v", name, err)
		} else if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			p.add("channel %s: smtp.ca_file %s holds no PEM certificate", name, e.CAFile)
		}
	}
	if e.From == "" {
		p.add("channel %s: from is required", name)
	}
	if len(e.To) == 0 {
		p.add("channel %s: to needs at least one address", name)
	}
	for _, a := range append([]string{e.From}, e.To...) {
		if strings.ContainsAny(a, "\r\n") {
			p.add("channel %s: address %q contains a line break", name, a)
		}
	}
	return e
}

func (p *parser) push(name string, raw *rawChannel) *PushConfig {
	c := &PushConfig{Subject: raw.Subject, Allow: raw.Allow, TTL: orDefault(raw.TTL, DefaultPushTTL)}
	if !strings.HasPrefix(c.Subject, "mailto:") && !strings.HasPrefix(c.Subject, "https://") {
		p.add("channel %s: subject must be a mailto: or https: contact for the push services, e.g. mailto:ops@example.com", name)
	}
	if raw.IncludeArgs {
		p.add("channel %s: a push message never carries arguments; drop include_args", name)
	}
	if c.Allow == nil {
		c.Allow = DefaultPushServices
	}
	for _, h := range c.Allow {
		if h == "" || strings.ContainsAny(h, "/@?# ") || strings.Contains(strings.TrimPrefix(h, "*."), "*") {
			p.add("channel %s: allow entry %q must be a host, host:port or *.domain", name, h)
		}
	}
	if raw.PrivateKey != nil {
		if v, ok := p.secret(name, "vapid_private_key", raw.PrivateKey); ok {
			c.PrivateKey = strings.TrimSpace(v)
			if _, err := vapidPublicKey(c.PrivateKey); err != nil {
				p.add("channel %s: vapid_private_key: %v", name, err)
			}
		}
	}
	return c
}

func (p *parser) route(i int, r rawRoute, channels map[string]*ChannelConfig) Route {
	out := Route{Tools: r.Tools, Notify: r.Notify, EscalateAfter: time.Duration(r.EscalateAfter),
		EscalateTo: r.EscalateTo, RemindBefore: time.Duration(r.RemindBefore)}
	where := fmt.Sprintf("routes[%d]", i)
	if len(r.Tools) == 0 {
		p.add("%s: tools is required (tool names or patterns such as payments.* or *)", where)
	}
	for _, pat := range r.Tools {
		if _, err := path.Match(pat, ""); err != nil {
			p.add("%s: tools pattern %q: %v", where, pat, err)
		}
	}
	for _, n := range append(append([]string(nil), r.Notify...), r.EscalateTo...) {
		if _, ok := channels[n]; !ok {
			p.add("%s: no channel named %q", where, n)
		}
	}
	if (out.EscalateAfter > 0) != (len(out.EscalateTo) > 0) {
		p.add("%s: escalate_after and escalate_to go together", where)
	}
	return out
}

func (p *parser) secret(channel, field string, ref *secretRef) (string, bool) {
	switch {
	case ref.inline:
		p.add("channel %s: %s must be {file: PATH} or {env: NAME}; secrets are not written into the configuration", channel, field)
	case ref.File != "" && ref.Env != "":
		p.add("channel %s: %s: give file or env, not both", channel, field)
	case ref.File != "":
		f := ref.File
		if !filepath.IsAbs(f) && p.env.Dir != "" {
			f = filepath.Join(p.env.Dir, f)
		}
		b, err := p.env.ReadFile(f)
		if err != nil {
			p.add("channel %s: %s: %v", channel, field, err)
			return "", false
		}
		if v := strings.TrimSpace(string(b)); v != "" {
			return v, true
		}
		p.add("channel %s: %s: %s is empty", channel, field, f)
	case ref.Env != "":
		if v := strings.TrimSpace(p.env.Getenv(ref.Env)); v != "" {
			return v, true
		}
		p.add("channel %s: %s: the environment variable %s is not set", channel, field, ref.Env)
	default:
		p.add("channel %s: %s must be {file: PATH} or {env: NAME}; secrets are not written into the configuration", channel, field)
	}
	return "", false
}

// checkURL accepts https addresses, and http only to this machine (a
// receiver on loopback, or a test).
func (p *parser) checkURL(channel, field, raw string) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil {
		p.add("channel %s: %s must be an absolute https address without credentials", channel, field)
		return
	}
	if u.Scheme == "https" || (u.Scheme == "http" && loopback(u.Hostname())) {
		return
	}
	p.add("channel %s: %s must be https (http is allowed only to 127.0.0.1, ::1 or localhost)", channel, field)
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func decodePrefixed(s, prefix string) ([]byte, error) {
	if !strings.HasPrefix(s, prefix) {
		return nil, fmt.Errorf("must start with %s", prefix)
	}
	b, err := base64.StdEncoding.DecodeString(s[len(prefix):])
	if err != nil {
		return nil, fmt.Errorf("the part after %s is not base64", prefix)
	}
	return b, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

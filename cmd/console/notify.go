package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/countersign/countersign/internal/console"
	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/tools"
)

// notifySource says where the notifications configuration comes from and
// how links in messages start.
type notifySource struct {
	// file is --notify; empty means DATA/notify.yaml if it exists, else
	// the tools file's notifications section, else none.
	file      string
	toolsFile string
	publicURL string
	getenv    func(string) string
}

// notifyApp is the notifications part of a running console.
type notifyApp struct {
	cfg    *notify.Config
	from   string // the file the configuration was read from
	router *notify.Router
	built  *notify.Built
	outbox outboxStore
}

func vapidKeyPath(data string) string { return filepath.Join(data, "push-vapid.key") }

// openNotify reads the configuration and builds its channels; it returns
// nil when no notifications are configured.
func openNotify(data string, src *notifySource, d *engine, log *slog.Logger) (*notifyApp, error) {
	if src == nil {
		return nil, nil
	}
	cfg, from, err := loadNotifyConfig(data, src)
	if err != nil || cfg == nil {
		return nil, err
	}
	opts := notify.BuildOptions{Subscriptions: d.outbox, Logger: log}
	for _, ch := range cfg.Channels {
		if ch.Type == notify.TypePush && ch.Push.PrivateKey == "" {
			if opts.VAPIDKey, err = loadOrCreateVAPIDKey(data); err != nil {
				return nil, err
			}
		}
	}
	built, err := notify.Build(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("notifications (%s): %w", from, err)
	}
	return &notifyApp{cfg: cfg, from: from, router: notify.NewRouter(cfg, src.publicURL), built: built, outbox: d.outbox}, nil
}

func loadNotifyConfig(data string, src *notifySource) (*notify.Config, string, error) {
	env := notify.Env{Getenv: src.getenv}
	file := src.file
	if file == "" {
		if _, err := os.Stat(filepath.Join(data, "notify.yaml")); err == nil {
			file = filepath.Join(data, "notify.yaml")
		}
	}
	if file != "" {
		cfg, err := notify.LoadConfig(file, env)
		return cfg, file, err
	}
	toolsFile := src.toolsFile
	if toolsFile == "" {
		toolsFile = filepath.Join(data, "tools.yaml")
	}
	b, err := os.ReadFile(toolsFile)
	if err != nil {
		return nil, "", nil // loadTools reports a missing tools file
	}
	cfg, err := toolsFileNotifications(toolsFile, b, env.Getenv)
	return cfg, toolsFile, err
}

// toolsFileNotifications reads the notifications section of a tools file
// (its text b) with its secrets, as serve does at start and console tools
// lint does: nil, nil without one; a *notify.ConfigError naming the file
// with every problem.
func toolsFileNotifications(toolsFile string, b []byte, getenv func(string) string) (*notify.Config, error) {
	cfg, err := notify.FromToolsFile(b, notify.Env{Getenv: getenv, Dir: filepath.Dir(toolsFile)})
	var ce *notify.ConfigError
	if errors.As(err, &ce) {
		ce.File = toolsFile + " (notifications)"
	}
	return cfg, err
}

// loadOrCreateVAPIDKey returns the console's own VAPID private key, made on
// first use. Browsers subscribe with its public key, so it must not change:
// a new key would orphan every subscription.
func loadOrCreateVAPIDKey(data string) (string, error) {
	b, err := os.ReadFile(vapidKeyPath(data))
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", vapidKeyPath(data), err)
	}
	key, err := notify.NewVAPIDKey()
	if err != nil {
		return "", err
	}
	if err := writeFileAtomic(vapidKeyPath(data), []byte(key+"\n")); err != nil {
		return "", fmt.Errorf("write %s: %w", vapidKeyPath(data), err)
	}
	return key, nil
}

// dispatcher returns the notification dispatcher and what the console
// serves about notifications; nil, nil when none are configured.
func (a *app) dispatcher() (*notify.Dispatcher, *console.Notifications) {
	n := a.notify
	if n == nil {
		return nil, nil
	}
	dc := notify.DispatcherConfig{
		Outbox: n.outbox, Channels: n.built.Channels, Timeouts: n.built.Timeouts,
		Retry: n.cfg.Retry, Lease: n.cfg.Lease, Keep: n.cfg.Keep, Logger: a.log,
		// People are named in messages as the agent API names them.
		Names: a.accounts.PublicNames,
	}
	if a.tracer != nil {
		dc.Tracer = a.tracer
	}
	d := notify.NewDispatcher(dc)
	notes := &console.Notifications{Deliveries: d}
	if n.built.Push != nil {
		notes.Push, notes.Subscriptions = n.built.Push, n.outbox
	}
	names := make([]string, 0, len(n.cfg.Channels))
	for name := range n.cfg.Channels {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		notes.Channels = append(notes.Channels, console.NotificationChannel{Name: name, Type: n.cfg.Channels[name].Type,
			Detail: describeChannel(n.cfg.Channels[name], n.built.Channels[name])})
	}
	return d, notes
}

// describeChannel says where a channel sends, without its secrets.
func describeChannel(c *notify.ChannelConfig, built notify.Channel) string {
	var s string
	switch c.Type {
	case notify.TypeWebhook:
		s = "POST " + hostOf(c.Webhook.URL)
		if w, ok := built.(*notify.Webhook); ok && w.PublicKey() != "" {
			s += ", signed v1 and v1a (public key " + w.PublicKey() + ")"
		} else {
			s += ", signed v1"
		}
	case notify.TypeSlack:
		if c.Slack.Token != "" {
			s = "chat.postMessage to " + c.Slack.Channel + " (edited when decided)"
		} else {
			s = "incoming webhook (a follow-up when decided)"
		}
	case notify.TypeEmail:
		s = "SMTP " + c.Email.Host + " to " + strings.Join(c.Email.To, ", ")
	case notify.TypePush:
		s = "Web Push via " + strings.Join(c.Push.Allow, ", ")
	}
	if c.Events != nil {
		s += "; events: " + strings.Join(c.Events, ", ")
	}
	if c.IncludeArgs {
		s += "; with arguments"
	}
	return s
}

func hostOf(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Scheme + "://" + u.Host
	}
	return "?"
}

// checkRuleChannels refuses a rule that names a notification channel the
// configuration does not have: its calls would reach nobody it meant.
func checkRuleChannels(reg *tools.Registry, n *notifyApp) error {
	var problems []string
	if n == nil {
		problems = ruleChannelProblems(reg, nil, "")
	} else {
		problems = ruleChannelProblems(reg, n.cfg, n.from)
	}
	if len(problems) > 0 {
		return fmt.Errorf("rules name unknown notification channels:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// ruleChannelProblems lists the rules that name a channel cfg (read from
// from) does not have; with cfg nil, every rule that names one.
func ruleChannelProblems(reg *tools.Registry, cfg *notify.Config, from string) []string {
	var problems []string
	for _, t := range reg.Tools() {
		for _, r := range t.Rules {
			for _, ch := range r.Notify {
				if cfg == nil {
					problems = append(problems, fmt.Sprintf("tool %s, rule %s: notify names %s, but no notifications are configured (see docs/notifications.md)", t.Name, r.ID, ch))
				} else if _, ok := cfg.Channels[ch]; !ok {
					problems = append(problems, fmt.Sprintf("tool %s, rule %s: notify names %s, which is not a channel of %s", t.Name, r.ID, ch, from))
				}
			}
		}
		for i, tier := range t.Escalate {
			for _, ch := range tier.Notify {
				if cfg == nil {
					problems = append(problems, fmt.Sprintf("tool %s, escalation tier %d: notify names %s, but no notifications are configured (see docs/notifications.md)", t.Name, i+1, ch))
				} else if _, ok := cfg.Channels[ch]; !ok {
					problems = append(problems, fmt.Sprintf("tool %s, escalation tier %d: notify names %s, which is not a channel of %s", t.Name, i+1, ch, from))
				}
			}
		}
	}
	return problems
}

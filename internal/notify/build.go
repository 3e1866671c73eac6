package notify

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// BuildOptions are what channels need beyond their configuration.
type BuildOptions struct {
	// Transport carries HTTP requests (nil for the default transport).
	Transport http.RoundTripper
	// VAPIDKey is the console's own VAPID private key, used by push
	// channels that name none.
	VAPIDKey      string
	Subscriptions Subscriptions
	Now           func() time.Time
	Logger        *slog.Logger
}

// Built is a configuration made runnable.
type Built struct {
	Channels map[string]Channel
	Timeouts map[string]time.Duration
	// Push is the push channel, nil when none is configured; its public
	// key is what browsers subscribe with.
	Push *Push
}

// Build makes the channels of cfg. At most one push channel may be
// configured: browsers subscribe once, with one key.
func Build(cfg *Config, opts BuildOptions) (*Built, error) {
	b := &Built{Channels: map[string]Channel{}, Timeouts: map[string]time.Duration{}}
	for name, cc := range cfg.Channels {
		var ch Channel
		switch cc.Type {
		case TypeWebhook:
			ch = NewWebhook(cc.Webhook, opts.Transport, opts.Now)
		case TypeSlack:
			ch = NewSlack(cc.Slack, opts.Transport)
		case TypeEmail:
			e, err := NewEmail(cc.Email)
			if err != nil {
				return nil, fmt.Errorf("channel %s: %w", name, err)
			}
			ch = e
		case TypePush:
			if b.Push != nil {
				return nil, fmt.Errorf("channel %s: only one push channel may be configured", name)
			}
			if opts.Subscriptions == nil {
				return nil, fmt.Errorf("channel %s: push needs the console's subscription store", name)
			}
			p, err := NewPush(cc.Push, opts.VAPIDKey, opts.Subscriptions, opts.Transport, opts.Logger)
			if err != nil {
				return nil, fmt.Errorf("channel %s: %w", name, err)
			}
			b.Push, ch = p, p
		default:
			return nil, fmt.Errorf("channel %s: unknown type %q", name, cc.Type)
		}
		b.Channels[name] = ch
		b.Timeouts[name] = cc.Timeout
	}
	return b, nil
}

package notify

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"html/template"
	"net/textproto"
	"os"
	"strings"
	texttemplate "text/template"
	"time"

	"github.com/wneessen/go-mail"
)

// Email sends each event as a plain-text mail with an HTML alternative. The
// Message-ID is derived from the event id, so a mail retried after a crash
// is recognisably the same mail; later mails about a call answer the first
// one (In-Reply-To), so clients thread them. The link opens the call in the
// console and carries no secret.
type Email struct {
	cfg    *EmailConfig
	tls    *tls.Config
	domain string
}

// NewEmail returns the channel for cfg.
func NewEmail(cfg *EmailConfig) (*Email, error) {
	e := &Email{cfg: cfg, tls: &tls.Config{ServerName: cfg.Host, MinVersion: tls.VersionTLS12}}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("notify: email: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("notify: email: %s holds no PEM certificate", cfg.CAFile)
		}
		e.tls.RootCAs = pool
	}
	e.domain = "countersign.invalid"
	if at := strings.LastIndexByte(cfg.From, '@'); at >= 0 {
		e.domain = strings.Trim(cfg.From[at+1:], "> ")
	}
	return e, nil
}

func (e *Email) usesReceipt() bool { return true }

// Send delivers one mail to every configured recipient.
func (e *Email) Send(ctx context.Context, m Message) (string, error) {
	msg, id, err := e.message(m)
	if err != nil {
		return "", Permanent(err)
	}
	opts := []mail.Option{mail.WithPort(e.cfg.Port), mail.WithTLSConfig(e.tls), mail.WithoutNoop()}
	if deadline, ok := ctx.Deadline(); ok {
		opts = append(opts, mail.WithTimeout(max(time.Until(deadline), time.Second)))
	}
	switch e.cfg.TLS {
	case "tls":
		opts = append(opts, mail.WithSSL())
	case "none":
		opts = append(opts, mail.WithTLSPolicy(mail.NoTLS))
	default:
		opts = append(opts, mail.WithTLSPolicy(mail.TLSMandatory))
	}
	if e.cfg.Username != "" {
		opts = append(opts, mail.WithSMTPAuth(mail.SMTPAuthAutoDiscover), mail.WithUsername(e.cfg.Username),
			mail.WithPassword(e.cfg.Password))
	}
	client, err := mail.NewClient(e.cfg.Host, opts...)
	if err != nil {
		return "", Permanent(fmt.Errorf("email: %w", err))
	}
	if err := client.DialAndSendWithContext(ctx, msg); err != nil {
		// A 5xx reply (refused recipient, failed authentication) will not
		// pass by itself; 4xx replies and network trouble may.
		var se *mail.SendError
		var te *textproto.Error
		if (errors.As(err, &se) && !se.IsTemp() && se.ErrorCode() >= 500) || (errors.As(err, &te) && te.Code >= 500) {
			return "", Permanent(fmt.Errorf("email: %w", err))
		}
		return "", &SendError{Err: fmt.Errorf("email: %w", err)}
	}
	if m.Receipt != "" {
		return "", nil
	}
	return id, nil
}

func (e *Email) message(m Message) (*mail.Msg, string, error) {
	ev := m.Event
	msg := mail.NewMsg()
	if err := msg.From(e.cfg.From); err != nil {
		return nil, "", fmt.Errorf("email: from: %w", err)
	}
	if err := msg.To(e.cfg.To...); err != nil {
		return nil, "", fmt.Errorf("email: to: %w", err)
	}
	subject := title(ev)
	if ev.Data.Target != "" {
		subject += " on " + inert(ev.Data.Target)
	}
	if e.cfg.SubjectPrefix != "" {
		subject = e.cfg.SubjectPrefix + " " + subject
	}
	msg.Subject(subject)
	id := ev.ID + "@" + e.domain
	msg.SetMessageIDWithValue(id)
	id = "<" + id + ">"
	if m.Receipt != "" {
		msg.SetGenHeader(mail.HeaderInReplyTo, m.Receipt)
		msg.SetGenHeader(mail.HeaderReferences, m.Receipt)
	}
	msg.SetGenHeader("X-Countersign-Event", ev.Type)
	msg.SetDate()
	var text, html bytes.Buffer
	view := mailView(ev)
	if err := textMail.Execute(&text, view); err != nil {
		return nil, "", err
	}
	if err := htmlMail.Execute(&html, view); err != nil {
		return nil, "", err
	}
	msg.SetBodyString(mail.TypeTextPlain, text.String())
	msg.AddAlternativeString(mail.TypeTextHTML, html.String())
	return msg, id, nil
}

type mailRow struct{ Label, Value string }

type mailData struct {
	Title    string
	Rows     []mailRow
	Decision string
	URL      string
	Action   string
	Note     string
}

func mailView(ev Event) mailData {
	d := ev.Data
	v := mailData{Title: title(ev), URL: d.URL, Decision: decisionLine(ev), Action: "Open the call in Countersign"}
	if d.ID != "" {
		v.Rows = []mailRow{{"Tool", visible(d.Tool)}, {"Target", inert(d.Target)}, {"Actor", inert(d.Actor)},
			{"Digest", d.Digest}, {"Decide by", deadline(d)}, {"Status", d.Status}, {"Call", d.ID}}
		if line := d.RiskLine(); line != "" {
			v.Rows = append(v.Rows[:1], append([]mailRow{{"Risk", line}}, v.Rows[1:]...)...)
		}
	} else {
		v.Rows = []mailRow{{"Tool", visible(d.Tool)}}
		v.Action = "Review the tool in Countersign"
	}
	if d.Reason != "" {
		v.Rows = append(v.Rows, mailRow{"Reason", inert(d.Reason)})
	}
	if ev.Type == CallSubmitted || ev.Type == CallEscalated || ev.Type == CallReminder {
		v.Note = "Decide in the console, where you see every argument and the whole digest. Replying to this mail does nothing."
	}
	return v
}

var textMail = texttemplate.Must(texttemplate.New("text").Parse(`{{.Title}}
{{range .Rows}}
{{.Label}}: {{.Value}}{{end}}
{{if .Decision}}
{{.Decision}}
{{end}}
{{.Action}}: {{.URL}}
{{if .Note}}
{{.Note}}
{{end}}`))

var htmlMail = template.Must(template.New("html").Parse(`<!DOCTYPE html>
<html><body style="font-family: sans-serif">
<h2>{{.Title}}</h2>
<table>{{range .Rows}}
<tr><th align="left">{{.Label}}</th><td><code>{{.Value}}</code></td></tr>{{end}}
</table>
{{if .Decision}}<p>{{.Decision}}</p>{{end}}
<p><a href="{{.URL}}">{{.Action}}</a></p>
{{if .Note}}<p><small>{{.Note}}</small></p>{{end}}
</body></html>
`))

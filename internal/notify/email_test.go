package notify_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/countersign/countersign/internal/notify"
)

// smtpSink is an in-process SMTP server (go-smtp) that requires STARTTLS
// and AUTH PLAIN when configured so, and keeps every message it accepts.
type smtpSink struct {
	user, pass string
	rcptCode   int // 0 accepts recipients

	mu   sync.Mutex
	mail []sunkMail
}

type sunkMail struct {
	from string
	to   []string
	data []byte
	tls  bool
	auth string
}

type sinkSession struct {
	sink *smtpSink
	conn *smtp.Conn
	m    sunkMail
}

func (s *sinkSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (s *sinkSession) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(identity, user, pass string) error {
		if user != s.sink.user || pass != s.sink.pass {
			return &smtp.SMTPError{Code: 535, EnhancedCode: smtp.EnhancedCode{5, 7, 8}, Message: "invalid credentials"}
		}
		s.m.auth = user
		return nil
	}), nil
}

func (s *sinkSession) Mail(from string, _ *smtp.MailOptions) error {
	if s.sink.user != "" && s.m.auth == "" {
		return &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "authentication required"}
	}
	s.m.from = from
	return nil
}

func (s *sinkSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	if s.sink.rcptCode != 0 {
		return &smtp.SMTPError{Code: s.sink.rcptCode, EnhancedCode: smtp.EnhancedCode{s.sink.rcptCode / 100, 1, 1}, Message: "refused on purpose"}
	}
	s.m.to = append(s.m.to, to)
	return nil
}

func (s *sinkSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	_, s.m.tls = s.conn.TLSConnectionState()
	s.m.data = b
	s.sink.mu.Lock()
	s.sink.mail = append(s.sink.mail, s.m)
	s.sink.mu.Unlock()
	return nil
}

func (s *sinkSession) Reset()        { s.m = sunkMail{auth: s.m.auth} }
func (s *sinkSession) Logout() error { return nil }

// startSMTP serves the sink on 127.0.0.1; with tlsCfg it offers STARTTLS.
func startSMTP(t *testing.T, sink *smtpSink, tlsCfg *tls.Config) int {
	t.Helper()
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		return &sinkSession{sink: sink, conn: c}, nil
	}))
	srv.Domain = "localhost"
	srv.TLSConfig = tlsCfg
	srv.AllowInsecureAuth = tlsCfg == nil
	srv.ReadTimeout, srv.WriteTimeout = 10*time.Second, 10*time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// selfSigned returns a server certificate for 127.0.0.1 and the PEM of
// the certificate, to trust as a CA.
func selfSigned(t *testing.T) (tls.Certificate, []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "smtp test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pemBytes
}

type parsedMail struct {
	header      mail.Header
	subject     string
	text, html  string
	contentType string
}

func parseMail(t *testing.T, raw []byte) parsedMail {
	t.Helper()
	m, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("the mail does not parse: %v\n%s", err, raw)
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(m.Header.Get("Subject"))
	if err != nil {
		t.Fatal(err)
	}
	p := parsedMail{header: m.Header, subject: subject}
	mediaType, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	p.contentType = mediaType
	if mediaType != "multipart/alternative" {
		t.Fatalf("Content-Type %s, want multipart/alternative", mediaType)
	}
	mr := multipart.NewReader(m.Body, params["boundary"])
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(part)
		ct, _, _ := mime.ParseMediaType(part.Header.Get("Content-Type"))
		switch ct {
		case "text/plain":
			p.text = string(body)
		case "text/html":
			p.html = string(body)
		}
	}
	return p
}

func TestEmailOverStartTLSWithAuth(t *testing.T) {
	cert, caPEM := selfSigned(t)
	sink := &smtpSink{user: "countersign", pass: "correct horse"}
	port := startSMTP(t, sink, &tls.Config{Certificates: []tls.Certificate{cert}})
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ca.pem"), caPEM, 0o600)
	cfg := mustConfig(t, fmt.Sprintf(`
channels:
  mail:
    type: email
    smtp: {host: 127.0.0.1, port: %d, username: countersign, password: {env: SMTP_PASSWORD}, ca_file: %s}
    from: Countersign <countersign@example.com>
    to: [oncall@example.com, lead@example.com]
    subject_prefix: "[Countersign]"
`, port, filepath.Join(dir, "ca.pem")), map[string]string{"SMTP_PASSWORD": "correct horse"})
	r := newRig(t, cfg, notify.BuildOptions{}, 0.5)
	c := testCall("call_a", r.clk.Now())
	c.Target = "invoice:<b>INV-1042</b>\u200b"
	r.outbox.Enqueue(r.router.Notices(submitted(c))...)
	deliverAll(t, r.disp)
	r.outbox.Enqueue(r.router.Notices(denied(c, "bob", "wrong <invoice>", r.clk.Now()))...)
	deliverAll(t, r.disp)

	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.mail) != 2 {
		for _, row := range rowsOf(r.outbox, "") {
			t.Logf("row %s %s %q", row.Kind, row.State, row.LastError)
		}
		t.Fatalf("%d mails arrived, want 2", len(sink.mail))
	}
	first := sink.mail[0]
	if !first.tls || first.auth != "countersign" || first.from != "countersign@example.com" ||
		strings.Join(first.to, ",") != "oncall@example.com,lead@example.com" {
		t.Fatalf("envelope %+v: want STARTTLS, AUTH as countersign, both recipients", first)
	}
	m := parseMail(t, first.data)
	rows := rowsOf(r.outbox, "mail")
	wantID := "<" + rows[0].EventID + "@example.com>"
	if got := m.header.Get("Message-Id"); got != wantID {
		t.Fatalf("Message-ID %s, want %s (from the event id, so a repeated mail is recognisable)", got, wantID)
	}
	if rows[0].Receipt != wantID {
		t.Fatalf("receipt %q", rows[0].Receipt)
	}
	if m.subject != "[Countersign] Approval needed: payments.refund on invoice:<b>INV-1042</b>[U+200B]" {
		t.Fatalf("subject %q", m.subject)
	}
	for _, want := range []string{"Target: invoice:<b>INV-1042</b>[U+200B]", "Actor: agent:billing-bot", "Digest: " + c.Digest,
		"Open the call in Countersign: https://approvals.example.com/calls/call_a", "Replying to this mail does nothing"} {
		if !strings.Contains(m.text, want) {
			t.Errorf("plain text lacks %q:\n%s", want, m.text)
		}
	}
	if !strings.Contains(m.html, `<a href="https://approvals.example.com/calls/call_a">`) ||
		!strings.Contains(m.html, "invoice:&lt;b&gt;INV-1042&lt;/b&gt;[U&#43;200B]") || strings.Contains(m.html, "<b>INV") {
		t.Fatalf("html part does not link the call or does not escape the target:\n%s", m.html)
	}
	for _, part := range []string{m.text, m.html} {
		if strings.Contains(part, "s3cr3t") || strings.Contains(part, "token") || strings.Contains(part, "?") {
			t.Fatalf("the mail carries arguments or a secret-bearing link:\n%s", part)
		}
	}
	second := parseMail(t, sink.mail[1].data)
	if second.header.Get("In-Reply-To") != wantID || second.header.Get("References") != wantID {
		t.Fatalf("the denial does not answer the first mail: In-Reply-To %q", second.header.Get("In-Reply-To"))
	}
	if !strings.Contains(second.text, "denied by bob: wrong <invoice>") || !strings.HasPrefix(second.subject, "[Countersign] Denied: payments.refund") {
		t.Fatalf("denial mail %q:\n%s", second.subject, second.text)
	}
}

func TestEmailRefusals(t *testing.T) {
	cases := []struct {
		name  string
		sink  *smtpSink
		pass  string
		state notify.State
		want  string
	}{
		{"a refused recipient is permanent", &smtpSink{rcptCode: 550}, "", notify.StateDead, "550"},
		{"a temporary refusal is retried", &smtpSink{rcptCode: 451}, "", notify.StatePending, "451"},
		{"a wrong password is permanent", &smtpSink{user: "u", pass: "right"}, "wrong", notify.StateDead, "535"},
	}
	cert, caPEM := selfSigned(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, caPEM, 0o600)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			security := "tls: none"
			var tlsCfg *tls.Config
			if tc.pass != "" {
				security = "username: u, password: {env: P}, ca_file: " + ca
				tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}}
			}
			port := startSMTP(t, tc.sink, tlsCfg)
			cfg := mustConfig(t, fmt.Sprintf("channels:\n  mail: {type: email, smtp: {host: 127.0.0.1, port: %d, %s}, from: a@example.com, to: [b@example.com]}\n",
				port, security), map[string]string{"P": tc.pass})
			r := newRig(t, cfg, notify.BuildOptions{}, 0)
			r.outbox.Enqueue(r.router.Notices(submitted(testCall("call_a", r.clk.Now())))...)
			deliverAll(t, r.disp)
			row := rowsOf(r.outbox, "mail")[0]
			if row.State != tc.state || !strings.Contains(row.LastError, tc.want) {
				t.Fatalf("row %s %q, want %s %q", row.State, row.LastError, tc.state, tc.want)
			}
		})
	}
}

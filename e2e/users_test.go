package e2e

// login is a console account created for a test.
type login struct {
	name, password, role string
}

// addUser creates a console account on the server's data directory with
// `console user add`, the password read from stdin. The server reads
// accounts from the database at each login, so this works while it runs.
func (s *server) addUser(name, role string) login {
	s.tb.Helper()
	l := login{name: name, password: "pw-" + name + "-correct horse battery staple", role: role}
	_, code := runConsole(s.tb, l.password+"\n", "user", "add", name, "--role", role, "--data", s.data, "--password-stdin")
	if code != 0 {
		s.tb.Fatalf("console user add %s --role %s exited %d", name, role, code)
	}
	return l
}

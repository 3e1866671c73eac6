package mcp

// SessionsOf is how many MCP sessions opened over HTTP token has open.
func (g *Gateway) SessionsOf(token string) int { return g.sessions.count(token) }

// ServedSessions is how many sessions the SDK's server for upstream
// server has connected, counted or not.
func (g *Gateway) ServedSessions(server string) int {
	n := 0
	for range g.servers[server].Sessions() {
		n++
	}
	return n
}

// StreamsOf is how many event streams token has open over HTTP.
func (g *Gateway) StreamsOf(token string) int { return g.streams.count(token) }

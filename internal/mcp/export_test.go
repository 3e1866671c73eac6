package mcp

// SessionsOf is how many MCP sessions opened over HTTP token has open.
func (g *Gateway) SessionsOf(token string) int { return g.sessions.count(token) }

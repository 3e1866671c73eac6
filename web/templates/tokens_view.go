package templates

import "time"

// OperatorTokensView is the page of the viewer's own operator tokens.
type OperatorTokensView struct {
	Page
	Tokens []OperatorTokenRow
	// New is the token just made, with its secret, shown this once.
	New *NewOperatorToken
	// Live counts the live tokens; Max is how many an account may hold.
	Live, Max int
	// Fresh is true while the login is recent enough to make a token;
	// FreshFor says how recent.
	Fresh    bool
	FreshFor string
	// Decider is false for an account that is neither an operator nor an
	// admin: it makes no token.
	Decider bool
	// APIOn says whether this console serves the operator API now.
	APIOn   bool
	Message string
	Error   string
}

// OperatorTokenRow is one operator token in the list.
type OperatorTokenRow struct {
	ID, Scope, Note, State string
	CreatedAt, ExpiresAt   time.Time
}

// NewOperatorToken is a token just made, with its secret.
type NewOperatorToken struct {
	ID, Scope, Secret string
	ExpiresAt         time.Time
}

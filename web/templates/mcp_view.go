package templates

import "time"

// MCPCallInfo is what the call page says about a call made through the MCP
// gateway: the upstream, the tool's name there, and its pinned definition.
type MCPCallInfo struct {
	Server        string
	Tool          Text
	DefinitionURL string // "" when the call records no definition digest
}

// MCPReviewView is the admin's list of MCP servers' tools and their review
// states.
type MCPReviewView struct {
	Page
	Servers []MCPServerView
	CSRF    string
	Notice  string
	Error   string
}

// MCPServerView is one upstream's current listing.
type MCPServerView struct {
	Name  string
	Tools []MCPToolRow
	// Quarantined is set while the server is quarantined: none of its
	// tools is listed or callable until an admin releases it.
	Quarantined      bool
	QuarantineReason string
	QuarantinedAt    time.Time
}

// MCPToolRow is one tool of a listing.
type MCPToolRow struct {
	Tool       Text
	Status     string // pending, approved, rejected, quarantined
	Digest     string
	FirstSeen  time.Time
	Changed    bool // an earlier definition of the tool was approved
	Deceptive  bool // its description or schema holds deceptive characters
	URL        string
	ReasonsCSV string
	// RulesMisfit is set when the tools file's rules for the tool do not
	// fit its schema.
	RulesMisfit bool
}

// MCPDefinitionView is one pinned definition, with what changed since the
// definition approved before it, and the review form for admins.
type MCPDefinitionView struct {
	Page
	Server       string
	ToolName     string // the upstream's name of the tool, for the review form
	Tool         Text
	Status       string
	DigestGroups []string
	Digest       string
	FirstSeen    time.Time
	DecidedBy    *Text
	DecidedAt    time.Time
	Description  Text
	Reasons      []string
	Notes        []string
	// RuleProblems say why the tools file's rules for the tool do not fit
	// this definition's schema.
	RuleProblems []string
	Annotations  []Text // the server's claims, one line each
	// Lines is the pinned definition, one line of indented JSON each.
	Lines []Text
	// Diff is set when an earlier definition was approved: every line,
	// marked "-" (only in the earlier one), "+" (only in this one) or " ".
	Diff          []DiffLine
	PreviousURL   string
	CanReview     bool
	CSRF          string
	Notice, Error string
}

// DiffLine is one line of a definition's diff.
type DiffLine struct {
	Op   string // "+", "-" or " "
	Text Text
}

// Warned reports whether anything shown holds deceptive characters.
func (v MCPDefinitionView) Warned() bool {
	if v.Description.Deceptive() {
		return true
	}
	for _, l := range v.Lines {
		if l.Deceptive() {
			return true
		}
	}
	return false
}

func diffClass(op string) string {
	switch op {
	case "+":
		return "diff-add"
	case "-":
		return "diff-del"
	}
	return "diff-same"
}

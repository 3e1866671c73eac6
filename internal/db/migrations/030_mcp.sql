-- Tool definitions of MCP servers, pinned by digest and reviewed by admins.
-- A row is never deleted: a changed definition is a new row, and the review
-- of each one is kept.
CREATE TABLE mcp_definitions (
    server      TEXT NOT NULL,
    tool        TEXT NOT NULL,            -- the upstream's own tool name
    digest      TEXT NOT NULL,            -- tools.DefinitionDigestOf(definition)
    definition  TEXT NOT NULL,            -- canonical JSON of what is pinned
    status      TEXT NOT NULL CHECK (status IN ('pending','approved','rejected','quarantined')),
    reasons     TEXT NOT NULL DEFAULT '[]', -- why it was quarantined (JSON list of strings)
    first_seen  INTEGER NOT NULL,         -- unix milliseconds
    decided_by  TEXT,
    decided_at  INTEGER,
    PRIMARY KEY (server, tool, digest)
) STRICT;

-- Tool definitions of MCP servers, pinned by digest and reviewed by admins
-- (PostgreSQL; mirrors the SQLite migration of the same number). A row is
-- never deleted: a changed definition is a new row, and the review of each
-- one is kept.
CREATE TABLE mcp_definitions (
    server      TEXT COLLATE "C" NOT NULL,
    tool        TEXT COLLATE "C" NOT NULL,  -- the upstream's own tool name
    digest      TEXT COLLATE "C" NOT NULL,  -- tools.DefinitionDigestOf(definition)
    definition  TEXT COLLATE "C" NOT NULL,  -- canonical JSON of what is pinned
    status      TEXT COLLATE "C" NOT NULL CHECK (status IN ('pending','approved','rejected','quarantined')),
    reasons     TEXT COLLATE "C" NOT NULL DEFAULT '[]', -- why it was quarantined (JSON list of strings)
    first_seen  BIGINT NOT NULL,            -- unix milliseconds
    decided_by  TEXT COLLATE "C",
    decided_at  BIGINT,
    PRIMARY KEY (server, tool, digest)
);

-- The nonce ledger keyed by its jti alone. As a rowid table with a text
-- primary key it was two b-trees, the rows and the index that makes a jti
-- unique, and every redemption wrote a page of each; WITHOUT ROWID the
-- rows are stored in the primary key's b-tree, one page per redemption.
-- The primary key still accepts a jti at most once. Nothing references
-- the table; its rows are copied as they are.
CREATE TEMP TABLE redemptions_copy AS SELECT jti, call_id, at FROM redemptions;
DROP TABLE redemptions;
CREATE TABLE redemptions (
    jti     TEXT PRIMARY KEY,
    call_id TEXT NOT NULL REFERENCES calls (id),
    at      INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
INSERT INTO redemptions (jti, call_id, at) SELECT jti, call_id, at FROM redemptions_copy;
DROP TABLE redemptions_copy;

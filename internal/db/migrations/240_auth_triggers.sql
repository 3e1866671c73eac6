-- Every write to the rows the in-memory caches keep or depend on calls
-- countersign_auth_write(), a function only Countersign's own connections
-- define (they count the write into the shared counters other processes
-- read): a write from any other connection fails with "no such function"
-- instead of leaving other processes serving rows it changed.
CREATE TRIGGER users_auth_insert AFTER INSERT ON users BEGIN SELECT countersign_auth_write(); END;
CREATE TRIGGER users_auth_update AFTER UPDATE ON users BEGIN SELECT countersign_auth_write(); END;
CREATE TRIGGER users_auth_delete AFTER DELETE ON users BEGIN SELECT countersign_auth_write(); END;
CREATE TRIGGER sessions_auth_insert AFTER INSERT ON sessions BEGIN SELECT countersign_auth_write(); END;
CREATE TRIGGER sessions_auth_update AFTER UPDATE ON sessions BEGIN SELECT countersign_auth_write(); END;
CREATE TRIGGER sessions_auth_delete AFTER DELETE ON sessions BEGIN SELECT countersign_auth_write(); END;
CREATE TRIGGER tokens_auth_insert AFTER INSERT ON tokens BEGIN SELECT countersign_auth_write(); END;
CREATE TRIGGER tokens_auth_update AFTER UPDATE ON tokens BEGIN SELECT countersign_auth_write(); END;
CREATE TRIGGER tokens_auth_delete AFTER DELETE ON tokens BEGIN SELECT countersign_auth_write(); END;
CREATE TRIGGER freezes_auth_insert AFTER INSERT ON freezes BEGIN SELECT countersign_auth_write(); END;
CREATE TRIGGER freezes_auth_update AFTER UPDATE ON freezes BEGIN SELECT countersign_auth_write(); END;
CREATE TRIGGER freezes_auth_delete AFTER DELETE ON freezes BEGIN SELECT countersign_auth_write(); END;
CREATE TRIGGER passkeys_auth_insert AFTER INSERT ON passkeys BEGIN SELECT countersign_auth_write(); END;
CREATE TRIGGER passkeys_auth_update AFTER UPDATE ON passkeys BEGIN SELECT countersign_auth_write(); END;
CREATE TRIGGER passkeys_auth_delete AFTER DELETE ON passkeys BEGIN SELECT countersign_auth_write(); END;

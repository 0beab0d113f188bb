-- goatbeat schema, version 3 (SQLite): the fingerprint of each schedule's published
-- definition; see ../postgres/0003_published_fingerprint.sql for why.
ALTER TABLE goatbeat_schedule ADD COLUMN published_fingerprint TEXT NULL;

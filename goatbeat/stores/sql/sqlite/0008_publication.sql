-- goatbeat schema, version 8 (SQLite): the order of code publications; see
-- ../postgres/0008_publication.sql. Nothing here touches a schedule or an execution.
CREATE TABLE goatbeat_publication (
    generation   integer     NOT NULL PRIMARY KEY,
    fingerprint  varchar(64) NOT NULL,
    release      integer     NULL,
    schedules    integer     NOT NULL,
    published_at TEXT        NOT NULL
);
CREATE INDEX goatbeat_publication_fingerprint_idx
    ON goatbeat_publication (fingerprint, generation);

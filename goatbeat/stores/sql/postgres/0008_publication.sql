-- goatbeat schema, version 8 (PostgreSQL): the order of code publications (issue #31).
-- Like 0001, `goatbeat migrate` and the Django app's migration 0008 run this very file.
-- Nothing here touches a schedule or an execution: every schedule keeps its phase.
--
-- Each code publication that changes which set of definitions the code declares is one row:
-- its generation (1, 2, ... in the order they were published), the fingerprint of the whole
-- declared set, and the release number the deploy gave it (the `release` setting, NULL when
-- none). A publication from older code is recognised here (a lower release number, or a set
-- published before the current one) and writes nothing: an old replica of a rolling deploy
-- can no longer revert what the new release published.
CREATE TABLE goatbeat_publication (
    generation   bigint      PRIMARY KEY,
    fingerprint  varchar(64) NOT NULL,
    release      bigint      NULL,
    schedules    integer     NOT NULL,
    published_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX goatbeat_publication_fingerprint_idx
    ON goatbeat_publication (fingerprint, generation);

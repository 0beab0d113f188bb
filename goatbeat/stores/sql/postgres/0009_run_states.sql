-- goatbeat schema, version 9 (PostgreSQL): every run ends in a true state.
-- Like 0001, `goatbeat migrate` and the Django app's migration 0009 run this very file.
-- Nothing here touches a row: every schedule keeps its phase, every run its status.
--
-- 'lost' (a run with no final report within its bound, or one its backend says died: a killed
-- worker, a hard time limit) and 'expired' (the backend dropped the message unrun because
-- its expires window passed, or the window passed with no start report) join the list. The
-- whole list is written again, so the constraint is the same whichever version a database
-- took first. NOT VALID then VALIDATE: writers are not blocked.
ALTER TABLE goatbeat_execution DROP CONSTRAINT goatbeat_execution_status_check;
ALTER TABLE goatbeat_execution ADD CONSTRAINT goatbeat_execution_status_check
    CHECK (status IN ('claimed', 'submitted', 'submit_failed', 'running', 'retried',
                      'succeeded', 'failed', 'skipped', 'buffered', 'lost', 'expired'))
    NOT VALID;
ALTER TABLE goatbeat_execution VALIDATE CONSTRAINT goatbeat_execution_status_check;

-- The leader looks, now and then, for runs that have not ended (submitted, running,
-- retried): nearly always a handful among millions of ended ones.
CREATE INDEX goatbeat_execution_open_idx
    ON goatbeat_execution (schedule_id) WHERE status IN ('submitted', 'running', 'retried');

-- jobq 0.5.0 → 0.6.0: workflows (dependencies, results, batch callbacks). One line per change:
--   * enqueue / enqueue_many take depends_on bigint[] and on_parent_failure ('cancel' | 'run'): a job
--     whose parents have not all completed has the new status 'waiting' (parked: never claimed) and is
--     released (ready, NOTIFY) in the transaction that completes its last parent; a dead or cancelled
--     parent cancels it and its descendants (cancelled_by: the root ancestor) or, with 'run', counts as
--     finished
--   * jobq.enqueue_callback(queue, payload, members): a batch callback released exactly once when every
--     member finished, with the members' completed/dead/cancelled counts in its payload ("batch")
--   * complete / complete_many / complete_held take a result (results jsonb[]): kept with the finished
--     job for greatest(retention, result_retention); jobq.result(id), jobq.status(id),
--     jobq.parent_results(id); results of parents are kept while a child of theirs is live
--   * retry / retry_dead of a dead or cancelled job restore the descendants its failure cancelled
--   * tables jobq._job_dep (edges) and jobq._job_wait (gates of waiting jobs); jobq._job gains
--     has_children and has_parents; jobq._job_archive gains result and cancelled_by (indexed)
--   * queue setting result_retention (default 1 day): configure_queue's last argument, jobq.queues'
--     last column
--   * views: jobq.stats gains waiting (last column), jobq.jobs gains result and cancelled_by (last
--     columns), new jobq.job_dependencies (child_id, parent_id); jobq.metrics() reports
--     jobq_jobs{state="waiting"}
--   * cancel_jobs takes status 'waiting'; concurrency limits count only running jobs (waiting ones are
--     parked too)
--   * jobq.watch(id): finishing a watched job sends NOTIFY jobq_finished with its id (pyqueue.wait)
--   * SQLSTATEs JQ018 (a bad depends_on or members list) and JQ019 (an unknown job id)
--
-- Applied by ALTER EXTENSION jobq UPDATE TO '0.6.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.5.0 is installed.

DO $path$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    ELSE
        PERFORM pg_catalog.set_config('jobq.caller_search_path', pg_catalog.current_setting('search_path'), false);
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false);
    END IF;
END
$path$;

DO $guard$
BEGIN
    IF jobq.version() <> '0.5.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.5.0 to 0.6.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.6.0');

---------------------------------------------------------------------------
-- tables
---------------------------------------------------------------------------

ALTER TABLE jobq._job ADD COLUMN has_children boolean NOT NULL DEFAULT false;
ALTER TABLE jobq._job ADD COLUMN has_parents boolean NOT NULL DEFAULT false;
ALTER TABLE jobq._job ADD COLUMN watched boolean NOT NULL DEFAULT false;
ALTER TABLE jobq._job DROP CONSTRAINT job_status_valid;
ALTER TABLE jobq._job ADD CONSTRAINT job_status_valid CHECK (status IN ('ready', 'running', 'waiting'));
ALTER TABLE jobq._job DROP CONSTRAINT job_parked_when_running;
ALTER TABLE jobq._job ADD CONSTRAINT job_parked_when_running CHECK (NOT parked OR status IN ('running', 'waiting'));
ALTER TABLE jobq._job ADD CONSTRAINT job_waiting_parked CHECK (status <> 'waiting' OR parked);
COMMENT ON TABLE jobq._job IS 'Live jobs (waiting, ready, scheduled, running). Private: use the jobq functions and views.';
COMMENT ON COLUMN jobq._job.has_children IS
    'Some job was enqueued depending on this one (jobq._job_dep): finishing it updates their gates. Set by the child''s enqueue.';
COMMENT ON COLUMN jobq._job.has_parents IS
    'This job was enqueued with depends_on (or as a batch callback): its edges in jobq._job_dep go when it does.';
COMMENT ON COLUMN jobq._job.watched IS
    'Someone waits for this job (jobq.watch): finishing it sends NOTIFY jobq_finished with its id.';

ALTER TABLE jobq._job_archive ADD COLUMN result jsonb;
ALTER TABLE jobq._job_archive ADD COLUMN cancelled_by bigint;
COMMENT ON COLUMN jobq._job_archive.result IS 'What the job''s complete() reported (any JSON value); NULL when none.';
COMMENT ON COLUMN jobq._job_archive.cancelled_by IS
    'The ancestor whose death or cancellation cancelled this job (the root of the cascade); jobq.retry of it restores this job.';
-- The descendants a retry of their root ancestor restores.
CREATE INDEX _job_archive_cancelled_by_idx ON jobq._job_archive (cancelled_by)
    WHERE cancelled_by IS NOT NULL;

-- Dependencies: one row per (parent, child) edge, from the child's enqueue
-- until the child leaves jobq (finished without history, pruned or
-- discarded). Parents exist before their children, so the graph has no
-- cycle. Finishing a parent looks its children up by the primary key.
CREATE TABLE jobq._job_dep (
    parent_id  bigint NOT NULL,
    child_id   bigint NOT NULL,
    PRIMARY KEY (parent_id, child_id),
    CONSTRAINT job_dep_not_self CHECK (parent_id <> child_id)
) WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE jobq._job_dep IS 'Job dependencies (parent, child), while the child exists. Private: read jobq.job_dependencies.';
CREATE INDEX _job_dep_child_idx ON jobq._job_dep (child_id, parent_id);

-- The gate of each waiting job: how many of its parents are still live, and
-- how the finished ones ended. Finishing a parent updates its children's
-- gates (row-locked in id order); the update that brings parents_left to 0
-- releases the job in that transaction. Every job enqueued with parents
-- has one, from its enqueue until it leaves jobq with its edges (finished
-- without history, pruned or discarded): a retry of the job, once it was
-- released or cancelled, goes through its gate again (recounted), so it
-- never runs before its parents completed.
CREATE TABLE jobq._job_wait (
    job_id             bigint PRIMARY KEY,
    parents_left       integer NOT NULL,
    completed          integer NOT NULL DEFAULT 0,
    dead               integer NOT NULL DEFAULT 0,
    cancelled          integer NOT NULL DEFAULT 0,
    on_parent_failure  text NOT NULL,
    report             boolean NOT NULL DEFAULT false,
    CONSTRAINT job_wait_counts_valid CHECK (parents_left >= 0 AND completed >= 0 AND dead >= 0 AND cancelled >= 0),
    CONSTRAINT job_wait_on_parent_failure_valid CHECK (on_parent_failure IN ('cancel', 'run'))
) WITH (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_cost_delay = 0,
    fillfactor = 50
);
COMMENT ON TABLE jobq._job_wait IS 'Waiting jobs: parents still live, finished parents by outcome, what a parent failure does. Private.';
COMMENT ON COLUMN jobq._job_wait.report IS
    'A batch callback (jobq.enqueue_callback): released with the counts of its members'' outcomes in its payload.';

ALTER TABLE jobq._queue ADD COLUMN result_retention interval;
ALTER TABLE jobq._queue ADD CONSTRAINT queue_result_retention_range
    CHECK (result_retention BETWEEN interval '0' AND interval '3650 days');

DO $dump$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'jobq') THEN
        PERFORM pg_catalog.pg_extension_config_dump('jobq._job_dep', '');
        PERFORM pg_catalog.pg_extension_config_dump('jobq._job_wait', '');
    END IF;
END
$dump$;

-- @replace-view jobq._queue_defaults

---------------------------------------------------------------------------
-- functions: changed signatures go first
---------------------------------------------------------------------------

DROP FUNCTION jobq._finish(bigint[], uuid[], text, text, boolean);
DROP FUNCTION jobq._insert_job(text, jsonb, timestamptz, integer, integer, text, text, interval, interval);
DROP FUNCTION jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval);
DROP FUNCTION jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval);
DROP FUNCTION jobq.complete_held(bigint[]);
DROP FUNCTION jobq.complete(bigint, uuid);
DROP FUNCTION jobq.complete_many(bigint[], uuid[]);
DROP FUNCTION jobq.complete(bigint, text);
DROP FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval,
                                   interval, integer, integer, integer, interval, interval);

-- @replace-function jobq.version()

-- @replace-function jobq._settings(text)

-- @function jobq._check_dependencies(bigint[], text, text)

-- @function jobq._check_results(bigint[], jsonb[])

-- @function jobq._finish(bigint[], uuid[], text, text, boolean, jsonb[], bigint)

-- @function jobq._insert_job(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, boolean)

-- @function jobq._lock_parents(bigint[], text)

-- @function jobq._gate_recount(bigint[])

-- @function jobq._settle(bigint[])

-- @function jobq._finish_dependents(bigint[], text)

-- @function jobq._attach(bigint[], bigint[], text, boolean)

-- @function jobq._restore_descendants(bigint)

-- @replace-function jobq._pick(text[], integer, interval, timestamptz)

-- @function jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text)

-- @function jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text)

-- @function jobq.enqueue_callback(text, jsonb, bigint[], timestamptz, integer, integer)

-- @function jobq.complete_held(bigint[], jsonb[])

-- @function jobq.complete(bigint, uuid, jsonb)

-- @function jobq.complete_many(bigint[], uuid[], jsonb[])

-- @function jobq.complete(bigint, text, jsonb)

-- @replace-function jobq.retry(bigint)

-- @replace-function jobq.retry_dead(text)

-- @replace-function jobq.cancel(bigint)

-- @replace-function jobq.cancel_jobs(text, text, jsonb)

-- @replace-function jobq.discard_dead(text, interval)

-- @replace-function jobq.prune(integer)

-- @function jobq.status(bigint)

-- @function jobq.result(bigint)

-- @function jobq.parent_results(bigint)

-- @function jobq.watch(bigint)

-- @function jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer, integer, integer, interval, interval, interval)

-- @replace-function jobq.reset_queue(text)

---------------------------------------------------------------------------
-- views
---------------------------------------------------------------------------

-- @replace-view jobq.stats

-- @replace-view jobq.jobs

-- @replace-view jobq.queues

-- @view jobq.job_dependencies

-- @replace-function jobq.metrics()

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA jobq FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
    jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text),
    jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text)
TO jobq_producer;
GRANT EXECUTE ON FUNCTION
    jobq.complete_held(bigint[], jsonb[]),
    jobq.complete(bigint, uuid, jsonb),
    jobq.complete_many(bigint[], uuid[], jsonb[]),
    jobq.complete(bigint, text, jsonb)
TO jobq_worker;
GRANT EXECUTE ON FUNCTION
    jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer, integer, integer, interval, interval, interval)
TO jobq_admin;
GRANT EXECUTE ON FUNCTION jobq.enqueue_callback(text, jsonb, bigint[], timestamptz, integer, integer) TO jobq_producer;
GRANT EXECUTE ON FUNCTION jobq.status(bigint), jobq.result(bigint), jobq.parent_results(bigint), jobq.watch(bigint)
    TO jobq_producer, jobq_worker;
GRANT SELECT ON jobq.job_dependencies TO jobq_viewer;
GRANT SELECT ON jobq.job_dependencies, jobq._job_dep, jobq._job_wait TO jobq_admin;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

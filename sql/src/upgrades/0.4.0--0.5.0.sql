-- jobq 0.4.0 → 0.5.0: what the dashboard and the metrics read. One line per change:
--   * role jobq_viewer (NOLOGIN): USAGE on schema jobq, SELECT on the public views, EXECUTE on
--     jobq.version() and jobq.metrics(), nothing else; jobq_admin is a member of it
--   * jobq.metrics() (name, labels, value): jobq_jobs{queue,state}, jobq_oldest_ready_age_seconds{queue},
--     jobq_completed_total, jobq_failed_total, jobq_dead_total{queue}; for jobq_viewer, jobq_worker, jobq_admin
--   * error history: jobq._job_error keeps the error of every failed attempt (fail, fail_held, reaped
--     leases), the last 25 per job, deleted with its job; view jobq.job_errors
--   * jobq._job.heartbeat_at: set by heartbeat, cleared when a job stops running (NULL until the first
--     heartbeat of a lease); jobq.jobs gains heartbeat_at as its last column
--   * view jobq.workers: per worker name holding running jobs, its queues, jobs, oldest start, last
--     heartbeat and next lease expiry
--   * view jobq.throughput: completed, failed attempts and dead per queue and minute over the last hour
--   * jobq.run_now(id): a scheduled job runs now (and its workers are woken); admin only
--   * indexes on jobq._job_archive (queue, id) and (queue, job_key, id): jobq.jobs paged newest first by
--     id within a queue, and filtered by job_key, stays fast however large the archive
--   * the queue setting defaults live in the private view jobq._queue_defaults, which jobq._settings()
--     and jobq.queues read (jobq.queues calls no function, so jobq_viewer can read it)
--
-- Applied by ALTER EXTENSION jobq UPDATE TO '0.5.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.4.0 is installed.

-- Resolve every unqualified operator and type below in pg_catalog only,
-- whatever the upgrading session's search_path was, and leave that
-- search_path as it was: under CREATE/ALTER EXTENSION the setting is local to
-- the command (a plain SET here would outlive it, and the session's next
-- CREATE TABLE would land in pg_catalog); under psql -f or pyqueue it is put
-- back at the end of this file.
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
    IF jobq.version() <> '0.4.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.4.0 to 0.5.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.5.0');

---------------------------------------------------------------------------
-- roles
---------------------------------------------------------------------------

DO $roles$
BEGIN
    -- Roles are cluster-wide: another database may have made it already.
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'jobq_viewer') THEN
        BEGIN
            CREATE ROLE jobq_viewer NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
END
$roles$;
GRANT jobq_viewer TO jobq_admin;

---------------------------------------------------------------------------
-- tables
---------------------------------------------------------------------------

ALTER TABLE jobq._job ADD COLUMN heartbeat_at timestamptz;
COMMENT ON COLUMN jobq._job.heartbeat_at IS
    'The last heartbeat of the current lease; NULL until its first heartbeat (claim does not set it) and when not running.';

-- A queue's finished jobs newest first (jobq.jobs paged by id, keyset),
-- and those of one job_key (finding a key is a seek, however large the archive).
CREATE INDEX _job_archive_queue_idx ON jobq._job_archive (queue, id);
CREATE INDEX _job_archive_key_idx ON jobq._job_archive (queue, job_key, id)
    WHERE job_key IS NOT NULL;

CREATE TABLE jobq._job_error (
    job_id     bigint NOT NULL,
    attempt    integer NOT NULL,
    error      text NOT NULL,
    failed_at  timestamptz NOT NULL,
    worker     text
) WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE jobq._job_error IS 'The error of each failed attempt (the last 25 per job), as long as the job exists. Private: read jobq.job_errors.';
CREATE INDEX _job_error_job_idx ON jobq._job_error (job_id, failed_at);

DO $dump$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'jobq') THEN
        PERFORM pg_catalog.pg_extension_config_dump('jobq._job_error', '');
    END IF;
END
$dump$;

-- @view jobq._queue_defaults

---------------------------------------------------------------------------
-- functions: new, and changed (as in jobq--0.5.0.sql)
---------------------------------------------------------------------------

-- @replace-function jobq.version()

-- @replace-function jobq._settings(text)

-- @replace-function jobq._finish(bigint[], uuid[], text, text, boolean)

-- @function jobq._record_errors(bigint[], integer[], text[], text[])

-- @replace-function jobq.fail_held(bigint, text, timestamptz)

-- @replace-function jobq.fail(bigint, text, uuid, timestamptz)

-- @replace-function jobq.heartbeat(bigint, uuid, interval)

-- @replace-function jobq.release(bigint, uuid)

-- @replace-function jobq.snooze(bigint, uuid, timestamptz)

-- @replace-function jobq.reap(integer)

-- @function jobq.run_now(bigint)

-- @replace-function jobq.discard_dead(text, interval)

-- @replace-function jobq.prune(integer)

---------------------------------------------------------------------------
-- views, and the function that reads them
---------------------------------------------------------------------------

-- @replace-view jobq.jobs

-- @replace-view jobq.queues

-- @view jobq.workers

-- @view jobq.throughput

-- @view jobq.job_errors

-- @function jobq.metrics()

---------------------------------------------------------------------------
-- privileges (new objects)
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA jobq FROM PUBLIC;

GRANT USAGE ON SCHEMA jobq TO jobq_viewer;
GRANT EXECUTE ON FUNCTION jobq.run_now(bigint) TO jobq_admin;
GRANT EXECUTE ON FUNCTION jobq.version(), jobq.metrics() TO jobq_viewer;
GRANT SELECT ON jobq.stats, jobq.jobs, jobq.queues, jobq.schedules, jobq.workers, jobq.throughput,
    jobq.job_errors TO jobq_viewer;
GRANT EXECUTE ON FUNCTION jobq.metrics() TO jobq_worker, jobq_admin;
GRANT SELECT ON jobq._job_error, jobq._queue_defaults TO jobq_admin;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

-- jobq 0.3.0 → 0.4.0: what a newcomer hits, and the defects found by trying to break it. One line per change:
--   * per-job execution timeout: enqueue/enqueue_many(..., timeout) and the queue setting timeout
--     (configure_queue(..., timeout), interval '0' removes it), fixed on the job when it is enqueued;
--     jobq.job, jobq.jobs and the archive carry it; workers fail a job that runs past it
--   * enqueue/enqueue_many(..., unique_for) with a job key: also deduplicates against the job of that key
--     completed within unique_for (jobq._key_done keeps the last completion per key, whatever the history)
--   * periodic jobs without pg_cron: jobq.every(..., runner) ('pg_cron', 'workers'; NULL: pg_cron when
--     installed), jobq.run_schedules() enqueues each due tick exactly once for the workers; jobq.schedules
--     shows runner, next_run_at, last_run_at; jobq.unschedule no longer needs pg_cron
--   * operator verbs: jobq.cancel_jobs(queue, status, payload_contains), jobq.discard_dead(queue, older_than)
--   * concurrency limits count in-transaction jobs from jobq._taken (only jobq writes it) instead of the
--     jobq.taken setting, which any session could set to switch a limit off
--   * limited queues are counted under a row lock on their jobq._queue row, and serial groups rely on the
--     head job's row lock: no advisory lock any role could take to stall a queue or a group
--   * intervals meant as durations (lease, extend, timeout, unique_for, backoff, rate_interval) must have
--     no month or year part and days and time of one sign (JQ008/JQ012)
--   * lease tokens given as text (untyped, e.g. from node-postgres) get JQ010 when not a UUID, through
--     text overloads of complete, fail, heartbeat, release and snooze; claim('{a,b}') claims across queues
--   * jobq.fail / fail_held with a NULL error raise JQ017 (new SQLSTATE: invalid argument)
--   * jobq_worker may run jobq.prune(), so workers prune where pg_cron does not, as they reap
--   * counters are folded under row locks (SKIP LOCKED), not an advisory lock any role could hold
--   * views: jobq.stats.oldest_ready_age is NULL when nothing is ready; jobq.queues shows 0 for no
--     concurrency or rate limit and NULL updated_at for a queue never configured
--
-- Applied by ALTER EXTENSION jobq UPDATE TO '0.4.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.3.0 is installed.

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
    IF jobq.version() <> '0.3.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.3.0 to 0.4.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.4.0');

---------------------------------------------------------------------------
-- tables and types
---------------------------------------------------------------------------

ALTER TABLE jobq._job
    ADD COLUMN timeout interval,
    ADD CONSTRAINT job_timeout_range CHECK (timeout BETWEEN interval '1 second' AND interval '1 day');
COMMENT ON COLUMN jobq._job.timeout IS
    'The longest a handler may run (enqueue''s timeout); NULL: the queue''s timeout setting, if any.';
ALTER TABLE jobq._job_archive ADD COLUMN timeout interval;
ALTER TABLE jobq._queue
    ADD COLUMN timeout interval,
    ADD CONSTRAINT queue_timeout_range CHECK (timeout BETWEEN interval '1 second' AND interval '1 day');

-- Periodic jobs registered under 0.3.0 are pg_cron's.
ALTER TABLE jobq._periodic
    ADD COLUMN runner text NOT NULL DEFAULT 'pg_cron',
    ADD COLUMN next_run_at timestamptz,
    ADD COLUMN last_run_at timestamptz,
    ADD CONSTRAINT periodic_runner_valid CHECK (runner IN ('pg_cron', 'workers')),
    ADD CONSTRAINT periodic_next_when_workers CHECK ((runner = 'workers') = (next_run_at IS NOT NULL));
COMMENT ON TABLE jobq._periodic IS
    'Periodic jobs (jobq.every): pg_cron or the workers (jobq.run_schedules) enqueue them. Private: use jobq.schedules.';
COMMENT ON COLUMN jobq._periodic.next_run_at IS 'The next tick (UTC cron time) of a schedule the workers run; NULL under pg_cron.';
CREATE INDEX _periodic_next_idx ON jobq._periodic (next_run_at) WHERE runner = 'workers';

CREATE TABLE jobq._key_done (
    queue        text NOT NULL,
    job_key      text NOT NULL,
    job_id       bigint NOT NULL,
    finished_at  timestamptz NOT NULL,
    PRIMARY KEY (queue, job_key)
) WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE jobq._key_done IS 'Last completion of each (queue, job_key), for enqueue''s unique_for. Private.';
CREATE INDEX _key_done_finished_idx ON jobq._key_done (finished_at);

CREATE UNLOGGED TABLE jobq._taken (
    xact   xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
    queue  text NOT NULL,
    n      integer NOT NULL,
    CONSTRAINT taken_n_positive CHECK (n > 0)
);
COMMENT ON TABLE jobq._taken IS 'Jobs taken (take/hold) per transaction on limited queues. Private.';
CREATE INDEX _taken_xact_idx ON jobq._taken (xact, queue);

DO $dump$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'jobq') THEN
        PERFORM pg_catalog.pg_extension_config_dump('jobq._key_done', '');
    END IF;
END
$dump$;

ALTER TYPE jobq.job ADD ATTRIBUTE timeout interval;

---------------------------------------------------------------------------
-- functions whose arguments changed: dropped, then created below
---------------------------------------------------------------------------

DROP FUNCTION jobq._insert_job(text, jsonb, timestamptz, integer, integer, text, text);
DROP FUNCTION jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text);
DROP FUNCTION jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text);
DROP FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval,
                                   interval, integer, integer, integer, interval);
DROP FUNCTION jobq._periodic_save(text, text, text, jsonb, integer, integer);
DROP FUNCTION jobq.every(text, text, text, jsonb, integer, integer);

---------------------------------------------------------------------------
-- functions: new, and changed (as in jobq--0.4.0.sql)
---------------------------------------------------------------------------

-- @replace-function jobq.version()

-- @function jobq._check_unique_for(interval, boolean, text)

-- @function jobq._fixed_length(interval)

-- @replace-function jobq._check_interval(interval, text, interval, interval)

-- @function jobq._lease_token(text)

-- @function jobq._check_error(text)

-- @replace-function jobq._settings(text)

-- @replace-function jobq._finish(bigint[], uuid[], text, text, boolean)

-- @replace-function jobq._fold_counters()

-- @function jobq._forget_taken()

-- @function jobq._insert_job(text, jsonb, timestamptz, integer, integer, text, text, interval, interval)

-- @replace-function jobq._taken_in_transaction(text)

-- @function jobq._queue_list(text)

-- @replace-function jobq._claim_args_ok(text[], integer, interval, text)

-- @replace-function jobq._pick(text[], integer, interval, timestamptz)

-- @function jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval)

-- @function jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval)

-- @replace-function jobq._claim(text[], integer, text, interval)

-- @replace-function jobq.claim(text, integer, text, interval)

-- @replace-function jobq._lock_ready(text, integer)

-- @replace-function jobq.fail_held(bigint, text, timestamptz)

-- @replace-function jobq.fail(bigint, text, uuid, timestamptz)

-- @function jobq.complete(bigint, text)

-- @function jobq.fail(bigint, text, text, timestamptz)

-- @function jobq.heartbeat(bigint, text, interval)

-- @function jobq.release(bigint, text)

-- @function jobq.snooze(bigint, text, timestamptz)

-- @replace-function jobq.reap(integer)

-- @replace-function jobq.retry(bigint)

-- @replace-function jobq.retry_dead(text)

-- @function jobq.cancel_jobs(text, text, jsonb)

-- @function jobq.discard_dead(text, interval)

-- @replace-function jobq.prune(integer)

-- @function jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer, integer, integer, interval, interval)

-- @replace-function jobq.reset_queue(text)

-- @function jobq._pg_cron_installed()

-- @function jobq._cron_field(text, integer, integer, text[])

-- @function jobq._cron_next(text, timestamptz)

-- @function jobq._enqueue_tick(jobq._periodic)

-- @function jobq._periodic_save(text, text, text, jsonb, integer, integer, text)

-- @function jobq.every(text, text, text, jsonb, integer, integer, text)

-- @replace-function jobq.unschedule(text)

-- @replace-function jobq.enqueue_periodic(text)

-- @function jobq.run_schedules()

---------------------------------------------------------------------------
-- views
---------------------------------------------------------------------------

-- @replace-view jobq.stats

-- @replace-view jobq.jobs

-- @replace-view jobq.queues

-- @replace-view jobq.schedules

---------------------------------------------------------------------------
-- privileges (new and re-created objects)
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA jobq FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
    jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval),
    jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval)
TO jobq_producer;
GRANT EXECUTE ON FUNCTION
    jobq.complete(bigint, text),
    jobq.fail(bigint, text, text, timestamptz),
    jobq.heartbeat(bigint, text, interval),
    jobq.release(bigint, text),
    jobq.snooze(bigint, text, timestamptz),
    jobq.run_schedules(),
    jobq.prune(integer)   -- workers prune where pg_cron does not, as they reap
TO jobq_worker;
GRANT EXECUTE ON FUNCTION
    jobq.cancel_jobs(text, text, jsonb),
    jobq.discard_dead(text, interval),
    jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer, integer, integer, interval, interval),
    jobq.every(text, text, text, jsonb, integer, integer, text),
    jobq._periodic_save(text, text, text, jsonb, integer, integer, text),
    jobq._pg_cron_installed()
TO jobq_admin;
GRANT SELECT ON jobq._key_done, jobq._taken TO jobq_admin;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

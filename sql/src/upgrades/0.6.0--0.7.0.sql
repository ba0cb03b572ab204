-- jobq 0.6.0 → 0.7.0: history that never bloats. One line per change:
--   * jobq._job_archive is partitioned by expiry (prune_after), one partition per UTC day
--     (jobq._job_archive_pYYYYMMDD), and a default partition jobq._job_archive_kept for jobs kept until
--     retried and those expiring on a day without a partition; no primary key (ids stay unique by
--     construction), an index on id instead
--   * jobq.prune() creates the day partitions ahead (through the longest configured retention, at most
--     31 days, plus one) and drops a day's partition whole once the day has passed, with its jobs' error
--     history, edges and gates (parents a live child needs move an hour ahead); n bounds the rows it
--     deletes from the default partition
--   * new view jobq.archive_partitions (partition, from_time, to_time, rows, bytes, expired), readable by
--     jobq_viewer
--   * jobq.reap() picks the leases to park in a materialized CTE joined by id (a cached plan of the
--     former "id IN (SELECT ... FOR UPDATE SKIP LOCKED)" could rescan the live table per row once a
--     large backlog had built up)
--   * this script converts a populated archive: rows already expired go to one partition
--     (jobq._job_archive_untilYYYYMMDD) that the next prune drops, rows expiring within the horizon to
--     their days, the others to the default partition
--
-- Applied by ALTER EXTENSION jobq UPDATE TO '0.7.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.6.0 is installed.

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
    IF jobq.version() <> '0.6.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.6.0 to 0.7.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.7.0');

---------------------------------------------------------------------------
-- tables
---------------------------------------------------------------------------

-- The 0.6.0 archive steps aside (its indexes and primary key go: their
-- names are the new table's) until its rows are copied below.
ALTER TABLE jobq._job_archive RENAME TO _job_archive_060;
ALTER TABLE jobq._job_archive_060 DROP CONSTRAINT _job_archive_pkey;
DROP INDEX jobq._job_archive_prune_idx, jobq._job_archive_dead_idx, jobq._job_archive_queue_idx,
    jobq._job_archive_key_idx, jobq._job_archive_cancelled_by_idx;

CREATE TABLE jobq._job_archive (
    id            bigint NOT NULL,
    queue         text NOT NULL,
    payload       jsonb NOT NULL,
    status        text NOT NULL,
    priority      smallint NOT NULL,
    run_at        timestamptz NOT NULL,
    attempts      integer NOT NULL,
    max_attempts  integer NOT NULL,
    job_key       text,
    worker        text,
    last_error    text,
    created_at    timestamptz NOT NULL,
    started_at    timestamptz,
    finished_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    prune_after   timestamptz,
    group_key     text,
    timeout       interval,
    result        jsonb,
    cancelled_by  bigint,
    CONSTRAINT job_archive_status_valid CHECK (status IN ('completed', 'dead', 'cancelled'))
) PARTITION BY RANGE (prune_after);
COMMENT ON TABLE jobq._job_archive IS
    'Finished jobs (completed, dead, cancelled) kept for their retention, partitioned by expiry day. Private.';
COMMENT ON COLUMN jobq._job_archive.prune_after IS
    'Not pruned before this time: jobq.prune() drops the row''s day partition once the whole day has passed; NULL keeps it until retried.';
COMMENT ON COLUMN jobq._job_archive.result IS 'What the job''s complete() reported (any JSON value); NULL when none.';
COMMENT ON COLUMN jobq._job_archive.cancelled_by IS
    'The ancestor whose death or cancellation cancelled this job (the root of the cascade); jobq.retry of it restores this job.';

-- The default partition: rows kept until retried (NULL prune_after: dead
-- and cancelled jobs of queues without dead_retention, the default), and
-- rows expiring on a day that has no partition yet (beyond the days created
-- ahead, or before maintenance first ran). jobq.prune() deletes its expired
-- rows one by one, and moves a day's rows out when it creates that day.
CREATE TABLE jobq._job_archive_kept PARTITION OF jobq._job_archive DEFAULT WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE jobq._job_archive_kept IS
    'The archive''s default partition: jobs kept until retried, and those expiring on a day without a partition. Private.';
-- Its indexes, and those of every day partition, are made by
-- jobq._archive_index (sql/src/archive.sql), after the functions. Partitions
-- have indexes of their own and the parent has none: a partitioned index of
-- an extension's table would make pg_restore create every day partition's
-- indexes twice (once by ATTACH, once from the dump).

DO $dump$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'jobq') THEN
        PERFORM pg_catalog.pg_extension_config_dump('jobq._job_archive_kept', '');
    END IF;
END
$dump$;

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

-- @replace-function jobq.version()

-- @function jobq._archive_index(text)

SELECT jobq._archive_index('_job_archive_kept');

-- @function jobq._archive_horizon()

-- @function jobq._archive_add(date, date)

-- @function jobq._archive_drop(text, timestamptz, timestamptz)

-- @function jobq._archive_maintain()

-- @replace-function jobq.prune(integer)

-- @replace-function jobq.reap(integer)

---------------------------------------------------------------------------
-- views
---------------------------------------------------------------------------

-- Views that read the archive, pointed at the new table.
-- @replace-view jobq.stats

-- @replace-view jobq.jobs

-- @replace-view jobq.queues

-- @view jobq.archive_partitions

---------------------------------------------------------------------------
-- the rows of the 0.6.0 archive
---------------------------------------------------------------------------

-- Rows already expired go to one partition of everything before today (the
-- next jobq.prune() drops it, keeping parents a live child needs), rows
-- expiring from today through the horizon to their day's partition, the
-- others (kept until retried, or expiring later) to the default partition.
-- Only days that have rows get a partition here (jobq.prune() creates the
-- rest): a converted empty archive is the one a fresh install has.
DO $convert$
DECLARE
    v_today date := (now() AT TIME ZONE 'UTC')::date;
    v_last date := ((now() + jobq._archive_horizon()) AT TIME ZONE 'UTC')::date + 1;
    v_day date;
BEGIN
    IF EXISTS (SELECT FROM jobq._job_archive_060 AS a WHERE a.prune_after < v_today::timestamp AT TIME ZONE 'UTC') THEN
        PERFORM jobq._archive_add(NULL, v_today);
    END IF;
    FOR v_day IN
        SELECT DISTINCT (a.prune_after AT TIME ZONE 'UTC')::date AS day
        FROM jobq._job_archive_060 AS a
        WHERE a.prune_after >= v_today::timestamp AT TIME ZONE 'UTC'
          AND a.prune_after < (v_last + 1)::timestamp AT TIME ZONE 'UTC'
        ORDER BY 1
    LOOP
        PERFORM jobq._archive_add(v_day, v_day + 1);
    END LOOP;
END
$convert$;
INSERT INTO jobq._job_archive
    (id, queue, payload, status, priority, run_at, attempts, max_attempts, job_key, worker, last_error,
     created_at, started_at, finished_at, prune_after, group_key, timeout, result, cancelled_by)
SELECT a.id, a.queue, a.payload, a.status, a.priority, a.run_at, a.attempts, a.max_attempts, a.job_key,
       a.worker, a.last_error, a.created_at, a.started_at, a.finished_at, a.prune_after, a.group_key,
       a.timeout, a.result, a.cancelled_by
FROM jobq._job_archive_060 AS a;
-- Out of the extension first: that also takes it off pg_dump's list of
-- tables whose data it keeps.
DO $retire$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'jobq') THEN
        ALTER EXTENSION jobq DROP TABLE jobq._job_archive_060;
    END IF;
END
$retire$;
DROP TABLE jobq._job_archive_060;

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA jobq FROM PUBLIC;

GRANT SELECT ON jobq._job_archive TO jobq_admin;
GRANT SELECT ON jobq.archive_partitions TO jobq_viewer;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

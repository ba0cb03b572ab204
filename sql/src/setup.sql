-- jobq @VERSION@ — a job queue that lives inside PostgreSQL.
--
-- This one file installs jobq two ways:
--   * CREATE EXTENSION jobq            (after `make install`)
--   * psql -f sql/jobq--@VERSION@.sql      (managed Postgres, no superuser)
-- so it has no `\quit` guard, schema-qualifies every name, and asks whether
-- it runs inside CREATE EXTENSION before calling extension-only functions.
--
-- Released install scripts are frozen: a change is a new version plus an
-- upgrade script (sql/jobq--@VERSION@--X.Y.Z.sql).
--
-- Sections
--   1. schema, roles, version bookkeeping
--   2. tables: live jobs, finished-job archive, error history, counters, per-queue settings,
--      periodic jobs, key completions (unique_for), take bookkeeping
--   3. validation helpers (jobq's SQLSTATEs, class JQ)
--   4. private helpers: settings, backoff, finishing jobs, counters, the claim paths
--   5. producer API: enqueue, enqueue_many
--   6. worker API: claim, take, hold, complete_held, fail_held, complete, fail, heartbeat, release,
--      snooze (each also with the lease token as text), reap, next_run_at
--   7. operator API: retry, retry_dead, run_now, cancel, cancel_jobs, discard_dead, prune,
--      configure_queue, reset_queue, pause, resume, schedule_maintenance, unschedule_maintenance,
--      periodic jobs (every, unschedule, enqueue_periodic, run_schedules)
--   8. views: stats, jobs, queues, schedules, workers, throughput, job_errors; metrics()
--   9. privileges
--
-- SQLSTATEs (documented in README.md, mapped to Python exceptions):
--   JQ001 invalid queue name        JQ008 invalid lease / interval
--   JQ002 invalid payload           JQ009 invalid job_key
--   JQ003 payload too large         JQ010 missing id or lease token
--   JQ004 invalid priority          JQ011 invalid worker name
--   JQ005 invalid max_attempts      JQ012 invalid queue setting
--   JQ006 invalid time (run_at)     JQ013 job_key held by an active job
--   JQ007 invalid batch size        JQ014 pg_cron not available
--   JQ015 claim outside READ COMMITTED
--   JQ016 invalid or unknown periodic job name
--   JQ017 invalid argument (NULL, or not one of its allowed values)
--   JQ000 an upgrade script applied to the wrong version

---------------------------------------------------------------------------
-- 1. schema, roles, version bookkeeping
---------------------------------------------------------------------------

-- Resolve every unqualified operator and type below in pg_catalog only,
-- whatever the installing session's search_path was, and leave that
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

CREATE SCHEMA jobq;
COMMENT ON SCHEMA jobq IS 'jobq: a job queue inside PostgreSQL. Public API: functions and views without a leading underscore.';

DO $roles$
DECLARE
    v_role text;
BEGIN
    -- Roles are cluster-wide: create each only when missing, so a second
    -- database (or a reinstall) reuses them. Two installs into different
    -- databases at once may both try: the loser of that race moves on.
    -- jobq_viewer reads the public views and jobq.metrics(), nothing else.
    FOREACH v_role IN ARRAY ARRAY['jobq_producer', 'jobq_worker', 'jobq_admin', 'jobq_viewer'] LOOP
        CONTINUE WHEN EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = v_role);
        BEGIN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', v_role);
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END LOOP;
END
$roles$;

GRANT jobq_producer, jobq_worker, jobq_viewer TO jobq_admin;

-- Versions applied to this database, one row per install or upgrade script.
-- pyqueue install/upgrade reads it on databases without CREATE EXTENSION.
CREATE TABLE jobq._migration (
    version     text PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT migration_version_semver CHECK (version ~ '^[0-9]+\.[0-9]+\.[0-9]+$')
);
COMMENT ON TABLE jobq._migration IS 'jobq versions applied to this database (install and upgrade scripts).';
INSERT INTO jobq._migration (version) VALUES ('@VERSION@');

CREATE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '@VERSION@'::text
$$;
COMMENT ON FUNCTION jobq.version() IS 'Installed jobq version (semver text).';

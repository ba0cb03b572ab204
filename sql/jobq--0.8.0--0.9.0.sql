-- jobq 0.8.0 → 0.9.0: a producer's open transaction no longer freezes the jobs it names. One line per change:
--   workflows, watch and cascades (issue 25, items 1-3):
--   plans that do not depend on statistics, costs that do not grow with the backlog (issue 24):
--   per-queue privileges (issue 25, item 4):
--   smaller fixes (issue 25, item 5):
--     jobq.every(..., runner => 'workers') and jobq.unschedule work for a role without USAGE on schema cron
--       (new jobq._cron_unschedule_own: only the caller's own pg_cron job, and only when it may use pg_cron);
--       jobq._require_pg_cron raises JQ014 naming the missing USAGE, with a HINT, instead of a bare 42501.
--
-- Applied by ALTER EXTENSION jobq UPDATE TO '0.9.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.8.0 is installed.

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
    IF jobq.version() <> '0.8.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.8.0 to 0.9.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.9.0');

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '0.9.0'::text
$$;
COMMENT ON FUNCTION jobq.version() IS 'Installed jobq version (semver text).';

-- tables (new or changed), each section its own

-- workflows, watch and cascades (issue 25, items 1-3)

-- plans and costs (issue 24)

-- per-queue privileges (issue 25, item 4)

-- smaller fixes (issue 25, item 5)
CREATE FUNCTION jobq._cron_unschedule_own(p_jobname text) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Remove the calling role's pg_cron job of that name; false when it has
    -- none. A pg_cron job belongs to the role that scheduled it: cron.job
    -- shows a role its own (a superuser all) and cron.unschedule(name) finds
    -- only the caller's. A role without USAGE on schema cron cannot have
    -- scheduled one, and may not even read cron.job: nothing to remove.
    -- Nested IFs: cron.job must not be parsed where pg_cron is missing.
    IF NOT jobq._pg_cron_installed() THEN
        RETURN false;
    END IF;
    IF NOT pg_catalog.has_schema_privilege('cron', 'USAGE') THEN
        RETURN false;
    END IF;
    IF NOT EXISTS (SELECT FROM cron.job AS c
                   WHERE c.jobname = p_jobname AND c.username = current_user::text) THEN
        RETURN false;
    END IF;
    PERFORM cron.unschedule(p_jobname);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq._cron_unschedule_own(text) IS
    'Removes the calling role''s pg_cron job of that name; false when it has none (or may not use pg_cron).';
CREATE OR REPLACE FUNCTION jobq._require_pg_cron() RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ014 unless the calling role can use pg_cron here: the
    -- extension is installed in this database, and the role has USAGE on
    -- its schema (which pg_cron grants to nobody: a superuser grants it).
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
        RAISE EXCEPTION 'jobq: pg_cron is not installed in database %', pg_catalog.quote_ident(current_database())
            USING ERRCODE = 'JQ014',
                  HINT = 'Add pg_cron to shared_preload_libraries, set cron.database_name to this database and '
                         'CREATE EXTENSION pg_cron; or call jobq.reap() and jobq.prune() from your own scheduler '
                         '(pyqueue workers also reap on their own).';
    END IF;
    IF NOT pg_catalog.has_schema_privilege('cron', 'USAGE') THEN
        RAISE EXCEPTION 'jobq: role % may not use pg_cron: it has no USAGE on schema cron',
                pg_catalog.quote_ident(current_user)
            USING ERRCODE = 'JQ014',
                  HINT = pg_catalog.format('A superuser can GRANT USAGE ON SCHEMA cron TO %I. Without pg_cron, '
                                           'jobq.every(..., runner => ''workers'') has pyqueue workers run a '
                                           'periodic job, and they reap and prune on their own.', current_user);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._require_pg_cron() IS
    'Raises JQ014 when pg_cron is not installed in this database, or the calling role may not use it.';
CREATE OR REPLACE FUNCTION jobq.every(
    name text,
    schedule text,
    queue text,
    payload jsonb DEFAULT '{}'::jsonb,
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL,
    runner text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_jobid bigint;
    v_runner text := coalesce(every.runner, CASE WHEN jobq._pg_cron_installed() THEN 'pg_cron' ELSE 'workers' END);
BEGIN
    -- Enqueue payload on queue at every tick of a cron schedule (re-running
    -- with the same name updates it). runner 'pg_cron' has pg_cron run it
    -- (returns the pg_cron job id); 'workers' has pyqueue workers run it
    -- through jobq.run_schedules() (returns NULL); NULL picks pg_cron when
    -- it is installed. Each run uses the job_key 'every:<name>', so a slow
    -- worker never piles up copies: while one is ready, scheduled or
    -- running, the next tick adds nothing. Runs as the calling role.
    IF v_runner NOT IN ('pg_cron', 'workers') THEN
        RAISE EXCEPTION 'jobq: runner must be NULL, ''pg_cron'' or ''workers'', got %',
                pg_catalog.quote_literal(pg_catalog.left(v_runner, 100))
            USING ERRCODE = 'JQ017', HINT = 'NULL uses pg_cron when it is installed, the workers otherwise.';
    END IF;
    IF v_runner = 'workers' THEN
        PERFORM jobq._periodic_save(every.name, every.schedule, every.queue, every.payload,
                                    every.priority, every.max_attempts, 'workers');
        -- It may have moved from pg_cron to the workers (needs no privilege on pg_cron).
        PERFORM jobq._cron_unschedule_own('jobq-every:' || every.name);
        RETURN NULL;
    END IF;
    PERFORM jobq._require_pg_cron();
    PERFORM jobq._periodic_save(every.name, every.schedule, every.queue, every.payload,
                                every.priority, every.max_attempts, 'pg_cron');
    BEGIN
        v_jobid := cron.schedule('jobq-every:' || every.name, every.schedule,
                                 format('SELECT jobq.enqueue_periodic(%L)', every.name));
    EXCEPTION WHEN invalid_parameter_value THEN
        RAISE EXCEPTION 'jobq: pg_cron rejected schedule %', pg_catalog.quote_literal(every.schedule)
            USING ERRCODE = 'JQ012', DETAIL = SQLERRM,
                  HINT = 'pg_cron 1.4 takes cron syntax only (five fields, one minute at the finest), e.g. ''*/5 * * * *''.';
    END;
    RETURN v_jobid;
END
$$;
COMMENT ON FUNCTION jobq.every(text, text, text, jsonb, integer, integer, text) IS
    'Schedules a periodic job, run by pg_cron (returns its job id) or by the workers (returns NULL); one active copy at a time.';
CREATE OR REPLACE FUNCTION jobq.unschedule(name text) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Remove a periodic job registered with jobq.every() (jobs it already
    -- enqueued stay), and its pg_cron entry if it has one. False when no
    -- such periodic job exists.
    IF NOT jobq._periodic_delete(unschedule.name) THEN
        RETURN false;
    END IF;
    PERFORM jobq._cron_unschedule_own('jobq-every:' || unschedule.name);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.unschedule(text) IS 'Removes a periodic job (its pg_cron entry too); false when unknown.';

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
-- smaller fixes (issue 25, item 5)
GRANT EXECUTE ON FUNCTION jobq._cron_unschedule_own(text) TO jobq_admin;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

CREATE FUNCTION jobq._require_pg_cron() RETURNS void
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

CREATE FUNCTION jobq.schedule_maintenance(
    reap_schedule text DEFAULT '* * * * *',
    prune_schedule text DEFAULT '*/5 * * * *'
) RETURNS TABLE (job_name text, schedule text, jobid bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Register jobq.reap() and jobq.prune() with pg_cron (re-running updates
    -- the schedules). The jobs run as the calling role.
    PERFORM jobq._require_pg_cron();
    FOR job_name, schedule IN
        SELECT * FROM (VALUES ('jobq-reap', schedule_maintenance.reap_schedule),
                              ('jobq-prune', schedule_maintenance.prune_schedule)) AS s
    LOOP
        IF schedule IS NULL THEN
            RAISE EXCEPTION 'jobq: % schedule must not be NULL', job_name
                USING ERRCODE = 'JQ012', HINT = 'Use cron syntax, e.g. ''* * * * *'' (every minute).';
        END IF;
        BEGIN
            jobid := cron.schedule(job_name,
                                   schedule,
                                   CASE job_name WHEN 'jobq-reap' THEN 'SELECT jobq.reap()'
                                                 ELSE 'SELECT jobq.prune()' END);
        EXCEPTION WHEN invalid_parameter_value THEN
            RAISE EXCEPTION 'jobq: pg_cron rejected schedule % for %', pg_catalog.quote_literal(schedule), job_name
                USING ERRCODE = 'JQ012', DETAIL = SQLERRM,
                      HINT = 'pg_cron 1.4 takes cron syntax only (five fields, one minute at the finest), e.g. ''* * * * *''.';
        END;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq.schedule_maintenance(text, text) IS
    'Schedules jobq.reap() and jobq.prune() with pg_cron (JQ014 when pg_cron is missing).';

CREATE FUNCTION jobq.unschedule_maintenance() RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_count integer := 0;
    v_name text;
BEGIN
    -- Remove the pg_cron jobs that jobq.schedule_maintenance() registered.
    PERFORM jobq._require_pg_cron();
    FOR v_name IN SELECT j.jobname FROM cron.job AS j WHERE j.jobname IN ('jobq-reap', 'jobq-prune') LOOP
        PERFORM cron.unschedule(v_name);
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION jobq.unschedule_maintenance() IS 'Removes jobq''s pg_cron jobs; returns how many.';

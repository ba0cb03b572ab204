-- schedule_maintenance / unschedule_maintenance with pg_cron, and JQ014
-- without it. The test database may not have CREATE EXTENSION pg_cron yet:
-- it is created here (rolled back). tests/run_pgtap.sh always preloads
-- pg_cron, so a server without it fails these tests rather than skip them.
BEGIN;
SELECT plan(19);
SET LOCAL client_min_messages = warning;

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron')
       AND current_setting('shared_preload_libraries') ~ 'pg_cron'
       AND current_setting('cron.database_name', true) = current_database() THEN
        CREATE EXTENSION pg_cron;
    END IF;
END
$$;

CREATE FUNCTION pg_temp.cron_tests() RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    v_ids bigint[];
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
        RETURN NEXT fail('pg_cron must be loaded and be creatable in this database (run tests/run_pgtap.sh)');
        RETURN;
    END IF;
    PERFORM cron.schedule('not-jobq', '0 0 * * *', 'SELECT 1');

    RETURN NEXT results_eq(
        $q$SELECT job_name, schedule FROM jobq.schedule_maintenance()$q$,
        $q$VALUES ('jobq-reap'::text, '* * * * *'::text), ('jobq-prune', '*/5 * * * *')$q$,
        'schedule_maintenance() schedules jobq-reap every minute and jobq-prune every 5 minutes');
    RETURN NEXT set_eq(
        $q$SELECT jobname::text, schedule::text, command::text, database::text, username::text FROM cron.job WHERE jobname LIKE 'jobq-%'$q$,
        $q$VALUES ('jobq-reap', '* * * * *', 'SELECT jobq.reap()', current_database()::text, current_user::text),
                  ('jobq-prune', '*/5 * * * *', 'SELECT jobq.prune()', current_database()::text, current_user::text)$q$,
        'cron.job holds both jobs: schedule, command, this database, the calling role');
    SELECT array_agg(jobid ORDER BY jobname) INTO v_ids FROM cron.job WHERE jobname LIKE 'jobq-%';

    RETURN NEXT set_eq(
        $q$SELECT job_name, schedule, jobid FROM jobq.schedule_maintenance('*/2 * * * *', '0 3 * * *')$q$,
        $q$SELECT jobname::text, CASE jobname WHEN 'jobq-reap' THEN '*/2 * * * *' ELSE '0 3 * * *' END, jobid
           FROM cron.job WHERE jobname LIKE 'jobq-%'$q$,
        'schedule_maintenance(reap, prune) returns the new schedules and the cron job ids');
    RETURN NEXT is((SELECT count(*)::int FROM cron.job WHERE jobname LIKE 'jobq-%'), 2, 're-running updates, it does not duplicate');
    RETURN NEXT is((SELECT array_agg(jobid ORDER BY jobname) FROM cron.job WHERE jobname LIKE 'jobq-%'), v_ids,
                   're-running keeps the same cron jobs');
    RETURN NEXT set_eq(
        $q$SELECT jobname::text, schedule::text FROM cron.job WHERE jobname LIKE 'jobq-%'$q$,
        $q$VALUES ('jobq-reap', '*/2 * * * *'), ('jobq-prune', '0 3 * * *')$q$,
        'the schedules were updated');

    RETURN NEXT throws_ok($q$SELECT * FROM jobq.schedule_maintenance('every minute')$q$, 'JQ012',
        'jobq: pg_cron rejected schedule ''every minute'' for jobq-reap', 'an invalid reap schedule raises JQ012 naming it');
    RETURN NEXT throws_ok($q$SELECT * FROM jobq.schedule_maintenance('* * * * *', '61 * * * *')$q$, 'JQ012',
        'jobq: pg_cron rejected schedule ''61 * * * *'' for jobq-prune', 'an invalid prune schedule raises JQ012 naming it');
    RETURN NEXT throws_ok($q$SELECT * FROM jobq.schedule_maintenance('* * * *')$q$, 'JQ012', NULL,
        'a four-field schedule raises JQ012');
    RETURN NEXT throws_ok($q$SELECT * FROM jobq.schedule_maintenance(NULL)$q$, 'JQ012', 'jobq: jobq-reap schedule must not be NULL',
        'a NULL schedule raises JQ012');
    RETURN NEXT set_eq(
        $q$SELECT jobname::text, schedule::text FROM cron.job WHERE jobname LIKE 'jobq-%'$q$,
        $q$VALUES ('jobq-reap', '*/2 * * * *'), ('jobq-prune', '0 3 * * *')$q$,
        'rejected schedules changed nothing (not even the valid reap schedule given with a bad prune one)');

    RETURN NEXT is(jobq.unschedule_maintenance(), 2, 'unschedule_maintenance() removes two jobs');
    RETURN NEXT is((SELECT count(*)::int FROM cron.job WHERE jobname LIKE 'jobq-%'), 0, 'no jobq job is left in cron.job');
    RETURN NEXT is((SELECT count(*)::int FROM cron.job WHERE jobname = 'not-jobq'), 1, 'other cron jobs are left alone');
    RETURN NEXT is(jobq.unschedule_maintenance(), 0, 'a second unschedule_maintenance() removes nothing');
END
$$;
SELECT * FROM pg_temp.cron_tests();

-- without pg_cron: JQ014 ----------------------------------------------------------------
DROP EXTENSION IF EXISTS pg_cron;
SELECT ok(NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron'), 'setup: pg_cron is not installed');
SELECT throws_ok($$SELECT * FROM jobq.schedule_maintenance()$$, 'JQ014', NULL, 'schedule_maintenance() without pg_cron raises JQ014');
SELECT throws_ok($$SELECT jobq.unschedule_maintenance()$$, 'JQ014', NULL, 'unschedule_maintenance() without pg_cron raises JQ014');
SELECT throws_like($$SELECT jobq._require_pg_cron()$$, 'jobq: pg_cron is not installed in database %',
                   'the JQ014 message names the database');

SELECT * FROM finish();
ROLLBACK;

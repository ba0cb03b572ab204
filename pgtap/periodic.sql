-- Periodic jobs: jobq.every() registers a pg_cron job 'jobq-every:<name>'
-- that calls jobq.enqueue_periodic(<name>); each run uses the job_key
-- 'every:<name>', so while one is active the next tick adds nothing.
-- jobq.unschedule() removes both; jobq.schedules lists them. JQ016 for bad
-- or unknown names, JQ012 for bad schedules, JQ014 for runner 'pg_cron'
-- without pg_cron (without it, every() hands the schedule to the workers).
-- As in maintenance.sql, pg_cron is created here when missing (rolled back);
-- tests/run_pgtap.sh always preloads it, so a server without it fails.
BEGIN;
SELECT plan(60);
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

CREATE FUNCTION pg_temp.as_role(p_role text, p_sql text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_result text;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', p_role);
    EXECUTE p_sql INTO v_result;
    RESET ROLE;
    RETURN v_result;
END
$$;

CREATE FUNCTION pg_temp.cron_tests() RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    v_jobid bigint;
    v_first bigint;
    v_next bigint;
    v_lease uuid;
    v_state text;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
        RETURN NEXT fail('pg_cron must be loaded and be creatable in this database (run tests/run_pgtap.sh)');
        RETURN;
    END IF;
    PERFORM cron.schedule('not-jobq', '0 0 * * *', 'SELECT 1');

    -- every(): registers in jobq._periodic and pg_cron -------------------------------------
    v_jobid := jobq.every('nightly', '0 3 * * *', 'reports', '{"kind": "nightly"}', 2, 5);
    RETURN NEXT is(v_jobid, (SELECT jobid FROM cron.job WHERE jobname = 'jobq-every:nightly'),
                   'every() returns the id of the pg_cron job named jobq-every:<name>');
    RETURN NEXT results_eq(
        $q$SELECT schedule::text, command::text, database::text, username::text FROM cron.job WHERE jobname = 'jobq-every:nightly'$q$,
        $q$VALUES ('0 3 * * *'::text, 'SELECT jobq.enqueue_periodic(''nightly'')'::text,
                   current_database()::text COLLATE "default", current_user::text COLLATE "default")$q$,
        'the cron job runs SELECT jobq.enqueue_periodic(''nightly'') on the schedule, in this database, as the caller');
    RETURN NEXT results_eq(
        $q$SELECT name, schedule, queue, payload, priority, max_attempts FROM jobq.schedules$q$,
        $q$VALUES ('nightly'::text, '0 3 * * *'::text, 'reports'::text, '{"kind": "nightly"}'::jsonb, 2, 5)$q$,
        'jobq.schedules lists the periodic job with its schedule, queue, payload, priority and max_attempts');

    -- re-running updates ------------------------------------------------------------------------
    RETURN NEXT is(jobq.every('nightly', '*/5 * * * *', 'reports2', '{"kind": "v2"}'), v_jobid,
                   're-running every() with the same name keeps the pg_cron job id');
    RETURN NEXT results_eq(
        $q$SELECT count(*)::int, min(schedule::text) FROM cron.job WHERE jobname = 'jobq-every:nightly'$q$,
        $q$VALUES (1, '*/5 * * * *'::text)$q$, 'one cron job, with the new schedule');
    RETURN NEXT results_eq(
        $q$SELECT name, schedule, queue, payload, priority, max_attempts FROM jobq.schedules$q$,
        $q$VALUES ('nightly'::text, '*/5 * * * *'::text, 'reports2'::text, '{"kind": "v2"}'::jsonb, 0, NULL::int)$q$,
        'one periodic job, updated to the new schedule, queue, payload and defaults');

    -- enqueue_periodic: what pg_cron calls -----------------------------------------------------------
    v_first := jobq.enqueue_periodic('nightly');
    RETURN NEXT results_eq(
        format($q$SELECT queue, payload, priority::int, max_attempts, job_key, status, run_at FROM jobq._job WHERE id = %s$q$, v_first),
        $q$VALUES ('reports2'::text, '{"kind": "v2"}'::jsonb, 0, 25, 'every:nightly'::text, 'ready'::text, now())$q$,
        'enqueue_periodic enqueues the payload on the queue now, under job_key every:<name> (max_attempts: the queue''s)');
    RETURN NEXT is(jobq.enqueue_periodic('nightly'), v_first, 'while that run is ready, the next tick returns its id');
    SELECT c.lease_token INTO v_lease FROM jobq.claim('reports2', 1, 'w') AS c;
    RETURN NEXT is(jobq.enqueue_periodic('nightly'), v_first, 'while it is running, the next tick returns its id too');
    RETURN NEXT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'reports2'), 1, 'no copies piled up');
    PERFORM jobq.complete(v_first, v_lease);
    v_next := jobq.enqueue_periodic('nightly');
    RETURN NEXT isnt(v_next, v_first, 'after the run completed, the next tick enqueues a new run');
    RETURN NEXT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'reports2'), 1, 'one live run again');

    PERFORM jobq.every('once', '0 4 * * *', 'reports3', max_attempts => 1);
    v_first := jobq.enqueue_periodic('once');
    RETURN NEXT is((SELECT max_attempts FROM jobq._job WHERE id = v_first), 1, 'every(max_attempts => 1) applies to the runs');
    PERFORM jobq.fail(c.id, 'boom', c.lease_token) FROM jobq.claim('reports3', 1) AS c;
    RETURN NEXT is((SELECT status FROM jobq._job_archive WHERE id = v_first), 'dead', 'setup: that run died');
    v_next := jobq.enqueue_periodic('once');
    RETURN NEXT isnt(v_next, v_first, 'a dead run does not block the next tick');
    PERFORM jobq.pause('reports3');
    RETURN NEXT is(jobq.enqueue_periodic('once'), v_next, 'ticks into a paused queue dedupe too');

    -- bad input: JQ016, JQ012, JQ001… and nothing registered ------------------------------------------
    v_state := (SELECT string_agg(to_jsonb(p)::text, ',' ORDER BY name) FROM jobq._periodic AS p)
               || (SELECT string_agg(to_jsonb(c)::text, ',' ORDER BY jobid) FROM cron.job AS c);
    RETURN NEXT throws_ok($q$SELECT jobq.every('a b', '* * * * *', 'q')$q$, 'JQ016',
        'jobq: name must be 1 to 64 characters from [A-Za-z0-9_.:-], got ''a b''', 'every: a name with a space raises JQ016');
    RETURN NEXT throws_ok($q$SELECT jobq.every(NULL, '* * * * *', 'q')$q$, 'JQ016', NULL, 'every: name NULL raises JQ016');
    RETURN NEXT throws_ok($q$SELECT jobq.every('', '* * * * *', 'q')$q$, 'JQ016', NULL, 'every: an empty name raises JQ016');
    RETURN NEXT throws_ok($q$SELECT jobq.every(repeat('n', 65), '* * * * *', 'q')$q$, 'JQ016', NULL, 'every: a 65-character name raises JQ016');
    RETURN NEXT throws_ok($q$SELECT jobq.every('x'';drop', '* * * * *', 'q')$q$, 'JQ016', NULL, 'every: a name with a quote raises JQ016');
    RETURN NEXT throws_ok($q$SELECT jobq.every('bad', 'every minute', 'q')$q$, 'JQ012',
        'jobq: pg_cron rejected schedule ''every minute''', 'every: an invalid schedule raises JQ012 naming it');
    RETURN NEXT throws_ok($q$SELECT jobq.every('bad', '* * * *', 'q')$q$, 'JQ012', NULL, 'every: a four-field schedule raises JQ012');
    RETURN NEXT throws_ok($q$SELECT jobq.every('bad', '61 * * * *', 'q')$q$, 'JQ012', NULL, 'every: minute 61 raises JQ012');
    RETURN NEXT throws_ok($q$SELECT jobq.every('bad', '30 seconds', 'q')$q$, 'JQ012', NULL,
        'every: a pg_cron 1.5 interval schedule raises JQ012 on pg_cron 1.4');
    RETURN NEXT throws_ok($q$SELECT jobq.every('bad', NULL, 'q')$q$, 'JQ012', 'jobq: schedule must not be NULL', 'every: schedule NULL raises JQ012');
    RETURN NEXT throws_ok($q$SELECT jobq.every('nightly', 'every minute', 'q')$q$, 'JQ012', NULL,
        'every: re-running with an invalid schedule raises JQ012');
    RETURN NEXT throws_ok($q$SELECT jobq.every('bad', '* * * * *', 'a b')$q$, 'JQ001', NULL, 'every: a bad queue raises JQ001');
    RETURN NEXT throws_ok($q$SELECT jobq.every('bad', '* * * * *', 'q', '[]')$q$, 'JQ002', NULL, 'every: a payload that is not an object raises JQ002');
    RETURN NEXT throws_ok($q$SELECT jobq.every('bad', '* * * * *', 'q', NULL)$q$, 'JQ002', NULL, 'every: payload NULL raises JQ002');
    RETURN NEXT throws_ok($q$SELECT jobq.every('bad', '* * * * *', 'q', '{}', 99999)$q$, 'JQ004', NULL, 'every: priority out of range raises JQ004');
    RETURN NEXT throws_ok($q$SELECT jobq.every('bad', '* * * * *', 'q', '{}', 0, 0)$q$, 'JQ005', NULL, 'every: max_attempts 0 raises JQ005');
    RETURN NEXT is((SELECT string_agg(to_jsonb(p)::text, ',' ORDER BY name) FROM jobq._periodic AS p)
                   || (SELECT string_agg(to_jsonb(c)::text, ',' ORDER BY jobid) FROM cron.job AS c), v_state,
                   'the rejected calls registered nothing and changed nothing (jobq._periodic and cron.job)');
    RETURN NEXT throws_ok($q$SELECT jobq.unschedule('a b')$q$, 'JQ016', NULL, 'unschedule: a bad name raises JQ016');
    RETURN NEXT throws_ok($q$SELECT jobq.enqueue_periodic('no-such')$q$, 'JQ016', 'jobq: no periodic job named ''no-such''',
        'enqueue_periodic: an unknown name raises JQ016');
    RETURN NEXT lives_ok(format($q$SELECT jobq.every(%L, '0 0 1 1 *', 'q')$q$, repeat('n', 64)), 'every: a 64-character name is accepted');
    RETURN NEXT lives_ok($q$SELECT jobq.every('Report_v2.eu:daily-1', '0 0 1 1 *', 'q')$q$, 'every: names may use letters, digits and _ . : -');

    -- unschedule ------------------------------------------------------------------------------------------
    RETURN NEXT is(jobq.unschedule('nightly'), true, 'unschedule returns true');
    RETURN NEXT is((SELECT count(*)::int FROM cron.job WHERE jobname = 'jobq-every:nightly'), 0, 'the pg_cron job is gone');
    RETURN NEXT is((SELECT count(*)::int FROM jobq.schedules WHERE name = 'nightly'), 0, 'the periodic job is gone');
    RETURN NEXT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'reports2'), 1, 'runs it already enqueued stay');
    RETURN NEXT is((SELECT count(*)::int FROM cron.job WHERE jobname = 'not-jobq'), 1, 'other cron jobs are left alone');
    RETURN NEXT is(jobq.unschedule('nightly'), false, 'a second unschedule returns false');
    RETURN NEXT throws_ok($q$SELECT jobq.enqueue_periodic('nightly')$q$, 'JQ016', NULL,
        'a stale tick after unschedule raises JQ016 (and enqueues nothing)');
    PERFORM cron.unschedule('jobq-every:once');
    RETURN NEXT is(jobq.unschedule('once'), true, 'unschedule works when the pg_cron job was already removed by hand');

    -- jobq_admin can manage periodic jobs (given USAGE on schema cron, as pg_cron requires) ------------------
    CREATE ROLE jobq_test_admin LOGIN;
    GRANT jobq_admin TO jobq_test_admin;
    GRANT USAGE ON SCHEMA cron TO jobq_test_admin;
    RETURN NEXT lives_ok($q$SELECT pg_temp.as_role('jobq_test_admin', 'SELECT jobq.every(''by-admin'', ''0 5 * * *'', ''q'')')$q$,
        'a jobq_admin member may call every()');
    RETURN NEXT is((SELECT username::text FROM cron.job WHERE jobname = 'jobq-every:by-admin'), 'jobq_test_admin',
        'the cron job runs as that role');
    PERFORM jobq.every('by-owner', '0 5 * * *', 'q');
    RETURN NEXT is(pg_temp.as_role('jobq_test_admin', $q$SELECT jobq.enqueue_periodic('by-owner') IS NOT NULL$q$), 'true',
        'a jobq_admin member may run what the cron job runs (enqueue_periodic)');
    RETURN NEXT lives_ok($q$SELECT pg_temp.as_role('jobq_test_admin', 'SELECT jobq.unschedule(''by-admin'')')$q$,
        'a jobq_admin member may call unschedule()');
    RETURN NEXT is((SELECT count(*)::int FROM jobq.schedules WHERE name = 'by-admin'), 0, 'and it is gone');
END
$$;
SELECT * FROM pg_temp.cron_tests();

-- without pg_cron: the workers run new schedules; runner 'pg_cron' raises JQ014 ------------------------
SELECT lives_ok($$SELECT jobq.every('kept', '0 6 * * *', 'kq')$$, 'setup: a periodic job registered while pg_cron is there');
DROP EXTENSION IF EXISTS pg_cron;
SELECT ok(NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron'), 'setup: pg_cron is not installed');
SELECT throws_ok($$SELECT jobq.every('x', '* * * * *', 'q', runner => 'pg_cron')$$, 'JQ014', NULL,
                 'every(runner => ''pg_cron'') without pg_cron raises JQ014');
SELECT is((SELECT count(*)::int FROM jobq.schedules WHERE name = 'x'), 0, 'and stores nothing');
SELECT is(jobq.every('x', '* * * * *', 'q'), NULL, 'every() without pg_cron hands the schedule to the workers (no pg_cron job id)');
SELECT is((SELECT runner FROM jobq.schedules WHERE name = 'x'), 'workers', '... which jobq.schedules shows');
SELECT ok(jobq.unschedule('x'), 'unschedule() works without pg_cron');
SELECT is((SELECT count(*)::int FROM jobq.schedules WHERE name IN ('kept', 'x')), 1, 'it removed only that schedule');
SELECT isnt(jobq.enqueue_periodic('kept'), NULL, 'enqueue_periodic() works without pg_cron (another scheduler may call it)');
SELECT is((SELECT job_key FROM jobq._job WHERE queue = 'kq'), 'every:kept', 'with its job_key');

SELECT * FROM finish();
ROLLBACK;

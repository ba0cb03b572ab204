-- jobq 0.9.0, the smaller fixes of issue 25 (item 5):
--   * a role without USAGE on schema cron (a plain jobq_admin member) runs
--     jobq.every(..., runner => 'workers') and jobq.unschedule where pg_cron
--     is installed, and gets JQ014 naming the missing USAGE (with a HINT)
--     from what truly needs pg_cron, instead of a bare 42501;
--   * array arguments are lists: more than one dimension is refused with the
--     argument's JQ SQLSTATE, a HINT and nothing changed; any lower bound is
--     accepted, and an error about one element names its own subscript.
-- As in periodic.sql, pg_cron is created here when missing (rolled back).
BEGIN;
SELECT plan(29);
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

CREATE ROLE jobq_test_cron_admin NOLOGIN IN ROLE jobq_admin;   -- rolled back with the test

-- What p_sql does run as p_role: its first column as text ('<null>' for
-- NULL), or the error it raised as 'SQLSTATE: message | HINT: hint'.
CREATE FUNCTION pg_temp.as_role(p_role text, p_sql text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_result text;
    v_state text;
    v_message text;
    v_hint text;
BEGIN
    BEGIN
        EXECUTE format('SET LOCAL ROLE %I', p_role);
        EXECUTE p_sql INTO v_result;
        RESET ROLE;
        RETURN coalesce(v_result, '<null>');
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT, v_hint = PG_EXCEPTION_HINT;
        RETURN v_state || ': ' || v_message || ' | HINT: ' || v_hint;
    END;
END
$$;

-- jobq_admin without pg_cron's USAGE -------------------------------------------------------------
SELECT ok(EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron')
          AND NOT has_schema_privilege('jobq_test_cron_admin', 'cron', 'USAGE'),
          'pg_cron is installed here, and the jobq_admin member has no USAGE on schema cron');
SELECT is(pg_temp.as_role('jobq_test_cron_admin',
                          $q$SELECT jobq.every('nightly', '0 3 * * *', 'reports', runner => 'workers')$q$),
          '<null>', 'it schedules a periodic job under the workers (0.8.0: 42501 permission denied for schema cron)');
SELECT is((SELECT runner FROM jobq.schedules WHERE name = 'nightly'), 'workers', 'the workers run it');
SELECT is(pg_temp.as_role('jobq_test_cron_admin', $q$SELECT jobq.unschedule('nightly')$q$), 'true',
          'it unschedules it');
SELECT is(pg_temp.as_role('jobq_test_cron_admin',
                          $q$SELECT jobq.every('nightly', '0 3 * * *', 'reports', runner => 'pg_cron')$q$),
          'JQ014: jobq: role jobq_test_cron_admin may not use pg_cron: it has no USAGE on schema cron'
          ' | HINT: A superuser can GRANT USAGE ON SCHEMA cron TO jobq_test_cron_admin. Without pg_cron, '
          'jobq.every(..., runner => ''workers'') has pyqueue workers run a periodic job, and they reap '
          'and prune on their own.',
          'runner => ''pg_cron'' raises JQ014 naming the missing USAGE, with a HINT');
SELECT matches(pg_temp.as_role('jobq_test_cron_admin', $q$SELECT jobq.every('nightly', '0 3 * * *', 'reports')$q$),
               '^JQ014: jobq: role jobq_test_cron_admin may not use pg_cron',
               'runner NULL (pg_cron, installed here) raises the same JQ014');
SELECT matches(pg_temp.as_role('jobq_test_cron_admin', $q$SELECT count(*) FROM jobq.schedule_maintenance()$q$),
               '^JQ014: jobq: role jobq_test_cron_admin may not use pg_cron',
               'schedule_maintenance() raises the same JQ014');
SELECT is_empty($$SELECT name FROM jobq.schedules$$, 'nothing was registered by the refused calls');

-- granted USAGE, pg_cron; moved to the workers, its own pg_cron job goes -------------------------
GRANT USAGE ON SCHEMA cron TO jobq_test_cron_admin;
DO $$ BEGIN PERFORM cron.schedule('jobq-every:nightly', '0 3 * * *', 'SELECT 1'); END $$;   -- the superuser's
SELECT matches(pg_temp.as_role('jobq_test_cron_admin', $q$SELECT jobq.every('nightly', '0 3 * * *', 'reports')$q$),
               '^[0-9]+$', 'with USAGE on schema cron it schedules with pg_cron (returns the pg_cron job id)');
SELECT set_eq($$SELECT username::text FROM cron.job WHERE jobname = 'jobq-every:nightly'$$,
              ARRAY[current_user::text, 'jobq_test_cron_admin'],
              'its pg_cron job is its own, beside the superuser''s of the same name');
SELECT is(pg_temp.as_role('jobq_test_cron_admin',
                          $q$SELECT jobq.every('nightly', '0 3 * * *', 'reports', runner => 'workers')$q$),
          '<null>', 'moved to the workers');
SELECT set_eq($$SELECT username::text FROM cron.job WHERE jobname = 'jobq-every:nightly'$$,
              ARRAY[current_user::text],
              'moving it removed its own pg_cron job, not another role''s of the same name');

-- array arguments are lists ------------------------------------------------------------------------
SELECT jobq.enqueue('lists', '{"n": 1}') AS p1 \gset
SELECT jobq.enqueue('lists', '{"n": 2}') AS p2 \gset
SELECT count(*) AS jobs_before, (SELECT count(*) FROM jobq._job_dep) AS deps_before FROM jobq._job \gset
SELECT throws_ok(format('SELECT jobq.enqueue(''lists'', ''{}'', depends_on => ARRAY[[%s], [%s]])', :p1, :p2),
                 'JQ018', 'jobq: depends_on must be a one-dimensional array, got 2 dimensions [1:2][1:1]',
                 'a two-dimensional depends_on raises JQ018 naming it (0.8.0 made one parent per element)');
SELECT throws_ok(format('SELECT jobq.enqueue_callback(''lists'', ''{}'', ARRAY[[%s, %s]])', :p1, :p2),
                 'JQ018', 'jobq: members must be a one-dimensional array, got 2 dimensions [1:1][1:2]',
                 'a two-dimensional members raises JQ018 naming it');
SELECT throws_ok(format('SELECT jobq.enqueue(''lists'', ''{}'', depends_on => ''[0:1]={%s,NULL}'')', :p1),
                 'JQ018', 'jobq: depends_on[1] is NULL',
                 'a NULL parent is named by its own subscript (0.8.0: depends_on[2] of a [0:1] array)');
SELECT throws_ok($$SELECT jobq.enqueue_many('lists', ARRAY[['{}', '{}']]::jsonb[])$$,
                 'JQ002', 'jobq: payloads must be a one-dimensional array, got 2 dimensions [1:1][1:2]',
                 'two-dimensional payloads raise JQ002 naming them (0.8.0 made one job per element)');
SELECT throws_ok($$SELECT jobq.enqueue_many('lists', '[0:2]={"{}",1,"{}"}'::jsonb[])$$,
                 'JQ002', 'jobq: payloads[1] must be a JSON object, got number',
                 'a bad payload is named by its own subscript');
SELECT throws_ok($$SELECT jobq.enqueue_many('lists', ARRAY['{}', '{}']::jsonb[], job_keys => '[5:6]={a,""}')$$,
                 'JQ009', 'jobq: job_keys[6] must be NULL or 1 to 512 characters, got 0 characters',
                 'a bad job key is named by its own subscript');
SELECT throws_ok($$SELECT jobq.enqueue_many('lists', ARRAY['{}']::jsonb[], job_keys => ARRAY[['a']])$$,
                 'JQ009', 'jobq: job_keys must be a one-dimensional array, got 2 dimensions [1:1][1:1]',
                 'two-dimensional job_keys raise JQ009 naming them');
SELECT throws_ok($$SELECT * FROM jobq.claim(ARRAY[['lists', 'other']])$$,
                 'JQ001', 'jobq: queues must be a one-dimensional array, got 2 dimensions [1:1][1:2]',
                 'claim: two-dimensional queues raise JQ001 naming them (0.8.0: a bare 0A000)');
SELECT throws_ok($$SELECT * FROM jobq.claim('[0:1]={"bad name",lists}'::text[])$$, 'JQ001', NULL,
                 'claim: a bad queue name of a [0:1] array raises JQ001');
SELECT matches((SELECT pg_temp.as_role(current_user::text,
                    $q$SELECT * FROM jobq.claim('[0:1]={"bad name",lists}'::text[])$q$)),
               '^JQ001: jobq: queues\[0\] must be', 'claim: that name is queues[0], its own subscript');
SELECT throws_ok($$SELECT jobq.next_run_at(ARRAY[['lists']])$$,
                 'JQ001', 'jobq: queues must be a one-dimensional array, got 2 dimensions [1:1][1:1]',
                 'next_run_at: two-dimensional queues raise JQ001 naming them');
SELECT throws_ok(format('SELECT jobq.complete_many(ARRAY[[%s]], ARRAY[[gen_random_uuid()]])', :p1),
                 'JQ010', 'jobq: ids must be a one-dimensional array, got 2 dimensions [1:1][1:1]',
                 'complete_many: two-dimensional ids raise JQ010 naming them (0.8.0: a bare 0A000)');
SELECT throws_ok(format('SELECT jobq.complete_held(ARRAY[[%s]])', :p1),
                 'JQ010', 'jobq: ids must be a one-dimensional array, got 2 dimensions [1:1][1:1]',
                 'complete_held: two-dimensional ids raise JQ010 naming them');
SELECT is((SELECT count(*) FROM jobq._job), :jobs_before::bigint, 'the refused calls added no job');
SELECT is((SELECT count(*) FROM jobq._job_dep), :deps_before::bigint, 'nor any parent link');
-- any lower bound is accepted
SELECT jobq.enqueue('lists', '{"child": true}', depends_on => format('[0:1]={%s,%s}', :p1, :p2)::bigint[]) AS child \gset
SELECT set_eq(format('SELECT parent_id FROM jobq._job_dep WHERE child_id = %s', :child),
              format('VALUES (%s::bigint), (%s)', :p1, :p2), 'a [0:1] depends_on links both parents');
SELECT array_agg(id)::text AS many FROM jobq.enqueue_many('lists', '[0:1]={"{\"n\": \"a\"}","{\"n\": \"b\"}"}'::jsonb[]) AS id \gset
SELECT is((SELECT array_agg(j.payload->>'n' ORDER BY j.id) FROM jobq._job AS j WHERE j.id = ANY (:'many'::bigint[])),
          ARRAY['a', 'b'], 'a [0:1] payloads array enqueues its jobs in order');

SELECT * FROM finish();
ROLLBACK;

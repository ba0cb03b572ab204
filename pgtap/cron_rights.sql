-- Schedules for a role without pg_cron's rights (since 0.9.0): a role
-- without USAGE on schema cron (a plain jobq_admin member) runs
-- jobq.every(..., runner => 'workers') and jobq.unschedule where pg_cron is
-- installed, and gets JQ014 naming the missing USAGE (with a HINT) from what
-- truly needs pg_cron, instead of a bare 42501.
-- As in periodic.sql, pg_cron is created here when missing (rolled back).
BEGIN;
SELECT plan(12);
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

SELECT * FROM finish();
ROLLBACK;

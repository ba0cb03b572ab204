-- Per-queue privileges (since 0.9.0, opt-in). jobq.grant_queue(role,
-- queue_pattern, privilege) lets a role produce, consume or read on the
-- queues a pattern matches (a queue name, or a prefix followed by *); a
-- queue that grants of a privilege match allows it only to their roles (and
-- members) and jobq_admin, and keeps the role-level rules otherwise. What
-- the caller is: the role set with SET ROLE, else the login. Real sessions
-- and real SET ROLE from pgbouncer-like logins: tests/test_queue_privileges.py.
BEGIN;
SELECT plan(81);

SET LOCAL client_min_messages = warning;
CREATE ROLE jobq_test_team NOLOGIN IN ROLE jobq_producer, jobq_worker;   -- rolled back with the test
CREATE ROLE jobq_test_member NOLOGIN IN ROLE jobq_test_team;
CREATE ROLE jobq_test_other NOLOGIN IN ROLE jobq_producer, jobq_worker, jobq_viewer;
CREATE ROLE jobq_test_gone NOLOGIN;

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
-- The SQLSTATE and message an as_role call raised, its id replaced by #.
CREATE FUNCTION pg_temp.error_of(p_role text, p_sql text, p_id bigint) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_temp.as_role(p_role, p_sql);
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RESET ROLE;
    RETURN SQLSTATE || ' ' || replace(SQLERRM, p_id::text, '#');
END
$$;
CREATE FUNCTION pg_temp.grants() RETURNS text LANGUAGE sql AS $$
    SELECT coalesce(string_agg(format('%s %s %s', role, queue_pattern, privilege), ', ' ORDER BY role, queue_pattern, privilege), '')
    FROM jobq._queue_grant
$$;

-- objects and who may call them ---------------------------------------------------------------
SELECT has_function('jobq', 'grant_queue', ARRAY['name', 'text', 'text'], 'jobq.grant_queue(name, text, text) exists');
SELECT has_function('jobq', 'revoke_queue', ARRAY['name', 'text', 'text'], 'jobq.revoke_queue(name, text, text) exists');
SELECT function_returns('jobq', 'grant_queue', ARRAY['name', 'text', 'text'], 'boolean', 'grant_queue() returns boolean');
SELECT function_returns('jobq', 'revoke_queue', ARRAY['name', 'text', 'text'], 'boolean', 'revoke_queue() returns boolean');
SELECT has_table('jobq', '_queue_grant', 'the grants table jobq._queue_grant exists');
SELECT has_view('jobq', 'queue_grants', 'view jobq.queue_grants exists');
SELECT is(ARRAY(SELECT column_name::text FROM information_schema.columns
                WHERE table_schema = 'jobq' AND table_name = 'queue_grants' ORDER BY ordinal_position),
          ARRAY['role', 'queue_pattern', 'privilege', 'granted_at', 'granted_by', 'role_exists'],
          'jobq.queue_grants has role, queue_pattern, privilege, granted_at, granted_by, role_exists');
SELECT function_privs_are('jobq', 'grant_queue', ARRAY['name', 'text', 'text'], 'jobq_admin', ARRAY['EXECUTE'],
                          'function_privs_are: jobq_admin may execute grant_queue');
SELECT function_privs_are('jobq', 'revoke_queue', ARRAY['name', 'text', 'text'], 'jobq_admin', ARRAY['EXECUTE'],
                          'function_privs_are: jobq_admin may execute revoke_queue');
SELECT function_privs_are('jobq', 'grant_queue', ARRAY['name', 'text', 'text'], 'jobq_producer', ARRAY[]::text[],
                          'function_privs_are: jobq_producer has no privilege on grant_queue');
SELECT function_privs_are('jobq', 'grant_queue', ARRAY['name', 'text', 'text'], 'jobq_worker', ARRAY[]::text[],
                          'function_privs_are: jobq_worker has no privilege on grant_queue');
SELECT function_privs_are('jobq', 'revoke_queue', ARRAY['name', 'text', 'text'], 'jobq_viewer', ARRAY[]::text[],
                          'function_privs_are: jobq_viewer has no privilege on revoke_queue');
SELECT function_privs_are('jobq', 'revoke_queue', ARRAY['name', 'text', 'text'], 'public', ARRAY[]::text[],
                          'function_privs_are: PUBLIC has no privilege on revoke_queue');
SELECT table_privs_are('jobq', 'queue_grants', 'jobq_viewer', ARRAY['SELECT'], 'jobq_viewer may read jobq.queue_grants');
SELECT table_privs_are('jobq', '_queue_grant', 'jobq_admin', ARRAY['SELECT'], 'jobq_admin may only read jobq._queue_grant');
SELECT table_privs_are('jobq', '_queue_grant', 'jobq_viewer', ARRAY[]::text[], 'jobq_viewer has no privilege on jobq._queue_grant');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_test_team', 'SELECT jobq.grant_queue(''jobq_test_team'', ''pq'', ''produce'')')$$,
                 '42501', NULL, 'a producer and worker cannot grant itself a queue');

-- bad input: a JQ code, the argument named, a HINT, and nothing changed -----------------------------
SELECT ok(jobq.grant_queue('jobq_test_team', 'keep', 'read'), 'setup: one grant');
SELECT throws_ok($$SELECT jobq.grant_queue(NULL, 'pq', 'produce')$$, 'JQ021',
                 'jobq: role must be the name of a role, got NULL', 'grant_queue: NULL role is JQ021');
SELECT throws_ok($$SELECT jobq.grant_queue('', 'pq', 'produce')$$, 'JQ021',
                 'jobq: role must be the name of a role, got ''''', 'grant_queue: an empty role is JQ021');
SELECT throws_ok($$SELECT jobq.grant_queue('jobq_test_nosuch', 'pq', 'produce')$$, 'JQ021',
                 'jobq: role must be an existing role, got ''jobq_test_nosuch''', 'grant_queue: an unknown role is JQ021');
SELECT throws_ok($$SELECT jobq.grant_queue('JOBQ_TEST_TEAM', 'pq', 'produce')$$, 'JQ021', NULL,
                 'grant_queue: role names are case-sensitive');
SELECT throws_ok($$SELECT jobq.grant_queue('public', 'pq', 'produce')$$, 'JQ021', NULL,
                 'grant_queue: PUBLIC is no role to grant a queue to');
SELECT throws_ok($$SELECT jobq.grant_queue('jobq_test_team', NULL, 'produce')$$, 'JQ001',
                 'jobq: queue_pattern must be a queue name, or the start of one followed by *, got NULL',
                 'grant_queue: a NULL pattern is JQ001');
SELECT throws_ok($$SELECT jobq.grant_queue('jobq_test_team', '', 'produce')$$, 'JQ001', NULL, 'grant_queue: an empty pattern is JQ001');
SELECT throws_ok($$SELECT jobq.grant_queue('jobq_test_team', 'p*q', 'produce')$$, 'JQ001', NULL,
                 'grant_queue: a * that does not end the pattern is JQ001');
SELECT throws_ok($$SELECT jobq.grant_queue('jobq_test_team', 'pq%', 'produce')$$, 'JQ001', NULL,
                 'grant_queue: LIKE wildcards are no pattern (JQ001)');
SELECT throws_ok(format($$SELECT jobq.grant_queue('jobq_test_team', %L, 'produce')$$, repeat('q', 129)), 'JQ001', NULL,
                 'grant_queue: a pattern longer than a queue name is JQ001');
SELECT throws_ok($$SELECT jobq.grant_queue('jobq_test_team', 'pq', NULL)$$, 'JQ017',
                 'jobq: privilege must be ''produce'', ''consume'' or ''read'', got NULL', 'grant_queue: a NULL privilege is JQ017');
SELECT throws_ok($$SELECT jobq.grant_queue('jobq_test_team', 'pq', 'write')$$, 'JQ017', NULL,
                 'grant_queue: an unknown privilege is JQ017');
SELECT throws_ok($$SELECT jobq.revoke_queue('jobq_test_nosuch', 'keep', 'read')$$, 'JQ021', NULL,
                 'revoke_queue: an unknown role without grants is JQ021');
SELECT throws_ok($$SELECT jobq.revoke_queue('jobq_test_team', 'ke ep', 'read')$$, 'JQ001', NULL, 'revoke_queue: a bad pattern is JQ001');
SELECT throws_ok($$SELECT jobq.revoke_queue('jobq_test_team', 'keep', 'Read')$$, 'JQ017', NULL, 'revoke_queue: a bad privilege is JQ017');
SELECT is(pg_temp.grants(), 'jobq_test_team keep read', 'the refused calls changed no grant');

-- grant and revoke -------------------------------------------------------------------------------------
SELECT ok(NOT jobq.grant_queue('jobq_test_team', 'keep', 'read'), 'granting again returns false');
SELECT ok(jobq.revoke_queue('jobq_test_team', 'keep', 'read'), 'revoke_queue returns true when there was a grant');
SELECT ok(NOT jobq.revoke_queue('jobq_test_team', 'keep', 'read'), 'and false when there was none');
SELECT ok(jobq.grant_queue('jobq_test_gone', 'gone', 'consume'), 'a grant to a role dropped next');
DROP ROLE jobq_test_gone;
SELECT is((SELECT role_exists FROM jobq.queue_grants WHERE role = 'jobq_test_gone'), false,
          'jobq.queue_grants shows a grant of a dropped role (role_exists false)');
SELECT ok(jobq.revoke_queue('jobq_test_gone', 'gone', 'consume'), 'revoke_queue takes the name of a dropped role that has grants');

-- produce -------------------------------------------------------------------------------------------------
SELECT ok(jobq.grant_queue('jobq_test_team', 'pb.*', 'produce'), 'grant produce on pb.* to the team');
SELECT is((SELECT granted_by FROM jobq.queue_grants WHERE queue_pattern = 'pb.*'), session_user::text,
          'queue_grants says who granted it');
SELECT jobq.enqueue('pb.free', '{}') AS parent \gset
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_test_other', 'SELECT jobq.enqueue(''pb.x'', ''{}'')')$$, 'JQ020',
                 'jobq: role jobq_test_other lacks the produce privilege on queue ''pb.x''',
                 'enqueue into a queue with produce grants is JQ020 for another role, naming the role, privilege and queue');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_test_other', 'SELECT count(*) FROM jobq.enqueue_many(''pb.x'', ARRAY[''{}'']::jsonb[])')$$,
                 'JQ020', NULL, 'enqueue_many too');
SELECT throws_ok(format($$SELECT pg_temp.as_role('jobq_test_other', 'SELECT jobq.enqueue_callback(''pb.x'', ''{}'', ARRAY[%s]::bigint[])')$$, :parent),
                 'JQ020', NULL, 'enqueue_callback too');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'pb.x'), 0, 'the refused enqueues added nothing');
SELECT isnt(pg_temp.as_role('jobq_test_member', $$SELECT jobq.enqueue('pb.x', '{}')$$), NULL,
            'a member of the granted role may enqueue there');
SELECT isnt(pg_temp.as_role('jobq_test_other', $$SELECT jobq.enqueue('pbx', '{}')$$), NULL,
            'pb.* does not match pbx: the role-level rules apply there');
SELECT isnt(pg_temp.as_role('jobq_test_other', $$SELECT jobq.enqueue('pb', '{}')$$), NULL, 'nor pb');
SELECT ok(jobq.grant_queue('jobq_test_team', 'u_q', 'produce'), 'grant produce on u_q');
SELECT isnt(pg_temp.as_role('jobq_test_other', $$SELECT jobq.enqueue('uxq', '{}')$$), NULL,
            '_ in a pattern stands for itself: u_q does not match uxq');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_test_other', 'SELECT jobq.enqueue(''u_q'', ''{}'')')$$, 'JQ020', NULL,
                 'but matches u_q');

-- consume -------------------------------------------------------------------------------------------------
SELECT ok(jobq.grant_queue('jobq_test_team', 'pb.x', 'consume'), 'grant consume on the queue pb.x alone');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_test_other', 'SELECT count(*) FROM jobq.claim(''pb.x'', 5)')$$, 'JQ020',
                 'jobq: role jobq_test_other lacks the consume privilege on queue ''pb.x''', 'claim of pb.x is JQ020 for another role');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_test_other', 'SELECT count(*) FROM jobq.claim(ARRAY[''pb.free'', ''pb.x''], 5)')$$,
                 'JQ020', NULL, 'so is a claim across queues that names it');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_test_other', 'SELECT count(*) FROM jobq.take(''pb.x'', 5)')$$, 'JQ020', NULL, 'take too');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_test_other', 'SELECT count(*) FROM jobq.hold(''pb.x'', 5)')$$, 'JQ020', NULL, 'hold too');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_test_other', 'SELECT jobq.next_run_at(ARRAY[''pb.free'', ''pb.x''])')$$,
                 'JQ020', 'jobq: role jobq_test_other lacks the consume privilege on queue ''pb.x''',
                 'next_run_at of pb.x too: only who may claim a queue learns when its next job is due');
SELECT lives_ok($$SELECT pg_temp.as_role('jobq_test_other', 'SELECT jobq.next_run_at(ARRAY[''pb.free''])')$$,
                'next_run_at of a queue without consume grants works for any worker');
SELECT lives_ok($$SELECT pg_temp.as_role('jobq_test_member', 'SELECT jobq.next_run_at(ARRAY[''pb.x''])')$$,
                'and of pb.x for a member of the team');
SELECT id AS pbx FROM jobq._job WHERE queue = 'pb.x' \gset
SELECT is(pg_temp.as_role('jobq_test_other', format('SELECT jobq.complete_held(ARRAY[%s]::bigint[])', :pbx)), '0',
          'complete_held leaves a job of pb.x alone for another role');
SELECT is(pg_temp.as_role('jobq_test_other', format('SELECT jobq.fail_held(%s, ''x'')', :pbx)), 'false', 'fail_held too');
SELECT is((SELECT attempts FROM jobq._job WHERE id = :pbx), 0, 'and the job is untouched');
SELECT is(pg_temp.as_role('jobq_test_other', $$SELECT count(*) FROM jobq.claim('pb.free', 5)$$), '1',
          'pb.free has no consume grant: another worker claims it');
SELECT is(pg_temp.as_role('jobq_test_member', $$SELECT count(*) FROM jobq.claim('pb.x', 5)$$), '1', 'a member of the team claims pb.x');

-- read ------------------------------------------------------------------------------------------------------
SELECT jobq.enqueue('rd.a', '{}') AS rd \gset
SELECT jobq.enqueue('rd.b', '{}', depends_on => ARRAY[:rd]) AS rd_child \gset
SELECT ok(jobq.grant_queue('jobq_test_team', '*', 'read'), 'grant read on every queue (*) to the team');
SELECT is(pg_temp.error_of('jobq_test_other', format('SELECT jobq.status(%s)', :rd), :rd),
          pg_temp.error_of('jobq_test_other', 'SELECT jobq.status(999999999)', 999999999),
          'status of an unreadable job: exactly the error of an unknown id');
SELECT is(pg_temp.error_of('jobq_test_other', format('SELECT jobq.result(%s)', :rd), :rd),
          pg_temp.error_of('jobq_test_other', 'SELECT jobq.result(999999999)', 999999999), 'result too');
SELECT is(pg_temp.error_of('jobq_test_other', format('SELECT count(*) FROM jobq.parent_results(%s)', :rd_child), :rd_child),
          pg_temp.error_of('jobq_test_other', 'SELECT count(*) FROM jobq.parent_results(999999999)', 999999999), 'parent_results too');
SELECT is(pg_temp.error_of('jobq_test_other', format('SELECT jobq.watch(%s)', :rd), :rd),
          pg_temp.error_of('jobq_test_other', 'SELECT jobq.watch(999999999)', 999999999), 'watch too');
SELECT is((SELECT watched FROM jobq._job WHERE id = :rd), false, 'and the refused watch marked nothing');
SELECT is(pg_temp.as_role('jobq_test_other', 'SELECT count(*) FROM jobq.jobs'), '0',
          'jobq.jobs shows a viewer of no reading role no job of a read-restricted queue');
SELECT is(pg_temp.as_role('jobq_test_member', format('SELECT jobq.status(%s) || jobq.watch(%s)', :rd, :rd)), 'readyready',
          'the team reads its queues');

-- the private helpers, directly ------------------------------------------------------------------------------
GRANT EXECUTE ON FUNCTION jobq._caller(), jobq._denied_queue(text[], text) TO jobq_test_other;   -- rolled back
GRANT SELECT ON jobq._queue_grant TO jobq_test_other;   -- (helpers run with their caller's rights)
SELECT is(jobq._caller(), session_user::text, '_caller() is the login role without SET ROLE');
SELECT is(pg_temp.as_role('jobq_test_other', 'SELECT jobq._caller()'), 'jobq_test_other', '_caller() is the role set with SET ROLE');
SELECT is(jobq._denied_queue(ARRAY['pb.x', 'free'], 'consume'), NULL, '_denied_queue: nothing is denied to a superuser (as jobq_admin)');
SELECT is(pg_temp.as_role('jobq_test_other', $$SELECT jobq._denied_queue(ARRAY['free', 'pb.x', 'pb.y'], 'consume')$$), 'pb.x',
          '_denied_queue: the first queue of the list that grants match and the role holds none of');
SELECT is(pg_temp.as_role('jobq_test_other', $$SELECT jobq._denied_queue(ARRAY['free', 'pb.y'], 'consume')$$), NULL,
          '_denied_queue: NULL when no grant matches');
SELECT jobq.enqueue('lg', '{}', now() + interval '1 hour', group_key => 'G') AS lg1 \gset
SELECT jobq.enqueue('lg', '{}', group_key => 'G') AS lg2 \gset
SELECT ok(jobq._lock_group_head('lg', 'G', :lg1), '_lock_group_head: true for the group''s oldest member itself');
SELECT ok(jobq._lock_group_head('lg', 'G', :lg2), '_lock_group_head: true when it could lock the older member a later one goes ahead of');
SELECT ok(jobq._lock_group_head('lg', 'nosuch', :lg2), '_lock_group_head: true for a group without members (nothing to lock)');

SELECT * FROM finish();
ROLLBACK;

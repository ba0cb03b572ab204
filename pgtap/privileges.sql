-- Least privilege: jobq_producer enqueues, jobq_worker works jobs,
-- jobq_admin does everything, PUBLIC gets nothing.
BEGIN;
SELECT plan(91);

CREATE ROLE jobq_test_nobody NOLOGIN;   -- rolled back with the test

-- the EXECUTE matrix ---------------------------------------------------------------
CREATE TEMP TABLE api (sig text, producer boolean, worker boolean);
INSERT INTO api VALUES
    ('jobq.version()', true, true),
    ('jobq.enqueue(text,jsonb,timestamp with time zone,integer,integer,text,text,interval,interval,bigint[],text,jsonb,text,text)', true, false),
    ('jobq.enqueue_many(text,jsonb[],timestamp with time zone,integer,integer,text[],text,interval,interval,bigint[],text,jsonb[],text[],text)', true, false),
    ('jobq.enqueue_callback(text,jsonb,bigint[],timestamp with time zone,integer,integer,jsonb)', true, false),
    ('jobq.status(bigint)', true, true),
    ('jobq.result(bigint)', true, true),
    ('jobq.parent_results(bigint)', true, true),
    ('jobq.watch(bigint)', true, true),
    ('jobq.claim(text,bigint,text,interval)', false, true),
    ('jobq.claim(text[],bigint,text,interval)', false, true),
    ('jobq.take(text,bigint)', false, true),
    ('jobq.hold(text,bigint)', false, true),
    ('jobq.complete_held(bigint[],jsonb[])', false, true),
    ('jobq.fail_held(bigint,text,timestamp with time zone)', false, true),
    ('jobq.snooze(bigint,uuid,timestamp with time zone)', false, true),
    ('jobq.complete(bigint,uuid,jsonb)', false, true),
    ('jobq.complete_many(bigint[],uuid[],jsonb[])', false, true),
    ('jobq.fail(bigint,text,uuid,timestamp with time zone)', false, true),
    ('jobq.heartbeat(bigint,uuid,interval)', false, true),
    ('jobq.progress(bigint,uuid,jsonb)', false, true),
    ('jobq.release(bigint,uuid)', false, true),
    ('jobq.reap(integer)', false, true),
    ('jobq.next_run_at(text[])', false, true),
    ('jobq.run_schedules()', false, true),
    ('jobq.retry(bigint)', false, false),
    ('jobq.retry_dead(text)', false, false),
    ('jobq.cancel(bigint)', false, false),
    ('jobq.cancel_jobs(text,text,jsonb,jsonb)', false, false),
    ('jobq.discard_dead(text,interval)', false, false),
    ('jobq.prune(integer)', false, true),
    ('jobq.configure_queue(text,integer,interval,interval,double precision,interval,interval,interval,integer,integer,integer,interval,interval,interval,boolean,jsonb,integer)', false, false),
    ('jobq.reset_queue(text)', false, false),
    ('jobq.pause(text)', false, false),
    ('jobq.resume(text)', false, false),
    ('jobq.schedule_maintenance(text,text)', false, false),
    ('jobq.unschedule_maintenance()', false, false),
    ('jobq.every(text,text,text,jsonb,integer,integer,text)', false, false),
    ('jobq.unschedule(text)', false, false),
    ('jobq.enqueue_periodic(text)', false, false),
    ('jobq.run_now(bigint)', false, false),
    ('jobq.metrics()', false, true),
    ('jobq.grant_queue(name,text,text)', false, false),
    ('jobq.revoke_queue(name,text,text)', false, false);

SELECT set_eq($$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
                WHERE p.pronamespace = 'jobq'::regnamespace AND p.proname !~ '^_'$$,
              $$SELECT sig FROM api$$, 'the matrix below covers every public jobq function');
SELECT set_eq($$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
                WHERE p.pronamespace = 'jobq'::regnamespace AND has_function_privilege('jobq_producer', p.oid, 'EXECUTE')$$,
              $$SELECT sig FROM api WHERE producer$$,
              'jobq_producer may execute exactly version, enqueue, enqueue_many, enqueue_callback, status, result, parent_results, watch');
SELECT set_eq($$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
                WHERE p.pronamespace = 'jobq'::regnamespace AND has_function_privilege('jobq_worker', p.oid, 'EXECUTE')$$,
              $$SELECT sig FROM api WHERE worker$$,
              'jobq_worker may execute exactly version, claim, take, hold, complete_held, fail_held, complete, complete_many, fail, heartbeat, progress, release, snooze, reap, prune, next_run_at, run_schedules, metrics, status, result, parent_results, watch');
SELECT set_has($$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
                 WHERE p.pronamespace = 'jobq'::regnamespace AND has_function_privilege('jobq_admin', p.oid, 'EXECUTE')$$,
               $$SELECT sig FROM api$$, 'jobq_admin may execute every public function');
SELECT is_empty($$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
                  WHERE p.pronamespace = 'jobq'::regnamespace AND has_function_privilege('public', p.oid, 'EXECUTE')$$,
                'PUBLIC may execute no jobq function (private helpers included)');
SELECT is_empty($$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
                  WHERE p.pronamespace = 'jobq'::regnamespace AND p.proname ~ '^_'
                    AND (has_function_privilege('jobq_producer', p.oid, 'EXECUTE')
                         OR has_function_privilege('jobq_worker', p.oid, 'EXECUTE'))$$,
                'producers and workers may execute no private helper');
SELECT function_privs_are('jobq', 'claim', ARRAY['text', 'bigint', 'text', 'interval'], 'jobq_producer', ARRAY[]::text[],
                          'function_privs_are: jobq_producer has no privilege on claim(text, ...)');
SELECT function_privs_are('jobq', 'enqueue', ARRAY['text', 'jsonb', 'timestamp with time zone', 'integer', 'integer', 'text', 'text', 'interval', 'interval', 'bigint[]', 'text', 'jsonb', 'text', 'text'],
                          'jobq_worker', ARRAY[]::text[], 'function_privs_are: jobq_worker has no privilege on enqueue');
SELECT function_privs_are('jobq', 'take', ARRAY['text', 'bigint'], 'jobq_worker', ARRAY['EXECUTE'],
                          'function_privs_are: jobq_worker may execute take');
SELECT function_privs_are('jobq', 'hold', ARRAY['text', 'bigint'], 'jobq_worker', ARRAY['EXECUTE'],
                          'function_privs_are: jobq_worker may execute hold');
SELECT function_privs_are('jobq', 'complete_held', ARRAY['bigint[]', 'jsonb[]'], 'jobq_producer', ARRAY[]::text[],
                          'function_privs_are: jobq_producer has no privilege on complete_held');
SELECT function_privs_are('jobq', 'fail_held', ARRAY['bigint', 'text', 'timestamp with time zone'], 'public', ARRAY[]::text[],
                          'function_privs_are: PUBLIC has no privilege on fail_held');
SELECT function_privs_are('jobq', 'pause', ARRAY['text'], 'jobq_worker', ARRAY[]::text[],
                          'function_privs_are: jobq_worker has no privilege on pause');
SELECT function_privs_are('jobq', 'enqueue_periodic', ARRAY['text'], 'jobq_producer', ARRAY[]::text[],
                          'function_privs_are: jobq_producer has no privilege on enqueue_periodic');
SELECT function_privs_are('jobq', 'enqueue_callback', ARRAY['text', 'jsonb', 'bigint[]', 'timestamp with time zone', 'integer', 'integer', 'jsonb'],
                          'jobq_worker', ARRAY[]::text[], 'function_privs_are: jobq_worker has no privilege on enqueue_callback');
SELECT function_privs_are('jobq', 'result', ARRAY['bigint'], 'public', ARRAY[]::text[],
                          'function_privs_are: PUBLIC has no privilege on result');

-- tables, views, sequence, schema -------------------------------------------------------------
SELECT is_empty($$SELECT r.role, c.oid::regclass::text FROM pg_catalog.pg_class AS c,
                         (VALUES ('jobq_producer'), ('jobq_worker'), ('public'), ('jobq_test_nobody')) AS r(role)
                  WHERE c.relnamespace = 'jobq'::regnamespace AND c.relkind IN ('r', 'p', 'v')
                    AND has_table_privilege(r.role, c.oid, 'SELECT,INSERT,UPDATE,DELETE,TRUNCATE,REFERENCES,TRIGGER')$$,
                'producer, worker and PUBLIC have no privilege on any jobq table, partition or view');
SELECT is_empty($$SELECT r.role FROM (VALUES ('jobq_producer'), ('jobq_worker'), ('jobq_admin'), ('public')) AS r(role)
                  WHERE has_sequence_privilege(r.role, 'jobq._job_id_seq', 'USAGE,SELECT,UPDATE')$$,
                'nobody but the owner may use the job id sequence');
-- The archive's partitions (jobq._job_archive_kept and the day partitions)
-- are read through jobq._job_archive: reading the parent needs no privilege
-- on a partition, and nobody gets one.
SELECT is_empty($$SELECT c.oid::regclass::text FROM pg_catalog.pg_class AS c
                  WHERE c.relnamespace = 'jobq'::regnamespace AND c.relkind IN ('r', 'p', 'v') AND NOT c.relispartition
                    AND NOT has_table_privilege('jobq_admin', c.oid, 'SELECT')$$,
                'jobq_admin may read every jobq table and view');
SELECT is_empty($$SELECT c.oid::regclass::text FROM pg_catalog.pg_class AS c
                  WHERE c.relnamespace = 'jobq'::regnamespace AND c.relispartition
                    AND has_table_privilege('jobq_admin', c.oid, 'SELECT,INSERT,UPDATE,DELETE,TRUNCATE')$$,
                'jobq_admin has no privilege on a partition of the archive (it reads them through jobq._job_archive)');
SELECT is_empty($$SELECT c.oid::regclass::text FROM pg_catalog.pg_class AS c
                  WHERE c.relnamespace = 'jobq'::regnamespace AND c.relkind IN ('r', 'v')
                    AND has_table_privilege('jobq_admin', c.oid, 'INSERT,UPDATE,DELETE,TRUNCATE')$$,
                'jobq_admin writes only through the functions (no direct INSERT/UPDATE/DELETE/TRUNCATE)');
SELECT ok(has_schema_privilege('jobq_producer', 'jobq', 'USAGE') AND has_schema_privilege('jobq_worker', 'jobq', 'USAGE')
          AND has_schema_privilege('jobq_admin', 'jobq', 'USAGE'), 'the three roles may use schema jobq');
SELECT ok(NOT has_schema_privilege('public', 'jobq', 'USAGE'), 'PUBLIC may not use schema jobq');
SELECT is_empty($$SELECT r.role FROM (VALUES ('jobq_producer'), ('jobq_worker'), ('jobq_admin'), ('public')) AS r(role)
                  WHERE has_schema_privilege(r.role, 'jobq', 'CREATE')$$,
                'nobody but the owner may create objects in schema jobq');
SELECT ok(pg_has_role('jobq_admin', 'jobq_producer', 'USAGE') AND pg_has_role('jobq_admin', 'jobq_worker', 'USAGE'),
          'jobq_admin is a member of jobq_producer and jobq_worker');

-- calls under each role ----------------------------------------------------------------------------
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

-- a plain SET ROLE in the test transaction
SET ROLE jobq_producer;
SELECT jobq.enqueue('priv', '{"by": "producer"}') AS producer_job \gset
RESET ROLE;
SELECT is((SELECT payload->>'by' FROM jobq._job WHERE id = :producer_job), 'producer', 'SET ROLE jobq_producer: enqueue works');

SELECT is(pg_temp.as_role('jobq_producer', $$SELECT current_user$$), 'jobq_producer', 'as_role() really switches role');
SELECT is(current_user::text, session_user::text, 'and switches back');
SELECT is(pg_temp.as_role('jobq_producer', $$SELECT count(*) FROM jobq.enqueue_many('priv', ARRAY['{}', '{}']::jsonb[])$$), '2',
          'jobq_producer: enqueue_many works');
SELECT is(pg_temp.as_role('jobq_producer', $$SELECT jobq.version()$$), '0.14.0', 'jobq_producer: version works');
SELECT is(pg_temp.as_role('jobq_producer', $$SELECT count(*) FROM jobq.enqueue_many('privg', ARRAY['{}', '{}']::jsonb[], group_key => 'g')$$), '2',
          'jobq_producer: enqueue_many with a group_key works');
SELECT is(pg_temp.as_role('jobq_producer', $$SELECT jobq.enqueue('privg', '{}', group_key => 'g') IS NOT NULL$$), 'true',
          'jobq_producer: enqueue with a group_key works');
-- 0.6.0: workflows for producers (queue privw, apart from the counts below)
SELECT pg_temp.as_role('jobq_producer', $$SELECT jobq.enqueue('privw', '{}')$$) AS privw_parent \gset
SELECT pg_temp.as_role('jobq_producer', format($$SELECT jobq.enqueue('privw', '{}', depends_on => ARRAY[%s])$$, :privw_parent))
    AS privw_child \gset
SELECT is(pg_temp.as_role('jobq_producer', format($$SELECT jobq.status(%s)$$, :privw_child)),
          'waiting', 'jobq_producer: enqueue with depends_on and status work (the child waits)');
SELECT is(pg_temp.as_role('jobq_producer', format($$SELECT count(*) FROM jobq.enqueue_many('privw', ARRAY['{}', '{}']::jsonb[], depends_on => ARRAY[%s])$$, :privw_parent)),
          '2', 'jobq_producer: enqueue_many with depends_on works');
SELECT pg_temp.as_role('jobq_producer', format($$SELECT jobq.enqueue_callback('privw', '{}', ARRAY[%s])$$, :privw_parent))
    AS privw_callback \gset
SELECT is((SELECT status FROM jobq._job WHERE id = :privw_callback), 'waiting', 'jobq_producer: enqueue_callback works');
SELECT is(pg_temp.as_role('jobq_producer', format($$SELECT coalesce(jobq.result(%s)::text, 'none') || jobq.watch(%s)$$, :privw_parent, :privw_parent)),
          'noneready', 'jobq_producer: result and watch work');
SELECT is(pg_temp.as_role('jobq_producer', format($$SELECT count(*) FROM jobq.parent_results(%s)$$, :privw_child)),
          '1', 'jobq_producer: parent_results works');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_producer', 'SELECT jobq.complete(1, gen_random_uuid(), ''{}''::jsonb)')$$, '42501', NULL,
                 'jobq_producer: complete with a result is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_producer', 'SELECT count(*) FROM jobq.job_dependencies')$$, '42501', NULL,
                 'jobq_producer: reading jobq.job_dependencies is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_producer', 'SELECT count(*) FROM jobq._job_dep')$$, '42501', NULL,
                 'jobq_producer: reading jobq._job_dep is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_producer', 'SELECT count(*) FROM jobq.take(''priv'')')$$, '42501', NULL,
                 'jobq_producer: take is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_producer', 'SELECT count(*) FROM jobq.hold(''priv'')')$$, '42501', NULL,
                 'jobq_producer: hold is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_producer', 'SELECT jobq.complete_held(ARRAY[1]::bigint[])')$$, '42501', NULL,
                 'jobq_producer: complete_held is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_producer', 'SELECT jobq.fail_held(1, ''x'')')$$, '42501', NULL,
                 'jobq_producer: fail_held is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_producer', 'SELECT jobq.pause(''priv'')')$$, '42501', NULL,
                 'jobq_producer: pause is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_producer', 'SELECT count(*) FROM jobq.claim(''priv'')')$$, '42501', NULL,
                 'jobq_producer: claim is denied (42501)');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_producer', 'SELECT jobq.complete(1, gen_random_uuid())')$$, '42501', NULL,
                 'jobq_producer: complete is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_producer', 'SELECT jobq.cancel(1)')$$, '42501', NULL,
                 'jobq_producer: cancel is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_producer', 'SELECT count(*) FROM jobq._job')$$, '42501', NULL,
                 'jobq_producer: reading jobq._job is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_producer', 'SELECT count(*) FROM jobq.stats')$$, '42501', NULL,
                 'jobq_producer: reading jobq.stats is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_producer', 'INSERT INTO jobq._job (queue, payload, max_attempts) VALUES (''priv'', ''{}'', 1)')$$,
                 '42501', NULL, 'jobq_producer: inserting into jobq._job directly is denied');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'priv' AND status = 'ready'), 3, 'the denied calls changed nothing');

SELECT is(pg_temp.as_role('jobq_worker', $$SELECT count(*) FROM jobq.claim('priv', 2, 'w')$$), '2', 'jobq_worker: claim works');
SELECT is(pg_temp.as_role('jobq_worker',
              $$SELECT jobq.complete(c.id, c.lease_token) FROM jobq.claim('priv', 1, 'w') AS c$$), 'true',
          'jobq_worker: complete works');
SELECT is(pg_temp.as_role('jobq_worker', $$SELECT jobq.reap()$$), '0', 'jobq_worker: reap works');
SELECT is(pg_temp.as_role('jobq_worker', $$SELECT jobq.next_run_at(ARRAY['priv'])$$), NULL, 'jobq_worker: next_run_at works');
SELECT is(pg_temp.as_role('jobq_worker',
              $$SELECT jobq.snooze(c.id, c.lease_token, now() + interval '1 hour') FROM jobq.claim('privg', 1, 'w') AS c$$), 'true',
          'jobq_worker: snooze works');
SELECT is(pg_temp.as_role('jobq_worker', $$SELECT count(*) FROM jobq.take('priv', 5)$$), '0',
          'jobq_worker: take works (nothing ready: both priv jobs left are running)');
DO $$ BEGIN PERFORM jobq.enqueue_many('privh', ARRAY['{}', '{}']::jsonb[]); END $$;
SELECT is(pg_temp.as_role('jobq_worker',
              $$SELECT jobq.complete_held(ARRAY(SELECT h.id FROM jobq.hold('privh', 1) AS h))$$), '1',
          'jobq_worker: hold and complete_held work');
SELECT is(pg_temp.as_role('jobq_worker',
              $$SELECT jobq.fail_held(h.id, 'x') FROM jobq.hold('privh', 1) AS h$$), 'true',
          'jobq_worker: hold and fail_held work');
SELECT is((SELECT attempts FROM jobq._job WHERE queue = 'privh'), 1, 'the fail_held call as jobq_worker recorded the attempt');
SELECT is(pg_temp.as_role('jobq_worker',
              $$SELECT jobq.complete(c.id, c.lease_token, '{"r": 1}') FROM jobq.claim('privw', 1, 'w') AS c$$), 'true',
          'jobq_worker: complete with a result works (the parent)');
SELECT is(pg_temp.as_role('jobq_worker', format($$SELECT jobq.status(%s) || ' ' || jobq.result(%s)::text || ' ' || jobq.watch(%s + 1)$$,
                                                :privw_parent, :privw_parent, :privw_parent)),
          'completed {"r": 1} ready', 'jobq_worker: status, result and watch work (the child became ready)');
SELECT is(pg_temp.as_role('jobq_worker', format($$SELECT r.result::text FROM jobq.parent_results(%s) AS r$$, :privw_child)),
          '{"r": 1}', 'jobq_worker: parent_results works');
SELECT throws_ok(format($$SELECT pg_temp.as_role('jobq_worker', 'SELECT jobq.enqueue_callback(''privw'', ''{}'', ARRAY[%s]::bigint[])')$$, :privw_parent),
                 '42501', NULL, 'jobq_worker: enqueue_callback is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_worker', 'SELECT count(*) FROM jobq._job_wait')$$, '42501', NULL,
                 'jobq_worker: reading jobq._job_wait is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_worker', 'SELECT count(*) FROM jobq._counter')$$, '42501', NULL,
                 'jobq_worker: reading jobq._counter is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_worker', 'SELECT jobq.resume(''priv'')')$$, '42501', NULL,
                 'jobq_worker: resume is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_worker', 'SELECT jobq.enqueue_periodic(''nightly'')')$$, '42501', NULL,
                 'jobq_worker: enqueue_periodic is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_worker', 'SELECT count(*) FROM jobq._rate_start')$$, '42501', NULL,
                 'jobq_worker: reading jobq._rate_start is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_worker', 'SELECT jobq.enqueue(''priv'', ''{}'')')$$, '42501', NULL,
                 'jobq_worker: enqueue is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_worker', 'SELECT jobq.retry_dead(''priv'')')$$, '42501', NULL,
                 'jobq_worker: retry_dead is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_worker', 'SELECT count(*) FROM jobq._job')$$, '42501', NULL,
                 'jobq_worker: reading jobq._job is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_worker', 'UPDATE jobq._job SET lease_expires_at = now()')$$, '42501', NULL,
                 'jobq_worker: updating jobq._job directly is denied');

SELECT is(pg_temp.as_role('jobq_admin', $$SELECT jobq.cancel(jobq.enqueue('priv', '{}'))$$), 'true',
          'jobq_admin: enqueue and cancel work');
SELECT is(pg_temp.as_role('jobq_admin', $$SELECT count(*) FROM jobq.claim('priv', 10)$$), '0', 'jobq_admin: claim works');
SELECT is(pg_temp.as_role('jobq_admin', $$SELECT (jobq.configure_queue('priv', lease => interval '1 minute')).lease$$), '00:01:00',
          'jobq_admin: configure_queue works');
SELECT is(pg_temp.as_role('jobq_admin', $$SELECT lease FROM jobq.queues WHERE queue = 'priv'$$), '00:01:00',
          'jobq_admin: reading jobq.queues works');
SELECT is(pg_temp.as_role('jobq_admin', $$SELECT running FROM jobq.stats WHERE queue = 'priv'$$), '2',
          'jobq_admin: reading jobq.stats works');
SELECT is(pg_temp.as_role('jobq_admin', $$SELECT count(*) FROM jobq.jobs WHERE queue = 'priv'$$), '3',
          'jobq_admin: reading jobq.jobs works (2 running, 1 cancelled; the completed job left no history)');
SELECT is(pg_temp.as_role('jobq_admin', $$SELECT completed_total FROM jobq.stats WHERE queue = 'priv'$$), '1',
          'jobq_admin: reading the totals of jobq.stats works');
SELECT is(pg_temp.as_role('jobq_admin', $$SELECT sum(completed) FROM jobq._counter WHERE queue = 'priv'$$), '1',
          'jobq_admin: reading jobq._counter works');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_admin', 'DELETE FROM jobq._counter')$$, '42501', NULL,
                 'jobq_admin: deleting from jobq._counter directly is denied');
SELECT is(pg_temp.as_role('jobq_admin', $$SELECT jobq.prune() + jobq.retry_dead('priv')$$), '0',
          'jobq_admin: prune and retry_dead work');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_admin', 'DELETE FROM jobq._job')$$, '42501', NULL,
                 'jobq_admin: deleting from jobq._job directly is denied');
SELECT is(pg_temp.as_role('jobq_admin', $$SELECT jobq.pause('priv')::text || jobq.resume('priv')::text$$), 'truetrue',
          'jobq_admin: pause and resume work');
SELECT is(pg_temp.as_role('jobq_admin', $$SELECT (jobq.configure_queue('priv', concurrency => 2, rate_limit => 10)).concurrency$$), '2',
          'jobq_admin: configure_queue with concurrency and rate_limit works');
SELECT is(pg_temp.as_role('jobq_admin', $$SELECT count(*) FROM jobq.schedules$$), '0', 'jobq_admin: reading jobq.schedules works');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_admin', 'DELETE FROM jobq._periodic')$$, '42501', NULL,
                 'jobq_admin: deleting from jobq._periodic directly is denied');

SELECT throws_ok($$SELECT pg_temp.as_role('jobq_test_nobody', 'SELECT jobq.version()')$$, '42501', NULL,
                 'a role without a jobq role cannot even call version()');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_test_nobody', 'SELECT count(*) FROM jobq.hold(''privh'')')$$, '42501', NULL,
                 'a role without a jobq role cannot hold');

SELECT * FROM finish();
ROLLBACK;

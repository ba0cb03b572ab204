-- What jobq shows of itself (since 0.5.0):
-- the jobq_viewer role, jobq.metrics(), the error history (jobq.job_errors),
-- heartbeat_at, the workers and throughput views, run_now, and the indexes
-- that keep jobq.jobs paging on an index on both of its halves.
BEGIN;
SELECT plan(94);

CREATE FUNCTION pg_temp.as_role(p_role text, p_sql text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_result text;
BEGIN
    -- p_sql's first value, run as p_role (the role is switched back after).
    EXECUTE format('SET LOCAL ROLE %I', p_role);
    EXECUTE p_sql INTO v_result;
    RESET ROLE;
    RETURN v_result;
END
$$;

-- jobq_viewer: the views and metrics(), nothing else ---------------------------------------------
SELECT has_role('jobq_viewer', 'role jobq_viewer exists');
SELECT ok(NOT (SELECT rolcanlogin FROM pg_catalog.pg_roles WHERE rolname = 'jobq_viewer'), 'jobq_viewer is NOLOGIN');
SELECT ok(pg_has_role('jobq_admin', 'jobq_viewer', 'USAGE'), 'jobq_admin is a member of jobq_viewer');
SELECT ok(NOT pg_has_role('jobq_viewer', 'jobq_admin', 'USAGE') AND NOT pg_has_role('jobq_viewer', 'jobq_worker', 'USAGE')
          AND NOT pg_has_role('jobq_viewer', 'jobq_producer', 'USAGE'), 'jobq_viewer is a member of no other jobq role');
SELECT ok(has_schema_privilege('jobq_viewer', 'jobq', 'USAGE'), 'jobq_viewer may use schema jobq');
SELECT ok(NOT has_schema_privilege('jobq_viewer', 'jobq', 'CREATE'), 'jobq_viewer may not create in schema jobq');
SELECT function_privs_are('jobq', 'version', ARRAY[]::text[], 'jobq_viewer', ARRAY['EXECUTE'],
                          'function_privs_are: jobq_viewer may execute version()');
SELECT function_privs_are('jobq', 'metrics', ARRAY[]::text[], 'jobq_viewer', ARRAY['EXECUTE'],
                          'function_privs_are: jobq_viewer may execute metrics()');
SELECT function_privs_are('jobq', 'metrics', ARRAY[]::text[], 'jobq_worker', ARRAY['EXECUTE'],
                          'function_privs_are: jobq_worker may execute metrics()');
SELECT function_privs_are('jobq', 'metrics', ARRAY[]::text[], 'jobq_admin', ARRAY['EXECUTE'],
                          'function_privs_are: jobq_admin may execute metrics()');
SELECT function_privs_are('jobq', 'metrics', ARRAY[]::text[], 'public', ARRAY[]::text[],
                          'function_privs_are: PUBLIC may not execute metrics()');
SELECT function_privs_are('jobq', 'run_now', ARRAY['bigint'], 'jobq_viewer', ARRAY[]::text[],
                          'function_privs_are: jobq_viewer may not execute run_now()');
SELECT function_privs_are('jobq', 'run_now', ARRAY['bigint'], 'jobq_worker', ARRAY[]::text[],
                          'function_privs_are: jobq_worker may not execute run_now()');
SELECT function_privs_are('jobq', 'run_now', ARRAY['bigint'], 'jobq_admin', ARRAY['EXECUTE'],
                          'function_privs_are: jobq_admin may execute run_now()');
SELECT function_privs_are('jobq', 'enqueue', ARRAY['text', 'jsonb', 'timestamp with time zone', 'integer', 'integer', 'text', 'text', 'interval', 'interval', 'bigint[]', 'text', 'jsonb', 'text', 'text'],
                          'jobq_viewer', ARRAY[]::text[], 'function_privs_are: jobq_viewer may not execute enqueue()');
SELECT function_privs_are('jobq', 'claim', ARRAY['text', 'bigint', 'text', 'interval'], 'jobq_viewer', ARRAY[]::text[],
                          'function_privs_are: jobq_viewer may not execute claim()');
SELECT function_privs_are('jobq', 'retry', ARRAY['bigint'], 'jobq_viewer', ARRAY[]::text[],
                          'function_privs_are: jobq_viewer may not execute retry()');
SELECT function_privs_are('jobq', 'pause', ARRAY['text'], 'jobq_viewer', ARRAY[]::text[],
                          'function_privs_are: jobq_viewer may not execute pause()');
SELECT set_eq($$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
                WHERE p.pronamespace = 'jobq'::regnamespace AND has_function_privilege('jobq_viewer', p.oid, 'EXECUTE')$$,
              ARRAY['jobq.version()', 'jobq.metrics()', 'jobq._queue_counts()', 'jobq._running()'],
              'jobq_viewer may execute exactly version() and metrics(), and the two helpers jobq.stats and jobq.workers read (since 0.9.0)');
SELECT table_privs_are('jobq', v, 'jobq_viewer', ARRAY['SELECT'], format('table_privs_are: jobq_viewer may read jobq.%s', v))
FROM unnest(ARRAY['stats', 'jobs', 'queues', 'schedules', 'workers', 'throughput', 'job_errors', 'job_dependencies']) AS v;
SELECT set_eq($$SELECT c.relname::text FROM pg_catalog.pg_class AS c
                WHERE c.relnamespace = 'jobq'::regnamespace
                  AND has_table_privilege('jobq_viewer', c.oid, 'SELECT,INSERT,UPDATE,DELETE,TRUNCATE,REFERENCES,TRIGGER')$$,
              ARRAY['stats', 'jobs', 'queues', 'schedules', 'workers', 'throughput', 'job_errors', 'job_dependencies',
                    'archive_partitions', 'queue_grants', 'fair_keys'],
              'jobq_viewer has a privilege on exactly the eleven public views incl. job_dependencies, archive_partitions, queue_grants and fair_keys (no private table or view)');
SELECT table_privs_are('jobq', '_job', 'jobq_viewer', ARRAY[]::text[], 'table_privs_are: jobq_viewer has nothing on jobq._job');
SELECT table_privs_are('jobq', '_job_error', 'jobq_viewer', ARRAY[]::text[],
                       'table_privs_are: jobq_viewer has nothing on jobq._job_error');
SELECT table_privs_are('jobq', '_job_error', 'jobq_admin', ARRAY['SELECT'], 'table_privs_are: jobq_admin reads jobq._job_error');
SELECT table_privs_are('jobq', v, 'public', ARRAY[]::text[], format('table_privs_are: PUBLIC has nothing on jobq.%s', v))
FROM unnest(ARRAY['workers', 'throughput', 'job_errors', '_job_error', '_queue_defaults']) AS v;
SELECT is_definer('jobq', 'metrics', ARRAY[]::text[], 'metrics() is SECURITY DEFINER (it reads private tables)');
SELECT is_definer('jobq', 'run_now', ARRAY['bigint'], 'run_now() is SECURITY DEFINER');
SELECT is((SELECT proconfig FROM pg_catalog.pg_proc WHERE oid = 'jobq.metrics()'::regprocedure),
          ARRAY['search_path=pg_catalog, pg_temp'], 'metrics() pins its search_path');

-- metrics() ---------------------------------------------------------------------------------------
SELECT jobq.configure_queue('mq', max_attempts => 2, backoff_base => '0');
SELECT jobq.configure_queue('mempty');
SELECT jobq.enqueue('mq', '{}', run_at => now() - interval '30 seconds');
SELECT jobq.enqueue('mq', '{}', run_at => now() + interval '1 hour');
SELECT jobq.enqueue('mq', '{}') FROM generate_series(1, 2);
SELECT ok(jobq.complete(c.id, c.lease_token), 'setup: one job completes') FROM jobq.claim('mq') AS c;
CREATE TEMP TABLE mc AS SELECT * FROM jobq.claim('mq', 2, 'm-worker');
SELECT ok(bool_and(jobq.fail(c.id, 'first', c.lease_token)), 'setup: two jobs fail once') FROM mc AS c;
UPDATE jobq._job SET run_at = now() - interval '1 second' WHERE id IN (SELECT id FROM mc);
SELECT ok(bool_and(jobq.fail(c.id, 'second', c.lease_token)), 'setup: and again, out of attempts: dead')
FROM jobq.claim('mq', 2, 'm-worker') AS c;
SELECT results_eq(
    $$SELECT name, labels, value FROM jobq.metrics() WHERE labels->>'queue' = 'mq'$$,
    $$VALUES ('jobq_completed_total', '{"queue": "mq"}'::jsonb, 1::double precision),
             ('jobq_dead_total', '{"queue": "mq"}', 2),
             ('jobq_failed_total', '{"queue": "mq"}', 4),
             ('jobq_jobs', '{"queue": "mq", "state": "dead"}', 2),
             ('jobq_jobs', '{"queue": "mq", "state": "ready"}', 0),
             ('jobq_jobs', '{"queue": "mq", "state": "running"}', 0),
             ('jobq_jobs', '{"queue": "mq", "state": "scheduled"}', 1),
             ('jobq_jobs', '{"queue": "mq", "state": "waiting"}', 0),
             ('jobq_oldest_ready_age_seconds', '{"queue": "mq"}', 0)$$,
    'metrics(): the counts and totals of a queue, in (name, labels) order');
SELECT is((SELECT value FROM jobq.metrics() WHERE name = 'jobq_oldest_ready_age_seconds' AND labels = '{"queue": "mq"}'),
          0::double precision, 'metrics(): oldest ready age is 0 when nothing is ready');
SELECT jobq.enqueue('mq', '{}', run_at => now() - interval '30 seconds');
SELECT cmp_ok((SELECT value FROM jobq.metrics() WHERE name = 'jobq_oldest_ready_age_seconds' AND labels = '{"queue": "mq"}'),
              '>=', 30::double precision, 'metrics(): the oldest ready job''s age in seconds');
SELECT results_eq(
    $$SELECT name, labels, value FROM jobq.metrics() WHERE labels->>'queue' = 'mempty'$$,
    $$VALUES ('jobq_completed_total', '{"queue": "mempty"}'::jsonb, 0::double precision),
             ('jobq_dead_total', '{"queue": "mempty"}', 0),
             ('jobq_failed_total', '{"queue": "mempty"}', 0),
             ('jobq_jobs', '{"queue": "mempty", "state": "dead"}', 0),
             ('jobq_jobs', '{"queue": "mempty", "state": "ready"}', 0),
             ('jobq_jobs', '{"queue": "mempty", "state": "running"}', 0),
             ('jobq_jobs', '{"queue": "mempty", "state": "scheduled"}', 0),
             ('jobq_jobs', '{"queue": "mempty", "state": "waiting"}', 0),
             ('jobq_oldest_ready_age_seconds', '{"queue": "mempty"}', 0)$$,
    'metrics(): a configured queue without jobs has every row, zeros included');
SELECT is((SELECT array_agg(name || labels::text) FROM jobq.metrics()),
          (SELECT array_agg(name || labels::text ORDER BY name, labels) FROM jobq.metrics()),
          'metrics() rows come ordered by name, then labels');
SELECT is(jobq.discard_dead('mq'), 2, 'setup: the dead jobs are discarded');
SELECT is((SELECT value FROM jobq.metrics() WHERE name = 'jobq_dead_total' AND labels = '{"queue": "mq"}'),
          2::double precision, 'metrics(): totals survive the history going away (the counters never reset)');

-- the error history ------------------------------------------------------------------------------
SELECT jobq.configure_queue('eq', max_attempts => 30, backoff_base => '0', retention => '0');
CREATE TEMP TABLE ej AS SELECT jobq.enqueue('eq', '{}') AS id;
SELECT jobq.fail(c.id, 'boom ' || c.attempts, c.lease_token) FROM jobq.claim('eq', 1, 'e-worker') AS c;
SELECT results_eq($$SELECT job_id, attempt, error, worker FROM jobq.job_errors WHERE job_id = (SELECT id FROM ej)$$,
                  $$SELECT id, 1, 'boom 1'::text, 'e-worker'::text FROM ej$$,
                  'fail records its error, attempt and worker in jobq.job_errors');
-- 29 more failed attempts (the last one dead-letters the job): 30 in all
DO $$
DECLARE
    v_job record;
BEGIN
    FOR i IN 2..30 LOOP
        UPDATE jobq._job SET run_at = now() - interval '1 second' WHERE queue = 'eq';
        SELECT * INTO v_job FROM jobq.claim('eq', 1, 'e-worker');
        PERFORM jobq.fail(v_job.id, 'boom ' || v_job.attempts, v_job.lease_token);
    END LOOP;
END
$$;
SELECT is((SELECT status FROM jobq.jobs WHERE id = (SELECT id FROM ej)), 'dead', 'setup: the job is dead after 30 attempts');
SELECT results_eq($$SELECT count(*)::int, min(attempt), max(attempt) FROM jobq.job_errors WHERE job_id = (SELECT id FROM ej)$$,
                  $$VALUES (25, 6, 30)$$, 'the history keeps the last 25 attempts of a job');
SELECT is((SELECT error FROM jobq.job_errors WHERE job_id = (SELECT id FROM ej) ORDER BY failed_at DESC LIMIT 1),
          (SELECT last_error FROM jobq.jobs WHERE id = (SELECT id FROM ej)), 'its newest error is last_error');
SELECT ok(jobq.retry((SELECT id FROM ej)), 'setup: retry the dead job');
SELECT is((SELECT count(*)::int FROM jobq.job_errors WHERE job_id = (SELECT id FROM ej)), 25, 'a retried job keeps its history');
SELECT ok(jobq.complete(c.id, c.lease_token), 'setup: it completes (no retention)') FROM jobq.claim('eq') AS c;
SELECT is((SELECT count(*)::int FROM jobq.job_errors WHERE job_id = (SELECT id FROM ej)), 0,
          'a job completed without history takes its errors with it');
-- the same when another queue keeps history (the path that copies finished rows)
SELECT jobq.configure_queue('ekeep', retention => '1 day');
CREATE TEMP TABLE kj AS SELECT jobq.enqueue('ekeep', '{}') AS id, jobq.enqueue('eq', '{}') AS gone_id;
SELECT jobq.fail(c.id, 'kept boom', c.lease_token) FROM jobq.claim('{ekeep,eq}', 2) AS c;
UPDATE jobq._job SET run_at = now() - interval '1 second' WHERE queue IN ('ekeep', 'eq');
SELECT is((SELECT count(*)::int FROM jobq.claim('{ekeep,eq}', 2) AS c WHERE jobq.complete(c.id, c.lease_token)), 2,
          'setup: both complete, one queue keeping history');
SELECT results_eq($$SELECT job_id, error FROM jobq.job_errors WHERE job_id IN (SELECT id FROM kj UNION ALL SELECT gone_id FROM kj)$$,
                  $$SELECT id, 'kept boom'::text FROM kj$$,
                  'the archived job keeps its errors, the one that left no history has none');

-- fail_held, reap, prune, discard_dead
CREATE TEMP TABLE hj AS SELECT jobq.enqueue('eh', '{}', max_attempts => 5) AS id;
SELECT ok(jobq.fail_held(h.id, 'held boom'), 'setup: fail_held a held job') FROM jobq.hold('eh') AS h;
SELECT results_eq($$SELECT attempt, error, worker = session_user FROM jobq.job_errors WHERE job_id = (SELECT id FROM hj)$$,
                  $$VALUES (1, 'held boom'::text, true)$$, 'fail_held records its error (worker: session_user)');
CREATE TEMP TABLE rj AS SELECT jobq.enqueue('er', '{}', max_attempts => 1) AS id;
SELECT id FROM jobq.claim('er', 1, 'r-worker');
UPDATE jobq._job SET lease_expires_at = now() - interval '1 second' WHERE id = (SELECT id FROM rj);
SELECT is(jobq.reap(), 1, 'setup: reap the expired lease (out of attempts: dead)');
SELECT results_eq($$SELECT attempt, worker, error ~ '^lease expired at .* \(worker r-worker\)\nno attempts left$'
                    FROM jobq.job_errors WHERE job_id = (SELECT id FROM rj)$$,
                  $$VALUES (1, 'r-worker'::text, true)$$, 'reap records the lease expiry as the attempt''s error');
SELECT is(jobq.discard_dead('er'), 1, 'setup: discard the dead job');
SELECT is((SELECT count(*)::int FROM jobq._job_error WHERE job_id = (SELECT id FROM rj)), 0,
          'discard_dead deletes the job''s error history');
CREATE TEMP TABLE pj AS SELECT jobq.enqueue('ep', '{}', max_attempts => 1) AS id;
SELECT jobq.fail(c.id, 'pruned boom', c.lease_token) FROM jobq.claim('ep') AS c;
UPDATE jobq._job_archive SET prune_after = now() - interval '2 days' WHERE id = (SELECT id FROM pj);
SELECT cmp_ok(jobq.prune(), '>=', 1, 'setup: prune the dead job past its retention');
SELECT is((SELECT count(*)::int FROM jobq._job_error WHERE job_id = (SELECT id FROM pj)), 0,
          'prune deletes the job''s error history');
SELECT is_empty($$SELECT e.job_id FROM jobq._job_error AS e
                  WHERE NOT EXISTS (SELECT FROM jobq._job AS j WHERE j.id = e.job_id)
                    AND NOT EXISTS (SELECT FROM jobq._job_archive AS a WHERE a.id = e.job_id)$$,
                'no error outlives its job');

-- heartbeat_at and jobq.workers -------------------------------------------------------------------
SELECT jobq.enqueue('wq', '{}') FROM generate_series(1, 3);
SELECT jobq.enqueue('wr', '{}');
CREATE TEMP TABLE wc AS SELECT * FROM jobq.claim('{wq,wr}', 4, 'w-one');
SELECT is((SELECT count(*)::int FROM jobq.jobs WHERE queue IN ('wq', 'wr') AND heartbeat_at IS NOT NULL), 0,
          'a claimed job has no heartbeat_at before its first heartbeat');
SELECT results_eq($$SELECT worker, queues, jobs, last_heartbeat_at FROM jobq.workers WHERE worker = 'w-one'$$,
                  $$VALUES ('w-one'::text, ARRAY['wq', 'wr'], 4::bigint, NULL::timestamptz)$$,
                  'jobq.workers: one row per worker, its queues and job count, no heartbeat yet');
SELECT ok(jobq.heartbeat(c.id, c.lease_token), 'setup: heartbeat one job') FROM wc AS c WHERE c.queue = 'wr';
SELECT results_eq($$SELECT heartbeat_at IS NOT NULL, heartbeat_at <= clock_timestamp() FROM jobq.jobs WHERE queue = 'wr'$$,
                  $$VALUES (true, true)$$, 'heartbeat sets heartbeat_at');
SELECT results_eq($$SELECT w.last_heartbeat_at, w.oldest_started_at, w.next_lease_expires_at
                    FROM jobq.workers AS w WHERE w.worker = 'w-one'$$,
                  $$SELECT max(j.heartbeat_at), min(j.started_at), min(j.lease_expires_at)
                    FROM jobq.jobs AS j WHERE j.worker = 'w-one' AND j.status = 'running'$$,
                  'jobq.workers: last heartbeat, oldest start and next lease expiry of the worker''s jobs');
SELECT ok(jobq.release(c.id, c.lease_token), 'setup: release the heart-beaten job') FROM wc AS c WHERE c.queue = 'wr';
SELECT is((SELECT heartbeat_at FROM jobq.jobs WHERE queue = 'wr'), NULL, 'a job no longer running has no heartbeat_at');
SELECT is((SELECT jobs FROM jobq.workers WHERE worker = 'w-one'), 3::bigint, 'jobq.workers counts running jobs only');
SELECT is(ARRAY(SELECT attname::text FROM pg_catalog.pg_attribute WHERE attrelid = 'jobq.jobs'::regclass AND attnum > 0
                ORDER BY attnum DESC LIMIT 5), ARRAY['meta', 'progress', 'cancelled_by', 'result', 'heartbeat_at'],
          'heartbeat_at is the last column of jobq.jobs before 0.6.0''s result and cancelled_by, 0.11.0''s progress and 0.12.0''s meta');
SELECT is_empty($$SELECT i.indexrelid::regclass::text FROM pg_catalog.pg_index AS i
                  WHERE i.indrelid = 'jobq._job'::regclass
                    AND (SELECT attnum FROM pg_catalog.pg_attribute WHERE attrelid = 'jobq._job'::regclass AND attname = 'heartbeat_at')
                        = ANY (i.indkey::int2[])$$,
                'heartbeat_at is in no index (claims and heartbeats stay HOT)');

-- jobq.throughput ---------------------------------------------------------------------------------
INSERT INTO jobq._counter (queue, bucket, completed, failed, dead) VALUES
    ('tq', date_trunc('minute', now()), 3, 1, 0),
    ('tq', date_trunc('minute', now()), 2, 0, 1),
    ('tq', date_trunc('minute', now()) - interval '59 minutes', 7, 0, 0),
    ('tq', date_trunc('minute', now()) - interval '60 minutes', 100, 100, 100),
    ('tq', '-infinity', 1000, 1000, 1000);
SELECT results_eq($$SELECT minute, completed, failed, dead FROM jobq.throughput WHERE queue = 'tq' ORDER BY minute$$,
                  $$VALUES (date_trunc('minute', now()) - interval '59 minutes', 7::bigint, 0::bigint, 0::bigint),
                           (date_trunc('minute', now()), 5, 1, 1)$$,
                  'jobq.throughput: per minute over the last 60 minutes, unfolded rows summed');
SELECT jobq.prune();
SELECT results_eq($$SELECT minute, completed, failed, dead FROM jobq.throughput WHERE queue = 'tq' ORDER BY minute$$,
                  $$VALUES (date_trunc('minute', now()) - interval '59 minutes', 7::bigint, 0::bigint, 0::bigint),
                           (date_trunc('minute', now()), 5, 1, 1)$$,
                  'jobq.throughput: the same after the counters are folded');

-- run_now ----------------------------------------------------------------------------------------
CREATE TEMP TABLE sj AS SELECT jobq.enqueue('rn', '{}', run_at => now() + interval '1 day') AS id;
SELECT is((SELECT status FROM jobq.jobs WHERE id = (SELECT id FROM sj)), 'scheduled', 'setup: a scheduled job');
SELECT ok(jobq.run_now((SELECT id FROM sj)), 'run_now of a scheduled job is true');
SELECT results_eq($$SELECT status, run_at FROM jobq.jobs WHERE id = (SELECT id FROM sj)$$,
                  $$VALUES ('ready'::text, now())$$, '... and it is ready now (run_at = now())');
SELECT ok(NOT jobq.run_now((SELECT id FROM sj)), 'run_now of a job already ready is false');
SELECT ok(NOT jobq.run_now(-1), 'run_now of an unknown id is false');
SELECT ok(NOT jobq.run_now((SELECT id FROM ej)), 'run_now of a finished (completed) id is false');
SELECT throws_ok($$SELECT jobq.run_now(NULL)$$, 'JQ010', NULL, 'run_now(NULL): JQ010');

-- as jobq_viewer ---------------------------------------------------------------------------------
SELECT is(pg_temp.as_role('jobq_viewer',
              $$SELECT (SELECT count(*) FROM jobq.stats) + (SELECT count(*) FROM jobq.jobs) + (SELECT count(*) FROM jobq.queues)
                     + (SELECT count(*) FROM jobq.schedules) + (SELECT count(*) FROM jobq.workers)
                     + (SELECT count(*) FROM jobq.throughput) + (SELECT count(*) FROM jobq.job_errors) > 0$$),
          'true', 'jobq_viewer reads every view (jobq.queues included: it calls no private function)');
SELECT is(pg_temp.as_role('jobq_viewer', $$SELECT count(*) > 0 FROM jobq.metrics()$$), 'true', 'jobq_viewer runs metrics()');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_viewer', 'SELECT jobq.run_now(1)')$$, '42501', NULL,
                 'jobq_viewer: run_now is denied');
SELECT throws_ok($$SELECT pg_temp.as_role('jobq_viewer', 'SELECT count(*) FROM jobq._job_error')$$, '42501', NULL,
                 'jobq_viewer: reading jobq._job_error is denied');

-- paging jobq.jobs: an index on both halves -------------------------------------------------------
-- (since 0.7.0 each partition of the archive has them; archive_partitions.sql checks a day's)
SELECT has_index('jobq', '_job_archive_kept', '_job_archive_kept_queue_idx', ARRAY['queue', 'id'],
                 'the archive (its default partition) has an index on (queue, id)');
SELECT has_index('jobq', '_job_archive_kept', '_job_archive_kept_key_idx', ARRAY['queue', 'job_key', 'id'],
                 'the archive (its default partition) has an index on (queue, job_key, id)');
SET LOCAL enable_seqscan = off;
SET LOCAL enable_sort = off;
CREATE FUNCTION pg_temp.plan_of(p_sql text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_line text;
    v_plan text := '';
BEGIN
    -- The EXPLAIN text of p_sql, one string.
    FOR v_line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || p_sql LOOP
        v_plan := v_plan || v_line || E'\n';
    END LOOP;
    RETURN v_plan;
END
$$;
SELECT alike(pg_temp.plan_of($$SELECT id FROM jobq.jobs WHERE queue = 'eq' AND id < 100 ORDER BY id DESC LIMIT 51$$),
            '%Merge Append%Index Scan Backward using _job_pkey on _job %Scan Backward using _job_archive_%',
            'a page of jobq.jobs newest first merges two backward index scans (no sort, no seq scan)');

SELECT * FROM finish();
ROLLBACK;

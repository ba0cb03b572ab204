-- Running jobs under control (0.11.0, issue 26): jobq.cancel() and
-- jobq.cancel_jobs() of a running job NOTIFY jobq_cancel with 'id:lease_token'
-- pairs (its holder stops at once); jobq.progress() stores a running job's
-- progress, fenced by the lease token, capped like payloads. Pending
-- notifications are invisible before commit: the notifying functions are
-- pointed at a spy pg_notify() for this rolled-back transaction.
BEGIN;
SELECT plan(37);

CREATE SCHEMA jobq_spy;
CREATE TABLE jobq_spy.calls (n serial PRIMARY KEY, channel text, payload text);
CREATE FUNCTION jobq_spy.pg_notify(channel text, payload text) RETURNS void
LANGUAGE sql AS $$ INSERT INTO jobq_spy.calls (channel, payload) VALUES (channel, payload) $$;
DO $$
DECLARE
    v_fn regprocedure;
BEGIN
    FOR v_fn IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc AS p
                WHERE p.pronamespace = 'jobq'::regnamespace AND p.prosrc ~ 'pg_notify' LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = jobq_spy, pg_catalog, pg_temp', v_fn);
    END LOOP;
END $$;
CREATE VIEW cancels AS SELECT payload FROM jobq_spy.calls WHERE channel = 'jobq_cancel' ORDER BY n;

-- the catalog
SELECT has_function('jobq', 'progress', ARRAY['bigint', 'uuid', 'jsonb'], 'jobq.progress(bigint, uuid, jsonb) exists');
SELECT function_returns('jobq', 'progress', ARRAY['bigint', 'uuid', 'jsonb'], 'boolean', 'and returns boolean');
SELECT is_definer('jobq', 'progress', ARRAY['bigint', 'uuid', 'jsonb'], 'jobq.progress is SECURITY DEFINER');
SELECT ok(has_function_privilege('jobq_worker', 'jobq.progress(bigint, uuid, jsonb)', 'EXECUTE')
          AND NOT has_function_privilege('jobq_producer', 'jobq.progress(bigint, uuid, jsonb)', 'EXECUTE')
          AND NOT has_function_privilege('jobq_viewer', 'jobq.progress(bigint, uuid, jsonb)', 'EXECUTE'),
          'jobq_worker may report progress; producers and viewers may not');
SELECT has_column('jobq', '_job', 'progress', 'jobq._job has a progress column');
SELECT has_column('jobq', 'jobs', 'progress', 'jobq.jobs shows progress');
SELECT ok(EXISTS (SELECT FROM pg_catalog.pg_attribute AS a
                  WHERE a.attrelid = 'jobq.job'::regclass AND a.attname = 'progress' AND NOT a.attisdropped),
          'the claim row (jobq.job) has progress');

-- progress: fenced, shown, kept for the next attempt
SELECT jobq.enqueue('rj', '{"n": 1}', max_attempts => 3) AS id \gset
CREATE TEMP TABLE c1 AS SELECT * FROM jobq.claim('rj', 1, 'w1');
SELECT is((SELECT progress FROM c1), NULL::jsonb, 'a job claimed for the first time has no progress');
SELECT is(jobq.progress(:id, (SELECT lease_token FROM c1), '{"done": 3, "of": 10}'), true,
          'progress by the holder returns true');
SELECT is((SELECT progress FROM jobq.jobs WHERE id = :id), '{"done": 3, "of": 10}'::jsonb, 'jobq.jobs shows it');
SELECT is(jobq.progress(:id, (SELECT lease_token FROM c1), '0.5'), true, 'any JSON value will do (a number)');
SELECT is(jobq.progress(:id, (SELECT lease_token FROM c1), '{"done": 7, "of": 10}'), true, 'the latest value wins');
CREATE TEMP TABLE before_stale AS SELECT to_jsonb(j) AS row FROM jobq._job AS j WHERE id = :id;
SELECT is(jobq.progress(:id, gen_random_uuid(), '{"done": 99}'), false, 'a stale lease token gets false');
SELECT is((SELECT to_jsonb(j) FROM jobq._job AS j WHERE id = :id), (SELECT row FROM before_stale),
          'and changes nothing');
SELECT is((SELECT lease_expires_at FROM jobq._job WHERE id = :id), (SELECT lease_expires_at FROM c1),
          'progress extends no lease');
SELECT is(jobq.progress(-1, gen_random_uuid(), '{}'), false, 'an unknown id gets false');
SELECT ok(jobq.fail(:id, 'boom', (SELECT lease_token FROM c1), now() - interval '1 second'), 'setup: the attempt fails');
SELECT is(jobq.progress(:id, (SELECT lease_token FROM c1), '{"done": 8}'), false,
          'progress on a job that is not running (its lease gone) gets false');
CREATE TEMP TABLE c2 AS SELECT * FROM jobq.claim('rj', 1, 'w2');
SELECT is((SELECT progress FROM c2), '{"done": 7, "of": 10}'::jsonb,
          'the next attempt''s claim returns the last progress reported');
SELECT is(jobq.progress(:id, (SELECT lease_token FROM c2), NULL), true, 'NULL clears it');
SELECT is((SELECT progress FROM jobq.jobs WHERE id = :id), NULL::jsonb, 'and jobq.jobs shows none');

-- progress: bad input
SELECT throws_ok(format('SELECT jobq.progress(NULL, %L, %L)', (SELECT lease_token FROM c2), '{}'),
                 'JQ010', 'jobq: id must not be NULL', 'a NULL id raises JQ010');
SELECT throws_ok(format('SELECT jobq.progress(%s, NULL, %L)', :id, '{}'),
                 'JQ010', 'jobq: lease_token must not be NULL', 'a NULL lease token raises JQ010');
SELECT max_payload_bytes FROM jobq.configure_queue('rj', max_payload_bytes => 100) \gset
SELECT throws_like(format('SELECT jobq.progress(%s, %L, %L)', :id, (SELECT lease_token FROM c2),
                          jsonb_build_object('log', repeat('x', 500))),
                   'jobq: progress is % bytes, over the queue''s cap of 100 bytes',
                   'a value over the queue''s max_payload_bytes raises JQ003, naming progress');
SELECT is((SELECT progress FROM jobq._job WHERE id = :id), NULL::jsonb, 'and stores nothing');
SELECT throws_ok(format('SELECT jobq.progress(%s, %L, %L)', :id, gen_random_uuid(),
                        jsonb_build_object('log', repeat('x', 500))),
                 'JQ003', NULL, 'over the cap raises JQ003 even with a stale token (the error does not depend on the lease)');

-- cancel of a running job notifies its holder, on jobq_cancel only
TRUNCATE jobq_spy.calls;
SELECT ok(jobq.cancel(:id), 'cancel of the running job returns true');
SELECT results_eq($$SELECT payload FROM cancels$$,
                  ARRAY[:id || ':' || (SELECT lease_token FROM c2)::text],
                  'cancel of a running job sends one jobq_cancel with id:lease_token');
SELECT is((SELECT count(*)::int FROM jobq_spy.calls WHERE channel <> 'jobq_cancel'), 0,
          'and nothing on other channels');
TRUNCATE jobq_spy.calls;
SELECT jobq.enqueue('rj', '{"n": 2}') AS ready_id \gset
SELECT ok(jobq.cancel(:ready_id) AND NOT jobq.cancel(:id) AND NOT jobq.cancel(-1),
          'setup: cancel a ready job, a finished one and an unknown id');
SELECT is((SELECT count(*)::int FROM cancels), 0, 'none of those notifies a worker');
SELECT throws_ok('SELECT jobq.cancel(NULL)', 'JQ010', 'jobq: id must not be NULL', 'cancel(NULL) raises JQ010');

-- cancel_jobs: the running ones, 100 pairs per notification
TRUNCATE jobq_spy.calls;
SELECT max_payload_bytes FROM jobq.configure_queue('rj', max_payload_bytes => 65536) \gset
SELECT count(*) AS n FROM jobq.enqueue_many('rj', array_fill('{}'::jsonb, ARRAY[250])) \gset
CREATE TEMP TABLE c3 AS SELECT * FROM jobq.claim('rj', 1000, 'w3');
SELECT count(*) AS n FROM jobq.enqueue_many('rj', array_fill('{}'::jsonb, ARRAY[5])) \gset
TRUNCATE jobq_spy.calls;
SELECT is(jobq.cancel_jobs('rj', 'running'), 250, 'cancel_jobs(queue, ''running'') cancels the 250 running jobs');
SELECT results_eq(
    $$SELECT array_length(string_to_array(payload, ' '), 1) FROM cancels$$,
    ARRAY[100, 100, 50], 'in three notifications of at most 100 pairs');
SELECT set_eq(
    $$SELECT split_part(p, ':', 1)::bigint AS id, split_part(p, ':', 2)::uuid AS token FROM cancels, unnest(string_to_array(payload, ' ')) AS p$$,
    $$SELECT id, lease_token FROM c3$$, 'naming each cancelled job with its lease token');
TRUNCATE jobq_spy.calls;
SELECT is(jobq.cancel_jobs('rj'), 5, 'cancel_jobs of the ready ones');
SELECT is((SELECT count(*)::int FROM cancels), 0, 'sends no jobq_cancel');

SELECT * FROM finish();
ROLLBACK;

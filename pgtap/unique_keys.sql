-- Unique jobs: one active job per (queue, job_key).
BEGIN;
SELECT plan(34);
SET LOCAL client_min_messages = warning;

SELECT jobq.enqueue('u', '{"v": 1}', job_key => 'k1') AS k1 \gset
SELECT is(jobq.enqueue('u', '{"v": 2}', job_key => 'k1'), :k1::bigint, 'a duplicate key returns the existing id');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'u'), 1, 'and adds nothing');
SELECT is((SELECT payload FROM jobq._job WHERE id = :k1), '{"v": 1}'::jsonb, 'the existing job is unchanged');
SELECT is(jobq.enqueue('u', '{}', now() + interval '1 day', 5, 3, 'k1'), :k1::bigint,
          'a duplicate with other options still returns the existing id');
SELECT results_eq($$SELECT run_at, priority::int, max_attempts FROM jobq._job WHERE id = $$ || :k1,
                  $$VALUES (now(), 0, 25)$$, 'and does not change its options');
SELECT isnt(jobq.enqueue('u2', '{}', job_key => 'k1'), :k1::bigint, 'the same key in another queue is another job');
SELECT isnt(jobq.enqueue('u', '{}', job_key => 'K1'), :k1::bigint, 'keys are case-sensitive');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'u' AND job_key IS NULL), 0, 'setup: no keyless jobs');
SELECT isnt(jobq.enqueue('u', '{}'), jobq.enqueue('u', '{}'), 'jobs without a key are never deduplicated');

-- scheduled and running jobs hold their key
SELECT jobq.enqueue('s', '{}', now() + interval '1 hour', job_key => 'sk') AS sk \gset
SELECT is(jobq.enqueue('s', '{}', job_key => 'sk'), :sk::bigint, 'a scheduled job holds its key');
-- Queue r keeps history (opt-in since 0.3.0): an archived completed job and a
-- new one with its key coexist.
SELECT jobq.configure_queue('r', retention => interval '1 day') IS NOT NULL AS configured \gset
SELECT jobq.enqueue('r', '{}', job_key => 'rk') AS rk \gset
CREATE TEMP TABLE rc AS SELECT * FROM jobq.claim('r');
SELECT is(jobq.enqueue('r', '{}', job_key => 'rk'), :rk::bigint, 'a running job holds its key');

-- completed, dead and cancelled jobs do not block
SELECT ok(jobq.complete(:rk, (SELECT lease_token FROM rc)), 'complete the running keyed job');
SELECT jobq.enqueue('r', '{"new": true}', job_key => 'rk') AS rk2 \gset
SELECT isnt(:rk2::bigint, :rk::bigint, 'a completed job''s key does not block: a new job');
SELECT is((SELECT count(*)::int FROM jobq.jobs WHERE queue = 'r' AND job_key = 'rk'), 2,
          'the completed one (archived) and the new one coexist');

SELECT jobq.enqueue('d', '{"gen": 1}', max_attempts => 1, job_key => 'dk') AS dk \gset
CREATE TEMP TABLE dc AS SELECT * FROM jobq.claim('d');
SELECT ok(jobq.fail(:dk, 'x', (SELECT lease_token FROM dc)), 'dead-letter the keyed job');
SELECT jobq.enqueue('d', '{"gen": 2}', job_key => 'dk') AS dk2 \gset
SELECT isnt(:dk2::bigint, :dk::bigint, 'a dead job''s key does not block: a new job');

SELECT jobq.enqueue('c', '{}', job_key => 'ck') AS ck \gset
SELECT ok(jobq.cancel(:ck), 'cancel the keyed job');
SELECT isnt(jobq.enqueue('c', '{}', job_key => 'ck'), :ck::bigint, 'a cancelled job''s key does not block');

-- retry of a dead job whose key is held: JQ013, nothing changes
CREATE TEMP TABLE snap AS
    SELECT 'live' AS t, to_jsonb(j) AS row FROM jobq._job AS j
    UNION ALL SELECT 'archive', to_jsonb(a) FROM jobq._job_archive AS a;
SELECT throws_ok(format('SELECT jobq.retry(%s)', :dk), 'JQ013', NULL,
                 'retrying a dead job whose key is held by an active job raises JQ013');
SELECT set_eq(
    $$SELECT 'live', to_jsonb(j) FROM jobq._job AS j UNION ALL SELECT 'archive', to_jsonb(a) FROM jobq._job_archive AS a$$,
    $$SELECT t, row FROM snap$$, 'the failed retry changed nothing');
SELECT is((SELECT status FROM jobq._job_archive WHERE id = :dk), 'dead', 'the job stays dead');

-- retry_dead skips jobs whose key is held, brings back the others
DO $$ BEGIN
    PERFORM jobq.configure_queue('d', max_attempts => 1);
    PERFORM jobq.enqueue('d', '{"free": 1}', job_key => 'free');
    PERFORM jobq.enqueue('d', '{"nokey": 1}');
    PERFORM jobq.fail(c.id, 'x', c.lease_token) FROM jobq.claim('d', 10) AS c WHERE c.job_key IS DISTINCT FROM 'dk';
END $$;
SELECT is((SELECT count(*)::int FROM jobq._job_archive WHERE queue = 'd' AND status = 'dead'), 3,
          'setup: three dead jobs in queue d (one whose key dk is held again)');
SELECT is(jobq.retry_dead('d'), 2, 'retry_dead brings back the two whose key is free (or absent)');
SELECT is((SELECT array_agg(id) FROM jobq._job_archive WHERE queue = 'd' AND status = 'dead'), ARRAY[:dk::bigint],
          'the job whose key is held stays dead');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'd' AND job_key = 'dk'), 1, 'the key dk is still held once');
SELECT results_eq($$SELECT attempts, status FROM jobq._job WHERE job_key = 'free'$$,
                  $$VALUES (0, 'ready'::text)$$, 'the retried keyed job is live again with fresh attempts');

-- two dead jobs with the same key: retry_dead revives only one
DO $$ BEGIN
    PERFORM jobq.enqueue('twin', '{"gen": 1}', max_attempts => 1, job_key => 'tk');
    PERFORM jobq.fail(c.id, 'x', c.lease_token) FROM jobq.claim('twin') AS c;
    PERFORM jobq.enqueue('twin', '{"gen": 2}', max_attempts => 1, job_key => 'tk');
    PERFORM jobq.fail(c.id, 'x', c.lease_token) FROM jobq.claim('twin') AS c;
END $$;
SELECT is((SELECT count(*)::int FROM jobq._job_archive WHERE queue = 'twin' AND status = 'dead'), 2,
          'setup: two dead jobs with the same key');
SELECT is(jobq.retry_dead('twin'), 1, 'retry_dead revives one of two dead jobs sharing a key');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'twin'), 1, 'one active job holds the key');
SELECT is((SELECT count(*)::int FROM jobq._job_archive WHERE queue = 'twin' AND status = 'dead'), 1, 'the other stays dead');

-- enqueue_many with job_keys, duplicates inside the batch and an existing key
CREATE TEMP TABLE m AS
    SELECT x.id, x.ord FROM jobq.enqueue_many('m', ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}', '{"i": 4}', '{"i": 5}']::jsonb[],
                                              job_keys => ARRAY['a', 'b', 'a', NULL, 'e']) WITH ORDINALITY AS x(id, ord);
SELECT jobq.enqueue('m', '{}', job_key => 'zz') IS NOT NULL AS unused \gset
SELECT is((SELECT array_agg(id ORDER BY ord) FROM m),
          ARRAY[(SELECT id FROM m WHERE ord = 1), (SELECT id FROM m WHERE ord = 2), (SELECT id FROM m WHERE ord = 1),
                (SELECT id FROM m WHERE ord = 4), (SELECT id FROM m WHERE ord = 5)],
          'a key repeated inside the batch returns the first job''s id');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'm' AND job_key IS DISTINCT FROM 'zz'), 4,
          'four jobs were added for five payloads');
SELECT is((SELECT payload FROM jobq._job WHERE queue = 'm' AND job_key = 'a'), '{"i": 1}'::jsonb,
          'the first payload of a repeated key wins');
SELECT is((SELECT array_agg(x) FROM jobq.enqueue_many('m', ARRAY['{}', '{}']::jsonb[], job_keys => ARRAY['b', 'new'])
           WITH ORDINALITY AS e(x, o) WHERE o = 1), ARRAY[(SELECT id FROM m WHERE ord = 2)],
          'enqueue_many returns the existing id for a key already held');

SELECT * FROM finish();
ROLLBACK;

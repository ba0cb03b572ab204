-- jobq.release(): hand a claimed job back without spending an attempt.
BEGIN;
SELECT plan(13);

SELECT jobq.enqueue('rel', '{"r": 1}', now() - interval '1 hour', max_attempts => 2) AS id \gset
CREATE TEMP TABLE c1 AS SELECT * FROM jobq.claim('rel', 1, 'w1');
SELECT is((SELECT attempts FROM c1), 1, 'setup: claimed, attempt 1');

SELECT is(jobq.release(:id, gen_random_uuid()), false, 'release with a wrong token returns false');
SELECT is((SELECT status FROM jobq._job WHERE id = :id), 'running', 'and leaves the job running');
SELECT is(jobq.release(:id, (SELECT lease_token FROM c1)), true, 'release by the holder returns true');
SELECT results_eq(
    $$SELECT status, attempts, lease_token, lease_expires_at, run_at, last_error FROM jobq._job WHERE id = $$ || :id,
    $$VALUES ('ready'::text, 0, NULL::uuid, NULL::timestamptz, now() - interval '1 hour', NULL::text)$$,
    'a released job is ready at its old run_at, the attempt not spent, no error recorded');
SELECT is((SELECT count(*)::int FROM jobq._job_archive), 0, 'release archives nothing');

-- the old token is fenced out
CREATE TEMP TABLE s AS SELECT to_jsonb(j) AS row FROM jobq._job AS j WHERE id = :id;
SELECT is(jobq.release(:id, (SELECT lease_token FROM c1)), false, 'a second release returns false');
SELECT ok(NOT jobq.complete(:id, (SELECT lease_token FROM c1)) AND NOT jobq.heartbeat(:id, (SELECT lease_token FROM c1))
          AND NOT jobq.fail(:id, 'x', (SELECT lease_token FROM c1)),
          'after release the old token gets false from complete, heartbeat and fail');
SELECT is((SELECT to_jsonb(j) FROM jobq._job AS j WHERE id = :id), (SELECT row FROM s), 'and changes nothing');

-- a released job is claimed again as if never started
CREATE TEMP TABLE c2 AS SELECT * FROM jobq.claim('rel', 1, 'w2');
SELECT is((SELECT attempts FROM c2), 1, 'the next claim is attempt 1 again');
SELECT ok(jobq.release(:id, (SELECT lease_token FROM c2)), 'release again');
SELECT is(jobq.release(-1, gen_random_uuid()), false, 'release of an unknown id returns false');
SELECT throws_ok($$SELECT jobq.release(1, NULL)$$, 'JQ010', NULL, 'release with a NULL lease token raises JQ010');

SELECT * FROM finish();
ROLLBACK;

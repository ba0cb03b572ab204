-- jobq.snooze(): a worker reschedules the job it holds to run_at without
-- spending an attempt. Fenced by the lease token like complete/fail.
BEGIN;
SELECT plan(26);

SELECT jobq.enqueue('sz', '{"s": 1}', max_attempts => 1) AS id \gset
CREATE TEMP TABLE c1 AS SELECT * FROM jobq.claim('sz', 1, 'w1');
SELECT is((SELECT attempts FROM c1), 1, 'setup: claimed, attempt 1 of 1');

-- wrong tokens and bad run_at change nothing --------------------------------------------------
CREATE TEMP TABLE snap AS SELECT to_jsonb(j) AS row FROM jobq._job AS j WHERE id = :id;
SELECT is(jobq.snooze(:id, gen_random_uuid(), now() + interval '1 hour'), false, 'snooze with a wrong lease token returns false');
SELECT is(jobq.snooze(-1, gen_random_uuid(), now()), false, 'snooze of an unknown id returns false');
SELECT throws_ok(format('SELECT jobq.snooze(%s, %L, NULL)', :id, (SELECT lease_token FROM c1)), 'JQ006',
                 'jobq: run_at must be a finite time within 10 years of now, got NULL', 'snooze with run_at NULL raises JQ006');
SELECT throws_ok(format('SELECT jobq.snooze(%s, %L, %L)', :id, (SELECT lease_token FROM c1), 'infinity'), 'JQ006', NULL,
                 'snooze with run_at infinity raises JQ006');
SELECT throws_ok(format('SELECT jobq.snooze(%s, %L, now() + interval ''11 years'')', :id, (SELECT lease_token FROM c1)), 'JQ006', NULL,
                 'snooze with run_at 11 years ahead raises JQ006');
SELECT throws_ok(format('SELECT jobq.snooze(%s, NULL, now())', :id), 'JQ010', NULL, 'snooze with a NULL lease token raises JQ010');
SELECT is((SELECT to_jsonb(j) FROM jobq._job AS j WHERE id = :id), (SELECT row FROM snap),
          'none of those changed the job: still running under its lease');

-- snooze ------------------------------------------------------------------------------------------------
SELECT is(jobq.snooze(:id, (SELECT lease_token FROM c1), now() + interval '1 hour'), true, 'snooze by the holder returns true');
SELECT results_eq(
    $$SELECT status, run_at, attempts, lease_token, lease_expires_at, last_error FROM jobq._job WHERE id = $$ || :id,
    $$VALUES ('ready'::text, now() + interval '1 hour', 0, NULL::uuid, NULL::timestamptz, NULL::text)$$,
    'a snoozed job is ready at run_at, the attempt not spent, no lease, no error recorded');
SELECT is((SELECT status FROM jobq.jobs WHERE id = :id), 'scheduled', 'jobq.jobs shows it as scheduled');
SELECT is((SELECT count(*)::int FROM jobq._job_archive), 0, 'snooze archives nothing');

-- the old token is fenced out ---------------------------------------------------------------------------------
TRUNCATE snap;
INSERT INTO snap SELECT to_jsonb(j) FROM jobq._job AS j WHERE id = :id;
SELECT is(jobq.snooze(:id, (SELECT lease_token FROM c1), now()), false, 'a second snooze with the old token returns false');
SELECT ok(NOT jobq.complete(:id, (SELECT lease_token FROM c1)) AND NOT jobq.heartbeat(:id, (SELECT lease_token FROM c1))
          AND NOT jobq.fail(:id, 'x', (SELECT lease_token FROM c1)) AND NOT jobq.release(:id, (SELECT lease_token FROM c1)),
          'after snooze the old token gets false from complete, heartbeat, fail and release');
SELECT is((SELECT to_jsonb(j) FROM jobq._job AS j WHERE id = :id), (SELECT row FROM snap), 'and changes nothing');

-- it runs again at run_at, and snoozing never spends its single attempt ------------------------------------------
SELECT is((SELECT count(*)::int FROM jobq.claim('sz', 10)), 0, 'a snoozed job is not claimed before run_at');
UPDATE jobq._job SET run_at = now() WHERE id = :id;
CREATE TEMP TABLE c2 AS SELECT * FROM jobq.claim('sz', 1, 'w2');
SELECT is((SELECT attempts FROM c2), 1, 'once run_at has come it is claimed as attempt 1 again');
SELECT ok(jobq.snooze(:id, (SELECT lease_token FROM c2), now() - interval '1 minute'), 'snooze to a time in the past');
CREATE TEMP TABLE c3 AS SELECT * FROM jobq.claim('sz', 1, 'w3');
SELECT is((SELECT id FROM c3), :id::bigint, 'a job snoozed into the past is ready at once');
SELECT is((SELECT attempts FROM c3), 1, 'still attempt 1 of 1 after two snoozes');
SELECT ok(jobq.complete(:id, (SELECT lease_token FROM c3)), 'and it completes');

-- a lost lease: snooze reports it ----------------------------------------------------------------------------------
SELECT jobq.enqueue('sz', '{"s": 2}') AS id2 \gset
CREATE TEMP TABLE c4 AS SELECT * FROM jobq.claim('sz', 1, 'w4');
UPDATE jobq._job SET lease_expires_at = now() - interval '1 second' WHERE id = :id2;
SELECT is(jobq.reap(), 1, 'setup: the lease expired and the job was reaped');
SELECT is(jobq.snooze(:id2, (SELECT lease_token FROM c4), now() + interval '1 hour'), false,
          'snooze after the lease was lost returns false');
SELECT is((SELECT run_at FROM jobq._job WHERE id = :id2), now(), 'and does not move the job');

-- a snoozed group head keeps its place: the group waits ----------------------------------------------------------
SELECT jobq.enqueue_many('szg', ARRAY['{"g": 1}', '{"g": 2}']::jsonb[], group_key => 'G');
CREATE TEMP TABLE c5 AS SELECT * FROM jobq.claim('szg', 1, 'w5');
SELECT ok(jobq.snooze((SELECT id FROM c5), (SELECT lease_token FROM c5), now() + interval '1 hour'), 'snooze the head of group G');
SELECT is((SELECT count(*)::int FROM jobq.claim('szg', 10)), 0, 'the rest of the group waits for the snoozed head');

SELECT * FROM finish();
ROLLBACK;

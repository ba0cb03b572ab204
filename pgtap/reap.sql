-- jobq.reap(): touches exactly the running rows whose lease expired.
BEGIN;
SELECT plan(21);

CREATE TEMP TABLE t (name text PRIMARY KEY, id bigint);
INSERT INTO t VALUES
    ('retry',    jobq.enqueue('r1', '{"n": "retry"}', max_attempts => 3)),
    ('dead',     jobq.enqueue('r2', '{"n": "dead"}', max_attempts => 1)),
    ('alive',    jobq.enqueue('r3', '{"n": "alive"}')),
    ('boundary', jobq.enqueue('r4', '{"n": "boundary"}')),
    ('other',    jobq.enqueue('r5', '{"n": "other"}', max_attempts => 2));
DO $$ BEGIN
    PERFORM jobq.claim(ARRAY['r1', 'r2', 'r3', 'r4', 'r5'], 10, 'reaper-test');
END $$;
INSERT INTO t VALUES
    ('ready',     jobq.enqueue('r1', '{"n": "ready"}')),
    ('scheduled', jobq.enqueue('r1', '{"n": "scheduled"}', now() + interval '1 hour'));
UPDATE jobq._job SET lease_expires_at = now() - interval '1 minute'
WHERE id IN (SELECT id FROM t WHERE name IN ('retry', 'dead'));
UPDATE jobq._job SET lease_expires_at = now() - interval '2 minutes'
WHERE id = (SELECT id FROM t WHERE name = 'other');
UPDATE jobq._job SET lease_expires_at = now() WHERE id = (SELECT id FROM t WHERE name = 'boundary');

CREATE TEMP TABLE untouched AS
    SELECT to_jsonb(j) AS row FROM jobq._job AS j
    WHERE id IN (SELECT id FROM t WHERE name IN ('alive', 'boundary', 'ready', 'scheduled'));
SELECT is((SELECT count(*)::int FROM untouched), 4, 'setup: four rows that must not be touched');

SELECT is(jobq.reap(), 3, 'reap returns the number of expired running jobs (2 requeued + 1 dead)');

SELECT results_eq(
    $$SELECT status, run_at, attempts, lease_token, lease_expires_at, last_error
      FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'retry')$$,
    $$VALUES ('ready'::text, now(), 1, NULL::uuid, NULL::timestamptz,
              format('lease expired at %s (worker reaper-test)', now() - interval '1 minute'))$$,
    'an expired job with attempts left is ready now, its attempt counted, with a last_error');
SELECT is((SELECT status FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'other')), 'ready',
          'reap covers every queue');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'dead')), 0,
          'an expired job out of attempts leaves the live table');
SELECT results_eq(
    $$SELECT status, payload, attempts, max_attempts, last_error, worker
      FROM jobq._job_archive WHERE id = (SELECT id FROM t WHERE name = 'dead')$$,
    $$VALUES ('dead'::text, '{"n": "dead"}'::jsonb, 1, 1,
              format(E'lease expired at %s (worker reaper-test)\nno attempts left',
                     now() - interval '1 minute'),
              'reaper-test'::text)$$,
    'and is dead-lettered with payload, attempts and an explanation naming the expiry and the worker');
SELECT set_eq(
    $$SELECT to_jsonb(j) FROM jobq._job AS j
      WHERE id IN (SELECT id FROM t WHERE name IN ('alive', 'boundary', 'ready', 'scheduled'))$$,
    $$SELECT row FROM untouched$$,
    'running jobs with a live lease (even one expiring exactly now), ready and scheduled jobs are untouched');
SELECT is((SELECT count(*)::int FROM jobq._job_archive), 1, 'only the dead job was archived');
SELECT is(jobq.reap(), 0, 'a second reap finds nothing');

SELECT is((SELECT count(*)::int FROM jobq.claim('r2', 10)), 0, 'the reaped dead job is never claimed');
SELECT is((SELECT array_agg(payload->>'n' ORDER BY payload->>'n') FROM jobq.claim('r1', 10)), ARRAY['ready', 'retry'],
          'the requeued job is claimable again (with the ready one, not the scheduled one)');
SELECT is((SELECT attempts FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'retry')), 2,
          'its next claim is attempt 2');

-- reap(n) takes the oldest expiries first
DO $$ BEGIN
    PERFORM jobq.enqueue_many('rn', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[]);
    PERFORM jobq.claim('rn', 3);
END $$;
UPDATE jobq._job SET lease_expires_at = now() - ((payload->>'n')::int * interval '1 minute') WHERE queue = 'rn';
SELECT is(jobq.reap(0), 0, 'reap(0) reaps nothing');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'rn' AND status = 'running'), 3, 'reap(0) changed nothing');
SELECT is(jobq.reap(2), 2, 'reap(2) reaps two');
SELECT is((SELECT array_agg(payload->>'n') FROM jobq._job WHERE queue = 'rn' AND status = 'running'), ARRAY['1'],
          'reap(n) took the two longest-expired leases');
SELECT is(jobq.reap(), 1, 'the next reap takes the rest');

-- max_attempts reached with a live lease: not reaped
DO $$ BEGIN
    PERFORM jobq.enqueue('rl', '{}', max_attempts => 1);
    PERFORM jobq.claim('rl');
END $$;
SELECT is(jobq.reap(), 0, 'a last attempt with a live lease is not reaped');
SELECT is((SELECT status FROM jobq._job WHERE queue = 'rl'), 'running', 'it keeps running');

-- a reaped-to-ready job keeps its key
SELECT jobq.enqueue('rk', '{}', job_key => 'k1') AS k1 \gset
DO $$ BEGIN PERFORM jobq.claim('rk'); END $$;
UPDATE jobq._job SET lease_expires_at = now() - interval '1 s' WHERE queue = 'rk';
SELECT is(jobq.reap(), 1, 'reap a keyed job');
SELECT is(jobq.enqueue('rk', '{}', job_key => 'k1'), :k1::bigint, 'the reaped job still holds its job_key');

SELECT * FROM finish();
ROLLBACK;

-- Fencing: after a lease expired and the job was reaped or re-claimed, the
-- old holder's complete/fail/heartbeat report false and change nothing.
BEGIN;
SELECT plan(32);

-- Queue fq keeps history (opt-in since 0.3.0): the archive shows who completed.
SELECT jobq.configure_queue('fq', retention => interval '1 day') IS NOT NULL AS configured \gset
SELECT jobq.enqueue('fq', '{"work": 1}', max_attempts => 5) AS job_id \gset
CREATE TEMP TABLE old AS SELECT * FROM jobq.claim('fq', 1, 'w-old');
SELECT is((SELECT id FROM old), :job_id::bigint, 'setup: w-old holds the job');

-- the holder can heartbeat while it holds the lease
SELECT is(jobq.heartbeat(:job_id, (SELECT lease_token FROM old), interval '1 minute'), true,
          'heartbeat by the holder returns true');
SELECT ok((SELECT lease_expires_at FROM jobq._job WHERE id = :job_id)
          BETWEEN now() + interval '1 minute' AND clock_timestamp() + interval '1 minute',
          'heartbeat extends the lease to (database) clock time + extend');
SELECT is(jobq.heartbeat(:job_id, (SELECT lease_token FROM old)), true, 'heartbeat without extend returns true');
SELECT ok((SELECT lease_expires_at FROM jobq._job WHERE id = :job_id)
          BETWEEN now() + interval '5 minutes' AND clock_timestamp() + interval '5 minutes',
          'heartbeat without extend uses the queue''s lease (5 minutes)');
SELECT is(jobq.heartbeat(:job_id, gen_random_uuid()), false, 'heartbeat with a wrong token returns false');

-- the lease expires; an expired but not yet reaped job is not claimable
UPDATE jobq._job SET lease_expires_at = now() - interval '1 minute' WHERE id = :job_id;
SELECT is_empty($$SELECT * FROM jobq.claim('fq')$$, 'an expired lease is not re-claimed before reap');

SELECT is(jobq.reap(), 1, 'reap returns the expired job');
CREATE TEMP TABLE s1 AS SELECT to_jsonb(j) AS row FROM jobq._job AS j WHERE id = :job_id;
SELECT results_eq(
    $$SELECT status, attempts, lease_token, lease_expires_at, run_at FROM jobq._job WHERE id = $$ || :job_id,
    $$VALUES ('ready'::text, 1, NULL::uuid, NULL::timestamptz, now())$$,
    'the reaped job is ready now, attempt still counted, lease cleared');

-- after reap, before re-claim: the old token is dead
SELECT is(jobq.heartbeat(:job_id, (SELECT lease_token FROM old)), false, 'after reap: old heartbeat returns false');
SELECT is(jobq.complete(:job_id, (SELECT lease_token FROM old)), false, 'after reap: old complete returns false');
SELECT is(jobq.fail(:job_id, 'late', (SELECT lease_token FROM old)), false, 'after reap: old fail returns false');
SELECT is(jobq.complete_many(ARRAY[:job_id]::bigint[], ARRAY[(SELECT lease_token FROM old)]), 0,
          'after reap: old complete_many returns 0');
SELECT is((SELECT to_jsonb(j) FROM jobq._job AS j WHERE id = :job_id), (SELECT row FROM s1),
          'after reap: the old holder''s calls changed nothing');
SELECT is((SELECT count(*)::int FROM jobq._job_archive), 0, 'after reap: nothing was archived');

-- re-claimed by another worker
CREATE TEMP TABLE new AS SELECT * FROM jobq.claim('fq', 1, 'w-new');
SELECT is((SELECT id FROM new), :job_id::bigint, 'w-new claims the job');
SELECT isnt((SELECT lease_token FROM new), (SELECT lease_token FROM old), 'with a new lease token');
SELECT is((SELECT attempts FROM new), 2, 'attempt 2');
SELECT ok((SELECT last_error FROM new) LIKE 'lease expired at % (worker w-old)', 'last_error tells the lease expired and whose it was');

CREATE TEMP TABLE s2 AS SELECT to_jsonb(j) AS row FROM jobq._job AS j WHERE id = :job_id;
SELECT is(jobq.heartbeat(:job_id, (SELECT lease_token FROM old), interval '1 hour'), false,
          'after re-claim: old heartbeat returns false');
SELECT is(jobq.fail(:job_id, 'late failure', (SELECT lease_token FROM old)), false,
          'after re-claim: old fail returns false');
SELECT is(jobq.fail(:job_id, 'late failure', (SELECT lease_token FROM old), now() + interval '1 hour'), false,
          'after re-claim: old fail with retry_at returns false');
SELECT is(jobq.complete(:job_id, (SELECT lease_token FROM old)), false,
          'after re-claim: old complete returns false');
SELECT is(jobq.complete_many(ARRAY[:job_id]::bigint[], ARRAY[(SELECT lease_token FROM old)]), 0,
          'after re-claim: old complete_many returns 0');
SELECT is((SELECT to_jsonb(j) FROM jobq._job AS j WHERE id = :job_id), (SELECT row FROM s2),
          'after re-claim: the old holder''s calls changed nothing (status, lease, run_at, error, worker)');
SELECT is((SELECT count(*)::int FROM jobq._job_archive), 0, 'after re-claim: nothing was archived');

-- the new holder is unaffected
SELECT is(jobq.heartbeat(:job_id, (SELECT lease_token FROM new)), true, 'the new holder''s heartbeat works');
SELECT is(jobq.complete(:job_id, (SELECT lease_token FROM new)), true, 'the new holder completes the job');
SELECT is((SELECT worker FROM jobq._job_archive WHERE id = :job_id), 'w-new', 'the archive credits the new worker');

-- the fenced-out holder of a dead-lettered job
SELECT jobq.enqueue('fq', '{"work": 2}', max_attempts => 1) AS job2 \gset
CREATE TEMP TABLE d AS SELECT * FROM jobq.claim('fq', 1, 'w-d');
UPDATE jobq._job SET lease_expires_at = now() - interval '1 second' WHERE id = :job2;
SELECT is(jobq.reap(), 1, 'reap dead-letters the expired last attempt');
CREATE TEMP TABLE s3 AS SELECT to_jsonb(a) AS row FROM jobq._job_archive AS a WHERE id = :job2;
SELECT ok(NOT jobq.complete(:job2, (SELECT lease_token FROM d)) AND NOT jobq.fail(:job2, 'x', (SELECT lease_token FROM d))
          AND NOT jobq.heartbeat(:job2, (SELECT lease_token FROM d)),
          'the holder of a reaped dead job gets false from complete, fail and heartbeat');
SELECT is((SELECT to_jsonb(a) FROM jobq._job_archive AS a WHERE id = :job2), (SELECT row FROM s3),
          'and its dead-letter record is unchanged');

SELECT * FROM finish();
ROLLBACK;

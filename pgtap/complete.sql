-- jobq.complete() / jobq.complete_many(): acknowledge, archive (when the
-- queue keeps history), count, fence.
BEGIN;
SELECT plan(36);

DO $$ BEGIN
    -- History is opt-in (default retention 0): queue c keeps a day of it.
    PERFORM jobq.configure_queue('c', retention => interval '1 day');
    PERFORM jobq.enqueue('c', jsonb_build_object('i', g), job_key => 'key' || g) FROM generate_series(1, 6) AS g;
END $$;
CREATE TEMP TABLE cl AS SELECT row_number() OVER () AS ord, c.* FROM jobq.claim('c', 6, 'w1') AS c;
SELECT is((SELECT count(*)::int FROM cl), 6, 'setup: six jobs claimed');

-- complete one
SELECT is(jobq.complete((SELECT id FROM cl WHERE ord = 1), (SELECT lease_token FROM cl WHERE ord = 1)), true,
          'complete with the lease token returns true');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id = (SELECT id FROM cl WHERE ord = 1)), 0,
          'a completed job leaves the live table');
SELECT results_eq(
    $$SELECT a.queue, a.payload, a.status, a.attempts, a.max_attempts, a.job_key, a.worker, a.last_error,
             a.created_at, a.started_at, a.finished_at, a.prune_after
      FROM jobq._job_archive AS a WHERE a.id = (SELECT id FROM cl WHERE ord = 1)$$,
    $$SELECT 'c'::text, '{"i": 1}'::jsonb, 'completed'::text, 1, 25, 'key1'::text, 'w1'::text, NULL::text,
              now(), cl.lease_expires_at - interval '5 minutes',
              (SELECT a.finished_at FROM jobq._job_archive AS a WHERE a.id = cl.id),
              (SELECT a.finished_at FROM jobq._job_archive AS a WHERE a.id = cl.id) + interval '1 day'
      FROM cl WHERE ord = 1$$,
    'the archive keeps the completed job with its data, and prune_after = finished_at + retention (1 day)');
SELECT ok((SELECT a.finished_at BETWEEN now() AND clock_timestamp() FROM jobq._job_archive AS a
           WHERE a.id = (SELECT id FROM cl WHERE ord = 1)),
          'finished_at is the clock when complete ran (within this transaction)');
SELECT is((SELECT status FROM jobq.jobs WHERE id = (SELECT id FROM cl WHERE ord = 1)), 'completed',
          'jobq.jobs shows it as completed');

-- complete again, wrong tokens, unknown ids: false and nothing changes
CREATE TEMP TABLE snap AS
    SELECT 'live' AS t, to_jsonb(j) AS row FROM jobq._job AS j
    UNION ALL SELECT 'archive', to_jsonb(a) FROM jobq._job_archive AS a;
SELECT is(jobq.complete((SELECT id FROM cl WHERE ord = 1), (SELECT lease_token FROM cl WHERE ord = 1)), false,
          'completing the same job again returns false');
SELECT is(jobq.complete((SELECT id FROM cl WHERE ord = 2), gen_random_uuid()), false,
          'complete with a wrong lease token returns false');
SELECT is(jobq.complete((SELECT id FROM cl WHERE ord = 2), (SELECT lease_token FROM cl WHERE ord = 3)), false,
          'complete with another job''s lease token returns false');
SELECT is(jobq.complete(-42, gen_random_uuid()), false, 'complete of an unknown id returns false');
SELECT set_eq(
    $$SELECT 'live', to_jsonb(j) FROM jobq._job AS j UNION ALL SELECT 'archive', to_jsonb(a) FROM jobq._job_archive AS a$$,
    $$SELECT t, row FROM snap$$,
    'those false calls changed nothing');
SELECT is((SELECT status FROM jobq._job WHERE id = (SELECT id FROM cl WHERE ord = 2)), 'running',
          'the job with the wrong token is still running');

-- a ready (unclaimed) job cannot be completed
SELECT jobq.enqueue('c', '{"ready": true}') AS ready_id \gset
SELECT is(jobq.complete(:ready_id, gen_random_uuid()), false, 'a ready job cannot be completed');
SELECT is((SELECT status FROM jobq._job WHERE id = :ready_id), 'ready', 'the ready job is unchanged');

-- complete_many
SELECT is(jobq.complete_many(ARRAY(SELECT id FROM cl WHERE ord IN (2, 3) ORDER BY ord),
                             ARRAY(SELECT lease_token FROM cl WHERE ord IN (2, 3) ORDER BY ord)), 2,
          'complete_many returns how many it completed');
SELECT is((SELECT count(*)::int FROM jobq._job_archive WHERE id IN (SELECT id FROM cl WHERE ord IN (2, 3))
           AND status = 'completed'), 2, 'both are archived as completed');
SELECT is(jobq.complete_many(ARRAY[(SELECT id FROM cl WHERE ord = 4), (SELECT id FROM cl WHERE ord = 5), (SELECT id FROM cl WHERE ord = 2)],
                             ARRAY[(SELECT lease_token FROM cl WHERE ord = 4), gen_random_uuid(), (SELECT lease_token FROM cl WHERE ord = 2)]), 1,
          'complete_many counts only jobs still held under their tokens');
SELECT is((SELECT status FROM jobq._job WHERE id = (SELECT id FROM cl WHERE ord = 5)), 'running',
          'the job given a wrong token is left running');
SELECT is((SELECT status FROM jobq._job_archive WHERE id = (SELECT id FROM cl WHERE ord = 4)), 'completed',
          'the job given its right token is completed');
SELECT is(jobq.complete_many(ARRAY[(SELECT id FROM cl WHERE ord = 5), (SELECT id FROM cl WHERE ord = 5)],
                             ARRAY[(SELECT lease_token FROM cl WHERE ord = 5), (SELECT lease_token FROM cl WHERE ord = 5)]), 1,
          'a job listed twice is completed once');
SELECT is(jobq.complete_many('{}', '{}'), 0, 'complete_many of empty arrays returns 0');
SELECT is(jobq.complete_many(ARRAY[-1, -2]::bigint[], ARRAY[gen_random_uuid(), gen_random_uuid()]), 0,
          'complete_many of unknown ids returns 0');

-- keys are released
SELECT isnt(jobq.enqueue('c', '{}', job_key => 'key1'), (SELECT id FROM cl WHERE ord = 1),
            'a completed job''s job_key no longer blocks a new job');

-- retention 0: no history
DO $$ BEGIN PERFORM jobq.configure_queue('nohist', retention => interval '0'); PERFORM jobq.enqueue('nohist', '{}'); END $$;
CREATE TEMP TABLE nh AS SELECT * FROM jobq.claim('nohist');
SELECT is(jobq.complete((SELECT id FROM nh), (SELECT lease_token FROM nh)), true, 'complete in a queue with retention 0');
SELECT is((SELECT count(*)::int FROM jobq.jobs WHERE id = (SELECT id FROM nh)), 0,
          'with retention 0 the completed job is neither live nor archived');

-- retention setting sets prune_after
DO $$ BEGIN PERFORM jobq.configure_queue('hist', retention => interval '7 days'); PERFORM jobq.enqueue('hist', '{}'); END $$;
CREATE TEMP TABLE h AS SELECT * FROM jobq.claim('hist');
SELECT ok(jobq.complete((SELECT id FROM h), (SELECT lease_token FROM h)), 'complete in a queue with retention 7 days');
SELECT is((SELECT prune_after - finished_at FROM jobq._job_archive WHERE id = (SELECT id FROM h)), interval '7 days',
          'prune_after follows the queue''s retention');

-- stats
SELECT results_eq($$SELECT ready::int, running::int FROM jobq.stats WHERE queue = 'c'$$,
                  $$VALUES (2, 1)$$, 'jobq.stats counts what is left: 2 ready, 1 running');
SELECT is((SELECT completed_total::int FROM jobq.stats WHERE queue = 'c'), 5,
          'completed_total counts every completion of queue c once (1 + 2 + 1 + 1; the false calls count nothing)');
SELECT is((SELECT count(*)::int FROM jobq._counter WHERE queue = 'c'), 4,
          'one counter row per completing statement that completed something (4), none for those that did not');

-- the default: no history, but counted
DO $$ BEGIN PERFORM jobq.enqueue_many('dflt', ARRAY['{"a":1}', '{"a":2}', '{"a":3}']::jsonb[]); END $$;
CREATE TEMP TABLE d AS SELECT * FROM jobq.claim('dflt', 3);
SELECT is((SELECT retention FROM jobq.queues WHERE queue = 'dflt'), interval '0',
          'a queue never configured has retention 0');
SELECT is(jobq.complete_many(ARRAY(SELECT id FROM d ORDER BY id), ARRAY(SELECT lease_token FROM d ORDER BY id)), 3,
          'complete_many on a default queue');
SELECT is((SELECT count(*)::int FROM jobq.jobs WHERE queue = 'dflt'), 0,
          'by default completed jobs leave no history: neither live nor archived');
SELECT results_eq($$SELECT completed::int, failed::int, dead::int, bucket = date_trunc('minute', now())
                    FROM jobq._counter WHERE queue = 'dflt'$$,
                  $$VALUES (3, 0, 0, true)$$,
                  'complete_many wrote one counter row: 3 completed in the current minute');
SELECT results_eq($$SELECT completed_total::int, failed_total::int, dead_total::int FROM jobq.stats WHERE queue = 'dflt'$$,
                  $$VALUES (3, 0, 0)$$, 'jobq.stats shows the queue (it has no jobs left) with completed_total 3');
SELECT is((SELECT completed_total::int FROM jobq.stats WHERE queue = 'nohist'), 1,
          'retention 0 counts the completion too');

SELECT * FROM finish();
ROLLBACK;

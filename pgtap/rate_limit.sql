-- Rate limit: a queue with rate_limit = N starts at most N jobs per
-- rate_interval (default 1 second), counted by claim in the database over a
-- sliding window (jobq._rate_start, one row per claim). Inside one
-- transaction the clock does not move far, so time is simulated by moving
-- the recorded starts back. (Many sessions: tests/test_coordination.py.)
BEGIN;
SELECT plan(40);

-- Starts recorded for a queue within its current window.
CREATE FUNCTION pg_temp.window_starts(p_queue text) RETURNS int LANGUAGE sql AS $$
    SELECT coalesce(sum(n), 0)::int FROM jobq._rate_start
    WHERE queue = p_queue
      AND started_at > clock_timestamp() - coalesce((jobq._settings(p_queue)).rate_interval, interval '1 second')
$$;
-- Move the recorded starts of a queue back so that the newest one is p_by
-- old (relative spacing kept): as if that much time passed since it. Placed
-- against clock_timestamp(), not the old start times, so the result does not
-- depend on how long the statements in between took.
CREATE FUNCTION pg_temp.age(p_queue text, p_by interval) RETURNS void LANGUAGE sql AS $$
    UPDATE jobq._rate_start
    SET started_at = started_at
                     - ((SELECT max(r.started_at) FROM jobq._rate_start AS r WHERE r.queue = p_queue)
                        - clock_timestamp())
                     - p_by
    WHERE queue = p_queue
$$;

-- settings -------------------------------------------------------------------------------------
SELECT results_eq($$SELECT s.rate_limit, s.rate_interval FROM jobq.configure_queue('r', rate_limit => 3) AS s$$,
                  $$VALUES (3, interval '1 second')$$, 'configure_queue(rate_limit => 3) applies with a 1-second window by default');
SELECT results_eq($$SELECT rate_limit, rate_interval FROM jobq.queues WHERE queue = 'r'$$,
                  $$VALUES (3, interval '1 second')$$, 'jobq.queues shows rate_limit and rate_interval');
SELECT is((jobq._settings('free')).rate_limit, NULL, 'by default a queue has no rate limit');
SELECT is((jobq.configure_queue('later', rate_interval => interval '10 seconds')).rate_interval, NULL,
          'a rate_interval without a rate_limit has no effect (effective rate_interval NULL)');
SELECT is((jobq.configure_queue('later', rate_limit => 2)).rate_interval, interval '10 seconds',
          'once a rate_limit is set, the stored rate_interval applies');
SELECT lives_ok($$SELECT jobq.configure_queue('edge', rate_limit => 1000000, rate_interval => interval '1 day')$$,
                'rate_limit 1000000 per 1 day is accepted');
SELECT lives_ok($$SELECT jobq.configure_queue('edge', rate_limit => 1, rate_interval => interval '1 second')$$,
                'rate_limit 1 per 1 second is accepted');

-- at most N starts per window --------------------------------------------------------------------
SELECT is((SELECT count(*)::int FROM jobq.claim('r', 10)), 0, 'setup: nothing to claim yet');
SELECT is(pg_temp.window_starts('r'), 0, 'a claim that starts nothing records nothing');
SELECT jobq.enqueue_many('r', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 20) AS g));
CREATE TEMP TABLE held AS SELECT * FROM jobq.claim('r', 10, 'w');
SELECT is((SELECT count(*)::int FROM held), 3, 'claim(n => 10) with rate_limit 3 starts 3 jobs');
SELECT results_eq($$SELECT queue, n FROM jobq._rate_start$$, $$VALUES ('r'::text, 3)$$,
                  'the claim is recorded as one row of 3 starts');
SELECT ok((SELECT started_at FROM jobq._rate_start) BETWEEN now() AND clock_timestamp(),
          'recorded at the clock time of the claim');
SELECT is((SELECT count(*)::int FROM jobq.claim('r', 10)), 0, 'the window is used up: claim returns nothing');
SELECT is((SELECT count(*)::int FROM jobq.claim(ARRAY['r'], 1)), 0, 'not even one job');
SELECT is(jobq.complete_many(array_agg(id), array_agg(lease_token)), 3, 'complete the 3 jobs') FROM held;
SELECT is((SELECT count(*)::int FROM jobq.claim('r', 10)), 0, 'finishing jobs does not refill the window (it limits starts, not running jobs)');
SELECT is(pg_temp.window_starts('r'), 3, 'claims that started nothing recorded nothing');

-- the window slides ---------------------------------------------------------------------------------
SELECT pg_temp.age('r', interval '500 milliseconds');
SELECT is((SELECT count(*)::int FROM jobq.claim('r', 10)), 0, '0.5 s later the 3 starts still count');
SELECT pg_temp.age('r', interval '1 second');
SELECT is((SELECT count(*)::int FROM jobq.claim('r', 2)), 2, 'one interval later the window is free: claim(n => 2) starts 2');
SELECT is((SELECT count(*)::int FROM jobq.claim('r', 10)), 1, 'and the next claim only 1 (3 per window)');
SELECT is((SELECT count(*)::int FROM jobq._rate_start WHERE started_at <= clock_timestamp() - interval '1 second'), 0,
          'starts older than the window are pruned');
SELECT is((SELECT array_agg(n ORDER BY n) FROM jobq._rate_start WHERE queue = 'r'), ARRAY[1, 2],
          'the window now holds the two new claims (2 + 1 starts)');
UPDATE jobq._rate_start SET started_at = started_at - interval '1 second' WHERE queue = 'r' AND n = 2;
SELECT is((SELECT count(*)::int FROM jobq.claim('r', 10)), 2, 'when only the claim of 2 leaves the window, 2 more may start');
SELECT is(pg_temp.window_starts('r'), 3, 'the window holds 3 starts again');

-- a rolled-back claim gives its starts back ----------------------------------------------------------
SELECT pg_temp.age('r', interval '1 second');
SAVEPOINT before_claim;
SELECT is((SELECT count(*)::int FROM jobq.claim('r', 10)), 3, 'a claim in a subtransaction starts 3 jobs');
ROLLBACK TO SAVEPOINT before_claim;
SELECT is(pg_temp.window_starts('r'), 0, 'rolled back: its starts are gone with it');
SELECT is((SELECT count(*)::int FROM jobq.claim('r', 10)), 3, 'and the window is free for the next claim');

-- a longer interval --------------------------------------------------------------------------------------
SELECT jobq.enqueue_many('later', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 6)));
SELECT is((SELECT count(*)::int FROM jobq.claim('later', 10)), 2, 'rate_limit 2 per 10 s: 2 start');
SELECT pg_temp.age('later', interval '5 seconds');
SELECT is((SELECT count(*)::int FROM jobq.claim('later', 10)), 0, 'after 5 s nothing more');
SELECT pg_temp.age('later', interval '10 seconds');
SELECT is((SELECT count(*)::int FROM jobq.claim('later', 10)), 2, 'after 10 s two more');

-- with a concurrency limit, the tighter one wins --------------------------------------------------------------
SELECT jobq.configure_queue('both', concurrency => 1, rate_limit => 5);
SELECT jobq.enqueue_many('both', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 6)));
SELECT is((SELECT count(*)::int FROM jobq.claim('both', 10)), 1, 'concurrency 1 and rate 5: one job starts');
SELECT is(pg_temp.window_starts('both'), 1, 'and one start is recorded');

-- multi-queue claims ------------------------------------------------------------------------------------------
SELECT jobq.enqueue_many('free', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 4)));
SELECT pg_temp.age('r', interval '1 second');
CREATE TEMP TABLE mq AS SELECT * FROM jobq.claim(ARRAY['r', 'free'], 20, 'w');
SELECT set_eq($$SELECT queue, count(*)::int FROM mq GROUP BY queue$$, $$VALUES ('r'::text, 3), ('free', 4)$$,
              'a multi-queue claim starts 3 from the rated queue and all 4 from the free one');
SELECT is(pg_temp.window_starts('r'), 3, 'the rated queue recorded its 3 starts');
SELECT is((SELECT count(*)::int FROM jobq._rate_start WHERE queue = 'free'), 0, 'a queue without a rate limit records nothing');

-- 0 removes the limit ---------------------------------------------------------------------------------------------
SELECT is((jobq.configure_queue('r', rate_limit => 0)).rate_limit, NULL, 'rate_limit => 0 removes the limit');
SELECT is((jobq._settings('r')).rate_interval, NULL, 'and the effective rate_interval with it');
SELECT is((SELECT count(*)::int FROM jobq.claim('r', 10)), (SELECT count(*)::int FROM jobq._job WHERE queue = 'r' AND status = 'ready'),
          'without a limit every ready job is claimed');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'r' AND status = 'ready'), 0, 'none is left ready');
SELECT is((SELECT sum(n)::int FROM jobq._rate_start WHERE queue = 'r'), 3, 'and no start is recorded any more');

SELECT * FROM finish();
ROLLBACK;

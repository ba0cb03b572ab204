-- 0.3.0 counters: jobq._counter gets one row per finishing statement and
-- queue (bucket = the minute); failed counts failed attempts (fail,
-- fail_held, each reaped lease), dead dead-lettered jobs, completed completed
-- jobs. jobq._fold_counters() (run by reap and prune) folds them into one row
-- per queue and minute, rows older than a day into one per queue at
-- -infinity, preserving every sum. jobq.stats shows the sums.
BEGIN;
SELECT plan(28);

CREATE FUNCTION pg_temp.sums(p_queue text) RETURNS TABLE (completed bigint, failed bigint, dead bigint)
LANGUAGE sql AS $$
    SELECT coalesce(sum(c.completed), 0)::bigint, coalesce(sum(c.failed), 0)::bigint, coalesce(sum(c.dead), 0)::bigint
    FROM jobq._counter AS c WHERE c.queue = p_queue
$$;

-- what each finishing call counts ------------------------------------------------------------------
DO $$ BEGIN
    PERFORM jobq.enqueue_many('k', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 6) AS g), max_attempts => 2);
END $$;
CREATE TEMP TABLE c AS SELECT row_number() OVER (ORDER BY id) AS ord, x.* FROM jobq.claim('k', 6) AS x;
SELECT is(jobq.complete_many(ARRAY(SELECT id FROM c WHERE ord <= 3 ORDER BY ord), ARRAY(SELECT lease_token FROM c WHERE ord <= 3 ORDER BY ord)), 3,
          'complete_many 3 jobs');
SELECT results_eq($$SELECT completed, failed, dead FROM jobq._counter WHERE queue = 'k'$$, $$VALUES (3::bigint, 0::bigint, 0::bigint)$$,
                  'one counter row for the statement: 3 completed, in the current minute');
SELECT is((SELECT bucket FROM jobq._counter WHERE queue = 'k'), date_trunc('minute', now()), 'the bucket is the minute');
SELECT ok((SELECT jobq.fail(id, 'e1', lease_token) FROM c WHERE ord = 4), 'fail a job with attempts left');
SELECT results_eq($$SELECT * FROM pg_temp.sums('k')$$, $$VALUES (3::bigint, 1::bigint, 0::bigint)$$,
                  'a retried failure counts 1 failed attempt, no dead');
SELECT is(jobq.cancel((SELECT id FROM c WHERE ord = 5)), true, 'cancel a running job');
SELECT results_eq($$SELECT * FROM pg_temp.sums('k')$$, $$VALUES (3::bigint, 1::bigint, 0::bigint)$$, 'cancel counts nothing');
-- second attempt of job 4 fails for good
UPDATE jobq._job SET run_at = now() WHERE id = (SELECT id FROM c WHERE ord = 4);
CREATE TEMP TABLE c4b AS SELECT * FROM jobq.claim('k', 1);
SELECT is((SELECT id FROM c4b), (SELECT id FROM c WHERE ord = 4), 'setup: job 4 claimed for its second (last) attempt');
SELECT ok((SELECT jobq.fail(id, 'e2', lease_token) FROM c4b), 'fail it again: out of attempts');
SELECT results_eq($$SELECT * FROM pg_temp.sums('k')$$, $$VALUES (3::bigint, 2::bigint, 1::bigint)$$,
                  'a dead-lettering failure counts 1 failed attempt and 1 dead job');
-- reap: every reaped lease is a failed attempt; out of attempts also dead
UPDATE jobq._job SET lease_expires_at = now() - interval '1 second' WHERE id = (SELECT id FROM c WHERE ord = 6);
SELECT is(jobq.reap(), 1, 'reap one expired lease (attempts left)');
SELECT results_eq($$SELECT * FROM pg_temp.sums('k')$$, $$VALUES (3::bigint, 3::bigint, 1::bigint)$$, 'a reaped lease counts 1 failed attempt');
CREATE TEMP TABLE c6 AS SELECT * FROM jobq.claim('k', 1);
UPDATE jobq._job SET lease_expires_at = now() - interval '1 second' WHERE id = (SELECT id FROM c6);
SELECT is(jobq.reap(), 1, 'reap it again: its last attempt');
SELECT results_eq($$SELECT * FROM pg_temp.sums('k')$$, $$VALUES (3::bigint, 4::bigint, 2::bigint)$$,
                  'a reaped lease out of attempts counts 1 failed and 1 dead');
SELECT results_eq($$SELECT completed_total, failed_total, dead_total, dead FROM jobq.stats WHERE queue = 'k'$$,
                  $$VALUES (3::bigint, 4::bigint, 2::bigint, 2::bigint)$$, 'jobq.stats shows the totals (and the 2 dead jobs kept)');
SELECT is((SELECT count(*)::int FROM jobq._counter WHERE queue = 'k'), 1,
          'reap folded the per-statement rows of this minute into one row');
SELECT is(jobq.retry_dead('k'), 2, 'retry_dead brings both dead jobs back');
SELECT results_eq($$SELECT completed_total, failed_total, dead_total FROM jobq.stats WHERE queue = 'k'$$,
                  $$VALUES (3::bigint, 4::bigint, 2::bigint)$$, 'totals are history: a retry does not take them back');

-- folding -------------------------------------------------------------------------------------------
TRUNCATE jobq._counter;
INSERT INTO jobq._counter (queue, bucket, completed, failed, dead) VALUES
    ('f1', date_trunc('minute', now()), 1, 0, 0),
    ('f1', date_trunc('minute', now()), 2, 1, 0),
    ('f1', date_trunc('minute', now()), 3, 0, 1),
    ('f1', date_trunc('minute', now()) - interval '1 minute', 10, 0, 0),
    ('f1', date_trunc('minute', now()) - interval '1 minute', 20, 2, 2),
    ('f1', date_trunc('minute', now()) - interval '2 minutes', 7, 7, 7),       -- alone in its minute: untouched
    ('f1', date_trunc('minute', now()) - interval '2 days', 100, 10, 1),
    ('f1', date_trunc('minute', now()) - interval '3 days', 200, 20, 2),
    ('f1', '-infinity', 1000, 100, 10),
    ('f2', date_trunc('minute', now()), 5, 0, 0),
    ('f2', date_trunc('minute', now()) - interval '25 hours', 50, 5, 5);      -- alone, but older than a day
CREATE TEMP TABLE before AS
    SELECT queue, sum(completed) AS completed, sum(failed) AS failed, sum(dead) AS dead FROM jobq._counter GROUP BY queue;
SELECT lives_ok($$SELECT jobq._fold_counters()$$, 'fold the counters');
SELECT set_eq($$SELECT queue, sum(completed) AS c, sum(failed) AS f, sum(dead) AS d FROM jobq._counter GROUP BY queue$$,
              $$SELECT * FROM before$$, 'folding preserves every queue''s sums');
SELECT is_empty($$SELECT queue, bucket FROM jobq._counter GROUP BY queue, bucket HAVING count(*) > 1$$,
                'one row per queue and bucket');
SELECT results_eq(
    $$SELECT bucket, completed, failed, dead FROM jobq._counter WHERE queue = 'f1' ORDER BY bucket$$,
    $$VALUES ('-infinity'::timestamptz, 1300::bigint, 130::bigint, 13::bigint),
             (date_trunc('minute', now()) - interval '2 minutes', 7, 7, 7),
             (date_trunc('minute', now()) - interval '1 minute', 30, 2, 2),
             (date_trunc('minute', now()), 6, 1, 1)$$,
    'f1: one row per minute of the last day; rows older than a day folded into the -infinity row');
SELECT results_eq(
    $$SELECT bucket, completed FROM jobq._counter WHERE queue = 'f2' ORDER BY bucket$$,
    $$VALUES ('-infinity'::timestamptz, 50::bigint), (date_trunc('minute', now()), 5)$$,
    'f2: a lone row older than a day moves to -infinity');
CREATE TEMP TABLE once AS SELECT to_jsonb(c) AS row FROM jobq._counter AS c;
SELECT lives_ok($$SELECT jobq._fold_counters()$$, 'fold again');
SELECT set_eq($$SELECT to_jsonb(c) FROM jobq._counter AS c$$, $$SELECT row FROM once$$, 'folding folded counters changes nothing');
SELECT results_eq($$SELECT completed_total, failed_total, dead_total FROM jobq.stats WHERE queue = 'f1'$$,
                  $$VALUES (1343::bigint, 140::bigint, 23::bigint)$$, 'jobq.stats sums every bucket, -infinity included');
INSERT INTO jobq._counter (queue, bucket, completed) VALUES ('f1', now() - interval '5 days', 1), ('f1', date_trunc('minute', now()), 1);
SELECT is(jobq.prune(), 0, 'prune (nothing to prune) also folds');
SELECT results_eq($$SELECT count(*)::int, sum(completed)::int FROM jobq._counter WHERE queue = 'f1'$$, $$VALUES (4, 1345)$$,
                  'prune folded the new rows into the existing -infinity and current-minute rows');

SELECT * FROM finish();
ROLLBACK;

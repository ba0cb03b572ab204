-- Per-queue concurrency limit: a queue configured with concurrency = k never
-- has more than k running jobs; a claim that finds no free slot returns
-- fewer jobs (never waits, never fails). 0 removes the limit.
-- (Several sessions racing for slots: tests/test_coordination.py.)
BEGIN;
SELECT plan(40);

CREATE FUNCTION pg_temp.running(p_queue text) RETURNS int LANGUAGE sql AS $$
    SELECT count(*)::int FROM jobq._job WHERE queue = p_queue AND status = 'running'
$$;
CREATE TEMP TABLE held AS SELECT * FROM jobq.claim('none', 0);

-- settings -----------------------------------------------------------------------
SELECT is((jobq.configure_queue('lim', concurrency => 3)).concurrency, 3, 'configure_queue(concurrency => 3) returns the setting');
SELECT is((SELECT concurrency FROM jobq.queues WHERE queue = 'lim'), 3, 'jobq.queues shows concurrency 3');
SELECT is((jobq.configure_queue('lim', lease => interval '1 minute')).concurrency, 3,
          'configuring another setting keeps the limit');
SELECT is((jobq._settings('unlimited')).concurrency, NULL, 'by default a queue has no concurrency limit');
SELECT lives_ok($$SELECT jobq.configure_queue('edge', concurrency => 1)$$, 'concurrency 1 is accepted');
SELECT lives_ok($$SELECT jobq.configure_queue('edge', concurrency => 10000)$$, 'concurrency 10000 is accepted');

-- claims never exceed the free slots ----------------------------------------------------
SELECT jobq.enqueue_many('lim', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 8) AS g), max_attempts => 5);
INSERT INTO held SELECT * FROM jobq.claim('lim', 10, 'w');
SELECT is((SELECT count(*)::int FROM held), 3, 'claim(n => 10) on a queue limited to 3 returns 3 jobs');
SELECT is((SELECT array_agg((payload->>'i')::int ORDER BY id) FROM held), ARRAY[1, 2, 3], 'the 3 most urgent ones');
SELECT is(pg_temp.running('lim'), 3, '3 jobs are running');
SELECT is((SELECT count(*)::int FROM jobq.claim('lim', 10)), 0, 'with every slot taken, claim returns nothing');
SELECT is((SELECT count(*)::int FROM jobq.claim(ARRAY['lim'], 1)), 0, 'and so does claim(text[]) asking for one');
SELECT is(pg_temp.running('lim'), 3, 'still 3 running');

SELECT ok(jobq.complete(h.id, h.lease_token), 'complete one job') FROM held AS h ORDER BY h.id LIMIT 1;
DELETE FROM held WHERE id = (SELECT min(id) FROM held);
INSERT INTO held SELECT * FROM jobq.claim('lim', 10, 'w');
SELECT is(pg_temp.running('lim'), 3, 'completing a job frees exactly one slot: the next claim takes one job');

-- fail (retry), release and snooze free a slot too --------------------------------------------------
SELECT ok(jobq.fail(h.id, 'x', h.lease_token, now() + interval '1 hour'), 'a running job fails and will retry later')
FROM held AS h ORDER BY h.id LIMIT 1;
DELETE FROM held WHERE id = (SELECT min(id) FROM held);
SELECT is(pg_temp.running('lim'), 2, 'the failed job no longer holds a slot');
INSERT INTO held SELECT * FROM jobq.claim('lim', 10, 'w');
SELECT is(pg_temp.running('lim'), 3, 'the freed slot is taken by the next claim');
SELECT ok(jobq.release(h.id, h.lease_token), 'release a job') FROM held AS h ORDER BY h.id LIMIT 1;
DELETE FROM held WHERE id = (SELECT min(id) FROM held);
INSERT INTO held SELECT * FROM jobq.claim('lim', 10, 'w');
SELECT is(pg_temp.running('lim'), 3, 'a released slot is taken again, never more than 3');
SELECT ok(jobq.snooze(h.id, h.lease_token, now() + interval '1 hour'), 'snooze a job') FROM held AS h ORDER BY h.id DESC LIMIT 1;
DELETE FROM held WHERE id = (SELECT max(id) FROM held);
SELECT is(pg_temp.running('lim'), 2, 'a snoozed job no longer holds a slot');
INSERT INTO held SELECT * FROM jobq.claim('lim', 10, 'w');
SELECT is(pg_temp.running('lim'), 3, 'its slot is taken by the next claim, never more than 3');

-- reaping an expired running job frees its slot ------------------------------------------------------------
UPDATE jobq._job SET lease_expires_at = now() - interval '1 second'
WHERE id = (SELECT min(id) FROM jobq._job WHERE queue = 'lim' AND status = 'running');
SELECT is((SELECT count(*)::int FROM jobq.claim('lim', 10)), 0, 'an expired but unreaped job still holds its slot');
SELECT is(jobq.reap(), 1, 'reap returns the expired job');
SELECT is(pg_temp.running('lim'), 2, 'the reaped job no longer holds a slot');
SELECT is((SELECT count(*)::int FROM jobq.claim('lim', 10)), 1, 'the next claim takes the freed slot (one job)');
SELECT is(pg_temp.running('lim'), 3, 'back at the limit');

-- lowering the limit below the running count ------------------------------------------------------------------
SELECT is((jobq.configure_queue('lim', concurrency => 1)).concurrency, 1, 'lower the limit to 1 while 3 run');
SELECT is((SELECT count(*)::int FROM jobq.claim('lim', 10)), 0, 'over the limit, claim returns nothing (and no error)');
SELECT is(pg_temp.running('lim'), 3, 'running jobs are not touched');

-- 0 removes the limit ---------------------------------------------------------------------------------------------
SELECT is((jobq.configure_queue('lim', concurrency => 0)).concurrency, NULL, 'concurrency => 0 removes the limit');
SELECT is((SELECT concurrency FROM jobq._queue WHERE queue = 'lim'), NULL, 'the stored setting is NULL');
SELECT is((SELECT count(*)::int FROM jobq.claim('lim', 10)), 2, 'without a limit every ready job is claimed (the 2 left; 2 more wait for later)');
SELECT is(pg_temp.running('lim'), 5, '5 jobs run at once');
SELECT is((jobq.configure_queue('lim', concurrency => 2)).concurrency, 2, 'set a limit of 2 again');
SELECT ok(jobq.reset_queue('lim'), 'reset_queue');
SELECT is((jobq._settings('lim')).concurrency, NULL, 'reset_queue removes the limit too');

-- a multi-queue claim respects each queue's limit ----------------------------------------------------------------
DO $$ BEGIN
    PERFORM jobq.configure_queue('one', concurrency => 1);
    PERFORM jobq.configure_queue('two', concurrency => 2);
    PERFORM jobq.enqueue_many(q, ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 4) AS g))
    FROM unnest(ARRAY['one', 'two', 'free']) AS q;
END $$;
CREATE TEMP TABLE mq AS SELECT * FROM jobq.claim(ARRAY['one', 'two', 'free'], 20, 'w');
SELECT set_eq($$SELECT queue, count(*)::int FROM mq GROUP BY queue$$,
              $$VALUES ('one'::text, 1), ('two', 2), ('free', 4)$$,
              'claim(ARRAY[one, two, free], 20) takes 1 + 2 + 4 jobs: each queue''s own limit');
SELECT is((SELECT count(*)::int FROM jobq.claim(ARRAY['one', 'two'], 20)), 0, 'then the limited queues give nothing more');
SELECT is((SELECT count(*)::int FROM jobq.claim(ARRAY['two', 'one', 'two'], 1)), 0, 'however they are named');

SELECT * FROM finish();
ROLLBACK;

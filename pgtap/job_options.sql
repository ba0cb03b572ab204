-- Job and queue options and their verbs (since 0.4.0): timeouts, unique_for,
-- worker-run periodic jobs, cancel_jobs/discard_dead, lease tokens as text,
-- untyped queue arrays, fixed-length durations, limits no session setting
-- can change, and what the views say of them.
BEGIN;
SELECT plan(38);

-- timeout: the job's own, else the queue's, fixed at enqueue ------------------------------------
SELECT jobq.configure_queue('to', timeout => '30 seconds');
SELECT is((SELECT timeout FROM jobq.queues WHERE queue = 'to'), interval '30 seconds', 'a queue timeout setting');
SELECT jobq.enqueue('to', '{"n": 1}', timeout => '2 seconds');
SELECT jobq.enqueue('to', '{"n": 2}');
SELECT jobq.configure_queue('to', timeout => '0');
SELECT jobq.enqueue('to', '{"n": 3}');
SELECT results_eq($$SELECT timeout FROM jobq.claim('to', 3) ORDER BY id$$,
                  $$VALUES (interval '2 seconds'), (interval '30 seconds'), (NULL::interval)$$,
                  'claim returns each job''s timeout: its own, the queue''s when enqueued, none after the setting went');
SELECT is((SELECT timeout FROM jobq.queues WHERE queue = 'to'), NULL::interval, 'timeout => 0 removes the setting');
SELECT throws_ok($$SELECT jobq.enqueue('to', '{}', timeout => '0')$$, 'JQ008', NULL, 'timeout 0 on a job: JQ008');
SELECT throws_ok($$SELECT jobq.configure_queue('to', timeout => '1 mon')$$, 'JQ012', NULL,
                 'a queue timeout of a month: JQ012');

-- unique_for ------------------------------------------------------------------------------------
CREATE TEMP TABLE u AS SELECT jobq.enqueue('uf', '{}', job_key => 'daily', unique_for => '1 hour') AS id;
SELECT ok(jobq.complete(c.id, c.lease_token), 'setup: the keyed job completes') FROM jobq.claim('uf') AS c;
SELECT is(jobq.enqueue('uf', '{}', job_key => 'daily', unique_for => '1 hour'), (SELECT id FROM u),
          'within unique_for of its completion, the key returns the completed job''s id');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'uf'), 0, '... and adds nothing');
SELECT isnt(jobq.enqueue('uf', '{}', job_key => 'daily'), (SELECT id FROM u), 'without unique_for a new job is added');
SELECT throws_ok($$SELECT jobq.enqueue('uf', '{}', unique_for => '1 hour')$$, 'JQ009', NULL,
                 'unique_for without a job_key: JQ009');

-- worker-run periodic jobs ----------------------------------------------------------------------
SELECT is(jobq._cron_next('*/15 * * * *', '2026-11-23 15:37:10+00'), '2026-11-23 15:45:00+00'::timestamptz,
          'cron: */15 after 15:37:10 is 15:45 UTC');
SELECT is(jobq._cron_next('0 0 29 2 *', '2026-11-23 15:37:10+00'), '2028-02-29 00:00:00+00'::timestamptz,
          'cron: February 29th, years ahead');
SELECT is(jobq._cron_next('0 0 31 2 *', now()), NULL, 'cron: a schedule that never fires has no next tick');
SELECT is(jobq.every('tick', '* * * * *', 'pq', '{"p": 1}', runner => 'workers'), NULL,
          'every(runner => ''workers'') returns no pg_cron job id');
SELECT results_eq($$SELECT runner, next_run_at > now(), last_run_at FROM jobq.schedules WHERE name = 'tick'$$,
                  $$VALUES ('workers', true, NULL::timestamptz)$$, 'jobq.schedules shows the runner and next tick');
UPDATE jobq._periodic SET next_run_at = now() - interval '2 hours' WHERE name = 'tick';
SELECT cmp_ok(jobq.run_schedules(), '>', now(), 'run_schedules returns the next tick, in the future');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'pq' AND job_key = 'every:tick'), 1,
          'two hours of missed ticks enqueue one run');
SELECT is((SELECT last_run_at FROM jobq.schedules WHERE name = 'tick'), now() - interval '2 hours',
          'the late tick is recorded as the last run');
SELECT cmp_ok(jobq.run_schedules(), '>', now(), 'calling again enqueues nothing');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'pq'), 1, '... still one run');
SELECT ok(jobq.unschedule('tick'), 'unschedule a worker-run schedule');
SELECT is(jobq.run_schedules(), NULL, 'with no worker-run schedule left, run_schedules returns NULL');

-- operator verbs --------------------------------------------------------------------------------
SELECT jobq.enqueue('cj', '{"customer": 1}'), jobq.enqueue('cj', '{"customer": 2}'),
       jobq.enqueue('cj', '{"customer": 1}', run_at => now() + interval '1 hour');
SELECT is(jobq.cancel_jobs('cj', 'ready', '{"customer": 1}'), 1, 'cancel_jobs: ready jobs containing the filter');
SELECT is(jobq.cancel_jobs('cj'), 2, 'cancel_jobs: every live job left');
SELECT is((SELECT count(*)::int FROM jobq.jobs WHERE queue = 'cj' AND status = 'cancelled'), 3, 'all three cancelled');
SELECT jobq.enqueue('dd', '{}', max_attempts => 1);
SELECT jobq.fail(c.id, 'boom', c.lease_token) FROM jobq.claim('dd') AS c;
SELECT is(jobq.discard_dead('dd', interval '1 day'), 0, 'discard_dead older_than: a fresh dead job stays');
SELECT is(jobq.discard_dead('dd'), 1, 'discard_dead: every dead job of the queue');

-- lease tokens as text, untyped queue arrays, NULL errors, durations -----------------------------
SELECT jobq.enqueue('tx', '{}'), jobq.enqueue('ty', '{}');
CREATE TEMP TABLE c AS SELECT * FROM jobq.claim('{tx,ty}', 5);
SELECT is((SELECT count(*)::int FROM c), 2, 'claim(''{tx,ty}'') (an untyped array) claims across both queues');
SELECT throws_ok($$SELECT jobq.complete((SELECT min(id) FROM c), '7f9c-lease-token')$$, '22P02', NULL,
                 'a lease token that is not a UUID: PostgreSQL''s 22P02 (jobq 0.11: a uuid parameter only)');
SELECT hasnt_function('jobq', 'complete', ARRAY['bigint', 'text', 'jsonb'],
                      'no text-token overload: an untyped token resolves to the uuid one, as typed drivers need');
SELECT ok(jobq.complete(id, lease_token), 'the claimed token completes') FROM c WHERE queue = 'tx';
SELECT throws_ok($$SELECT jobq.fail(id, NULL, lease_token) FROM c WHERE queue = 'ty'$$, 'JQ017', NULL,
                 'fail with a NULL error: JQ017');
SELECT throws_ok($$SELECT jobq.claim('tx', 1, NULL, interval '1 mon -30 days 1 second')$$, 'JQ008', NULL,
                 'a lease with a month part: JQ008');
SELECT throws_ok($$SELECT jobq.heartbeat(id, lease_token, interval '1 day -23:59:59') FROM c WHERE queue = 'ty'$$,
                 'JQ008', NULL, 'an extend whose day and time differ in sign: JQ008');

-- limits and views ------------------------------------------------------------------------------
SELECT jobq.configure_queue('lim', concurrency => 1);
SELECT jobq.enqueue('lim', '{}') FROM generate_series(1, 6);
SELECT is((SELECT count(*)::int FROM jobq.claim('lim', 5)), 1, 'concurrency 1: one job');
SET LOCAL jobq.taken = '{"lim": -1000}';
SELECT is((SELECT count(*)::int FROM jobq.claim('lim', 5)), 0, 'a session setting cannot lift the limit');
SELECT is((SELECT oldest_ready_age FROM jobq.stats WHERE queue = 'dd'), NULL::interval,
          'jobq.stats.oldest_ready_age is NULL when nothing is ready');
SELECT results_eq($$SELECT updated_at, concurrency, rate_limit FROM jobq.queues WHERE queue = 'ty'$$,
                  $$VALUES (NULL::timestamptz, 0, 0)$$,
                  'jobq.queues: never configured (NULL updated_at), 0 for no limit');

SELECT * FROM finish();
ROLLBACK;

-- Operator API: retry, retry_dead, cancel, prune, configure_queue,
-- reset_queue, and the jobq.stats / jobq.jobs / jobq.queues views.
BEGIN;
SELECT plan(73);
SET LOCAL client_min_messages = warning;

CREATE TEMP TABLE t (name text PRIMARY KEY, id bigint);

-- retry ----------------------------------------------------------------------
-- Queue op keeps completed history (opt-in since 0.3.0: default retention 0).
SELECT is((jobq.configure_queue('op', retention => interval '1 day')).retention, interval '1 day',
          'setup: queue op keeps a day of history');
INSERT INTO t VALUES ('dead', jobq.enqueue('op', '{"d": 1}', now() - interval '1 hour', 3, 1, 'dk'));
DO $$ BEGIN PERFORM jobq.fail(c.id, 'boom', c.lease_token) FROM jobq.claim('op', 1, 'w') AS c; END $$;
SELECT is((SELECT status FROM jobq._job_archive WHERE id = (SELECT id FROM t WHERE name = 'dead')), 'dead', 'setup: a dead job');
SELECT is(jobq.retry((SELECT id FROM t WHERE name = 'dead')), true, 'retry of a dead job returns true');
SELECT results_eq(
    $$SELECT id, queue, payload, status, priority::int, run_at, attempts, max_attempts, job_key, last_error,
             created_at, lease_token
      FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'dead')$$,
    $$VALUES ((SELECT id FROM t WHERE name = 'dead'), 'op'::text, '{"d": 1}'::jsonb, 'ready'::text, 3, now(), 0, 1,
              'dk'::text, 'boom'::text, now(), NULL::uuid)$$,
    'the retried job is live again: same id, payload, key and priority, ready now, fresh attempts, last error kept');
SELECT is((SELECT count(*)::int FROM jobq._job_archive WHERE id = (SELECT id FROM t WHERE name = 'dead')), 0,
          'and it left the archive');
SELECT is(jobq.retry((SELECT id FROM t WHERE name = 'dead')), true, 'retry of a ready job returns true');

SELECT is((SELECT count(*)::int FROM jobq.claim('op')), 1, 'the retried job can be claimed');
SELECT is(jobq.retry((SELECT id FROM t WHERE name = 'dead')), false, 'retry of a running job returns false');
SELECT is((SELECT status FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'dead')), 'running', 'the running job is untouched');

INSERT INTO t VALUES ('sched', jobq.enqueue('op', '{}', now() + interval '2 hours'));
SELECT is(jobq.retry((SELECT id FROM t WHERE name = 'sched')), true, 'retry of a scheduled job returns true');
SELECT is((SELECT run_at FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'sched')), now(),
          'a retried scheduled job runs now');

INSERT INTO t VALUES ('done', jobq.enqueue('op', '{}', priority => -100));
DO $$ BEGIN PERFORM jobq.complete(c.id, c.lease_token) FROM jobq.claim('op') AS c; END $$;
SELECT is((SELECT status FROM jobq._job_archive WHERE id = (SELECT id FROM t WHERE name = 'done')), 'completed', 'setup: a completed job');
SELECT is(jobq.retry((SELECT id FROM t WHERE name = 'done')), false, 'retry of a completed job returns false');
SELECT is((SELECT status FROM jobq._job_archive WHERE id = (SELECT id FROM t WHERE name = 'done')), 'completed',
          'the completed job stays completed');
SELECT is(jobq.retry(-1), false, 'retry of an unknown id returns false');

-- cancel -----------------------------------------------------------------------
INSERT INTO t VALUES ('c_ready', jobq.enqueue('cq', '{"c": 1}'));
SELECT is(jobq.cancel((SELECT id FROM t WHERE name = 'c_ready')), true, 'cancel of a ready job returns true');
SELECT results_eq(
    $$SELECT status, payload, last_error, prune_after - finished_at FROM jobq._job_archive WHERE id = (SELECT id FROM t WHERE name = 'c_ready')$$,
    $$VALUES ('cancelled'::text, '{"c": 1}'::jsonb, ('cancelled by ' || session_user) COLLATE "default", NULL::interval)$$,
    'a cancelled job is archived as cancelled, saying who cancelled it, kept until retried (default dead_retention NULL)');
DO $$ BEGIN PERFORM jobq.configure_queue('cq_dr', dead_retention => interval '3 hours'); END $$;
INSERT INTO t VALUES ('c_dr', jobq.enqueue('cq_dr', '{}'));
SELECT ok(jobq.cancel((SELECT id FROM t WHERE name = 'c_dr')), 'cancel a job of a queue with dead_retention 3 hours');
SELECT is((SELECT prune_after - finished_at FROM jobq._job_archive WHERE id = (SELECT id FROM t WHERE name = 'c_dr')),
          interval '3 hours', 'a cancelled job is pruned after dead_retention');
SELECT is(jobq.cancel((SELECT id FROM t WHERE name = 'c_ready')), false, 'cancelling it again returns false');
SELECT is(jobq.cancel((SELECT id FROM t WHERE name = 'done')), false, 'cancel of a completed job returns false');
SELECT is(jobq.cancel(-1), false, 'cancel of an unknown id returns false');
INSERT INTO t VALUES ('c_sched', jobq.enqueue('cq', '{}', now() + interval '1 day'));
SELECT is(jobq.cancel((SELECT id FROM t WHERE name = 'c_sched')), true, 'cancel of a scheduled job returns true');

INSERT INTO t VALUES ('c_run', jobq.enqueue('cq', '{"c": "run"}'));
CREATE TEMP TABLE holder AS SELECT * FROM jobq.claim('cq', 1, 'holder');
SELECT is((SELECT id FROM holder), (SELECT id FROM t WHERE name = 'c_run'), 'setup: the job is running');
SELECT is(jobq.cancel((SELECT id FROM t WHERE name = 'c_run')), true, 'cancel of a running job returns true');
SELECT is((SELECT status FROM jobq._job_archive WHERE id = (SELECT id FROM t WHERE name = 'c_run')), 'cancelled',
          'the running job is cancelled');
SELECT is(jobq.heartbeat((SELECT id FROM holder), (SELECT lease_token FROM holder)), false, 'its holder''s heartbeat returns false');
SELECT is(jobq.complete((SELECT id FROM holder), (SELECT lease_token FROM holder)), false, 'its holder''s complete returns false');
SELECT is(jobq.fail((SELECT id FROM holder), 'x', (SELECT lease_token FROM holder)), false, 'its holder''s fail returns false');
SELECT results_eq(
    $$SELECT status, last_error, worker FROM jobq._job_archive WHERE id = (SELECT id FROM t WHERE name = 'c_run')$$,
    $$VALUES ('cancelled'::text, ('cancelled by ' || session_user) COLLATE "default", 'holder'::text)$$,
    'the fenced-out holder changed nothing');

SELECT is(jobq.retry((SELECT id FROM t WHERE name = 'c_ready')), true, 'retry of a cancelled job returns true');
SELECT is((SELECT status FROM jobq.jobs WHERE id = (SELECT id FROM t WHERE name = 'c_ready')), 'ready', 'the cancelled job is ready again');

-- retry_dead -------------------------------------------------------------------
DO $$ BEGIN
    PERFORM jobq.enqueue_many('rd', ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}']::jsonb[], max_attempts => 1);
    PERFORM jobq.enqueue('rd_other', '{}', max_attempts => 1);
    PERFORM jobq.fail(c.id, 'err', c.lease_token) FROM jobq.claim(ARRAY['rd', 'rd_other'], 10) AS c;
END $$;
SELECT is((SELECT count(*)::int FROM jobq._job_archive WHERE queue IN ('rd', 'rd_other') AND status = 'dead'), 4, 'setup: four dead jobs in two queues');
SELECT is(jobq.retry_dead('rd'), 3, 'retry_dead returns how many came back');
SELECT results_eq($$SELECT count(*)::int, min(attempts), max(attempts), min(run_at), max(run_at) FROM jobq._job WHERE queue = 'rd'$$,
                  $$VALUES (3, 0, 0, now(), now())$$, 'they are ready now with fresh attempts');
SELECT is((SELECT count(*)::int FROM jobq._job_archive WHERE queue = 'rd_other'), 1, 'another queue''s dead job is untouched');
SELECT is(jobq.retry_dead('rd'), 0, 'a second retry_dead finds nothing');
SELECT is(jobq.retry_dead('nothing-here'), 0, 'retry_dead of an unknown queue returns 0');

-- prune ------------------------------------------------------------------------
-- Row by row, in the archive's default partition (jobq._job_archive_kept):
-- past days have no partition here, and the first prune creates today's
-- and later days, moving rows expiring then out of it (pgtap/archive_partitions.sql tests
-- the day partitions).
CREATE TEMP TABLE arch AS SELECT id FROM jobq._job_archive;
DO $$ BEGIN
    PERFORM jobq.cancel(id) FROM jobq.enqueue_many('pr', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 6))) AS id;
END $$;
UPDATE jobq._job_archive SET prune_after = now() + interval '1 hour' WHERE id NOT IN (SELECT id FROM arch);
WITH p AS (SELECT id, row_number() OVER (ORDER BY id) AS n FROM jobq._job_archive WHERE queue = 'pr')
UPDATE jobq._job_archive AS a
SET prune_after = CASE p.n WHEN 1 THEN now() - interval '1 day' WHEN 2 THEN now() - interval '3 days'
                           WHEN 3 THEN now() - interval '2 days' WHEN 4 THEN now()
                           WHEN 5 THEN NULL ELSE now() + interval '1 second' END
FROM p WHERE a.id = p.id;
CREATE TEMP TABLE expected_left AS SELECT id FROM jobq._job_archive WHERE prune_after IS NULL OR prune_after >= now();
SELECT is(jobq.prune(2), 2, 'prune(n) deletes at most n');
SELECT is((SELECT count(*)::int FROM jobq._job_archive WHERE queue = 'pr' AND prune_after < now()), 1,
          'prune(n) took the oldest prune_after first (one past-due row left)');
SELECT is(jobq.prune(), 1, 'prune deletes the remaining past-due row');
SELECT set_eq($$SELECT id FROM jobq._job_archive$$, $$SELECT id FROM expected_left$$,
              'exactly the rows with prune_after < now() were deleted (NULL, = now() and future are kept)');
SELECT is(jobq.prune(), 0, 'a second prune deletes nothing');
SELECT is(jobq.prune(0), 0, 'prune(0) deletes nothing');

-- configure_queue / reset_queue --------------------------------------------------
SELECT results_eq(
    $$SELECT queue, max_attempts, backoff_base, backoff_cap, backoff_jitter, lease, retention, dead_retention, max_payload_bytes
      FROM jobq.configure_queue('cfg', max_attempts => 5, lease => interval '1 minute')$$,
    $$VALUES ('cfg'::text, 5, interval '2 s', interval '1 hour', 0.25::float8, interval '1 minute', interval '0',
              NULL::interval, 1048576)$$,
    'configure_queue returns the effective settings: overrides over defaults');
SELECT results_eq(
    $$SELECT max_attempts, backoff_base, lease, retention FROM jobq.configure_queue('cfg', backoff_base => interval '5 s', retention => interval '0')$$,
    $$VALUES (5, interval '5 s', interval '1 minute', interval '0')$$,
    'a second configure_queue changes only the given settings');
SELECT results_eq(
    $$SELECT queue, max_attempts, backoff_base, lease, retention FROM jobq.queues WHERE queue = 'cfg'$$,
    $$VALUES ('cfg'::text, 5, interval '5 s', interval '1 minute', interval '0')$$,
    'jobq.queues shows the effective settings of a configured queue');
SELECT results_eq(
    $$SELECT max_attempts, backoff_base, backoff_cap, backoff_jitter, lease, retention, max_payload_bytes FROM jobq.queues WHERE queue = 'rd'$$,
    $$VALUES (25, interval '2 s', interval '1 hour', 0.25::float8, interval '5 minutes', interval '0', 1048576)$$,
    'jobq.queues shows the defaults for a queue that only has jobs (retention 0: no completed history)');
SELECT ok((SELECT count(*) FROM jobq.queues WHERE queue = 'rd_other') = 1, 'jobq.queues lists a queue that only has dead jobs');

-- retention 0 keeps no completed or cancelled history (dead jobs are kept)
DO $$ BEGIN PERFORM jobq.enqueue_many('cfg', ARRAY['{"k": "c"}', '{"k": "x"}', '{"k": "d"}']::jsonb[], max_attempts => 1); END $$;
CREATE TEMP TABLE cc AS SELECT * FROM jobq.claim('cfg', 3);
SELECT ok(jobq.complete((SELECT id FROM cc WHERE payload->>'k' = 'c'), (SELECT lease_token FROM cc WHERE payload->>'k' = 'c'))
          AND jobq.cancel((SELECT id FROM cc WHERE payload->>'k' = 'x'))
          AND jobq.fail((SELECT id FROM cc WHERE payload->>'k' = 'd'), 'e', (SELECT lease_token FROM cc WHERE payload->>'k' = 'd')),
          'complete, cancel and dead-letter one job each in a queue with retention 0');
SELECT is((SELECT array_agg(status ORDER BY status) FROM jobq.jobs WHERE queue = 'cfg'), ARRAY['cancelled', 'dead'],
          'retention 0: no completed history; the cancelled and the dead job are always kept');
SELECT is((SELECT array_agg(prune_after ORDER BY status) FROM jobq._job_archive WHERE queue = 'cfg'), ARRAY[NULL, NULL]::timestamptz[],
          'both kept until retried (dead_retention NULL)');

SELECT is(jobq.reset_queue('cfg'), true, 'reset_queue returns true when there were overrides');
SELECT results_eq($$SELECT max_attempts, backoff_base, lease, retention FROM jobq.queues WHERE queue = 'cfg'$$,
                  $$VALUES (25, interval '2 s', interval '5 minutes', interval '0')$$, 'after reset the queue has the defaults');
SELECT is(jobq.reset_queue('cfg'), false, 'reset_queue returns false when there were none');

SELECT throws_ok($$SELECT jobq.configure_queue('cfg', max_attempts => 0)$$, 'JQ012', 'jobq: setting max_attempts is out of range', 'max_attempts 0: JQ012 naming the setting');
SELECT throws_ok($$SELECT jobq.configure_queue('cfg', max_attempts => 1001)$$, 'JQ012', 'jobq: setting max_attempts is out of range', 'max_attempts 1001: JQ012');
SELECT throws_ok($$SELECT jobq.configure_queue('cfg', backoff_base => interval '-1 s')$$, 'JQ012', 'jobq: setting backoff_base is out of range', 'negative backoff_base: JQ012');
SELECT throws_ok($$SELECT jobq.configure_queue('cfg', backoff_base => interval '2 days')$$, 'JQ012', 'jobq: setting backoff_base is out of range', 'backoff_base 2 days: JQ012');
SELECT throws_ok($$SELECT jobq.configure_queue('cfg', backoff_cap => interval '31 days')$$, 'JQ012', 'jobq: setting backoff_cap is out of range', 'backoff_cap 31 days: JQ012');
SELECT throws_ok($$SELECT jobq.configure_queue('cfg', backoff_jitter => 1.5)$$, 'JQ012', 'jobq: setting backoff_jitter is out of range', 'backoff_jitter 1.5: JQ012');
SELECT throws_ok($$SELECT jobq.configure_queue('cfg', backoff_jitter => -0.1)$$, 'JQ012', 'jobq: setting backoff_jitter is out of range', 'backoff_jitter -0.1: JQ012');
SELECT throws_ok($$SELECT jobq.configure_queue('cfg', lease => interval '0 s')$$, 'JQ012', 'jobq: setting lease is out of range', 'lease 0 s: JQ012');
SELECT throws_ok($$SELECT jobq.configure_queue('cfg', lease => interval '2 days')$$, 'JQ012', 'jobq: setting lease is out of range', 'lease 2 days: JQ012');
SELECT throws_ok($$SELECT jobq.configure_queue('cfg', retention => interval '-1 s')$$, 'JQ012', 'jobq: setting retention is out of range', 'negative retention: JQ012');
SELECT throws_ok($$SELECT jobq.configure_queue('cfg', dead_retention => interval '0')$$, 'JQ012', 'jobq: setting dead_retention is out of range', 'dead_retention 0: JQ012');
SELECT throws_ok($$SELECT jobq.configure_queue('cfg', max_payload_bytes => 0)$$, 'JQ012', 'jobq: setting max_payload_bytes is out of range', 'max_payload_bytes 0: JQ012');
SELECT is((SELECT count(*)::int FROM jobq._queue WHERE queue = 'cfg'), 0, 'rejected settings stored nothing');

-- views --------------------------------------------------------------------------
DO $$ BEGIN
    PERFORM jobq.configure_queue('v', retention => interval '1 hour');
    PERFORM jobq.enqueue('v', '{"s": "running"}', now() - interval '10 minutes');
    PERFORM jobq.claim('v');
    PERFORM jobq.enqueue('v', '{"s": "ready"}', now() - interval '5 minutes');
    PERFORM jobq.enqueue('v', '{"s": "ready2"}', now() - interval '1 minute');
    PERFORM jobq.enqueue('v', '{"s": "scheduled"}', now() + interval '5 minutes');
    PERFORM jobq.enqueue('v', '{"s": "completed"}', now() - interval '20 minutes', max_attempts => 1);
    PERFORM jobq.complete(c.id, c.lease_token) FROM jobq.claim('v') AS c;
    PERFORM jobq.enqueue('v', '{"s": "dead"}', now() - interval '20 minutes', max_attempts => 1);
    PERFORM jobq.fail(c.id, 'e', c.lease_token) FROM jobq.claim('v') AS c;
    PERFORM jobq.cancel(jobq.enqueue('v', '{"s": "cancelled"}'));
END $$;
SELECT is_empty($$SELECT payload->>'s', status FROM jobq.jobs WHERE queue = 'v' AND payload->>'s' NOT LIKE status || '%'$$,
                'jobq.jobs reports ready, scheduled, running, completed, dead and cancelled');
SELECT is((SELECT count(DISTINCT status)::int FROM jobq.jobs WHERE queue = 'v'), 6, 'all six statuses appear');
SELECT results_eq($$SELECT ready::int, scheduled::int, running::int, dead::int, oldest_ready_age FROM jobq.stats WHERE queue = 'v'$$,
                  $$VALUES (2, 1, 1, 1, interval '5 minutes')$$,
                  'jobq.stats counts ready, scheduled, running, dead and the oldest ready age');
SELECT results_eq($$SELECT completed_total::int, failed_total::int, dead_total::int FROM jobq.stats WHERE queue = 'v'$$,
                  $$VALUES (1, 1, 1)$$,
                  'jobq.stats totals: 1 completed, 1 failed attempt, 1 dead-lettered (cancelled counts in none)');
SELECT results_eq($$SELECT ready::int, scheduled::int, running::int, dead::int, oldest_ready_age FROM jobq.stats WHERE queue = 'rd_other'$$,
                  $$VALUES (0, 0, 0, 1, NULL::interval)$$,
                  'jobq.stats lists a queue with only dead jobs (oldest_ready_age NULL: nothing is ready)');

SELECT * FROM finish();
ROLLBACK;

-- jobq.hold() / complete_held() / fail_held() (0.3.0): in-transaction
-- processing job by job. hold row-locks ready jobs and writes nothing;
-- complete_held deletes them (done at commit, counted, archived only with
-- history); fail_held records a failed attempt (backoff, retry_at, dead
-- letter at max_attempts). A SAVEPOINT stands in for the caller's
-- transaction. Several sessions (NOWAIT, SKIP LOCKED, crashes) are tested in
-- tests/test_sql_sessions.py.
BEGIN;
SELECT plan(43);

DO $$ BEGIN
    PERFORM jobq.enqueue('h', '{"n": "late"}', now() - interval '1 minute', 0);
    PERFORM jobq.enqueue('h', '{"n": "urgent"}', now(), -5);
    PERFORM jobq.enqueue('h', '{"n": "old"}', now() - interval '1 hour', 0, 3, 'kold');
    PERFORM jobq.enqueue('h', '{"n": "future"}', now() + interval '1 hour', -10);
END $$;
CREATE TEMP TABLE before AS SELECT to_jsonb(j) AS row FROM jobq._job AS j;
CREATE TEMP TABLE io AS
    SELECT n_tup_ins, n_tup_upd, n_tup_del FROM pg_catalog.pg_stat_xact_user_tables WHERE relid = 'jobq._job'::regclass;

-- hold: rows as a claim would show them, nothing written -------------------------------------------
SAVEPOINT work;
CREATE TEMP TABLE got AS SELECT row_number() OVER () AS ord, x.* FROM jobq.hold('h', 2) AS x;
SELECT is(ARRAY(SELECT payload->>'n' FROM got ORDER BY ord), ARRAY['urgent', 'old'],
          'hold(n => 2) returns the most urgent due jobs: priority, then run_at');
SELECT is((SELECT array_agg(DISTINCT attempts) FROM got), ARRAY[1], 'attempts shows this attempt (stored attempts + 1)');
SELECT is((SELECT count(*)::int FROM got WHERE lease_token IS NULL AND lease_expires_at IS NULL), 2, 'no lease');
SELECT is((SELECT array_agg(DISTINCT worker) FROM got), ARRAY[session_user::text], 'worker is the session user');
SELECT set_eq($$SELECT to_jsonb(j) FROM jobq._job AS j$$, $$SELECT row FROM before$$,
              'hold changed no row: the held jobs are still ready, attempts 0, no lease');
SELECT results_eq($$SELECT s.n_tup_upd - io.n_tup_upd, s.n_tup_del - io.n_tup_del
                    FROM pg_catalog.pg_stat_xact_user_tables AS s, io WHERE s.relid = 'jobq._job'::regclass$$,
                  $$VALUES (0::bigint, 0::bigint)$$, 'hold wrote nothing to jobq._job (0 updates, 0 deletes)');
SELECT is((SELECT count(*)::int FROM jobq._counter), 0, 'and counted nothing');

-- complete_held ------------------------------------------------------------------------------------
SELECT is(jobq.complete_held(ARRAY(SELECT id FROM got WHERE ord = 1)), 1, 'complete_held one job returns 1');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id = (SELECT id FROM got WHERE ord = 1)), 0, 'it left the live table');
SELECT is((SELECT count(*)::int FROM jobq._job_archive), 0, 'no history by default (retention 0)');
SELECT results_eq($$SELECT completed, failed, dead FROM jobq._counter WHERE queue = 'h'$$, $$VALUES (1::bigint, 0::bigint, 0::bigint)$$,
                  'counted as completed');
SELECT is(jobq.complete_held(ARRAY(SELECT id FROM got WHERE ord = 1)), 0, 'completing it again returns 0');
ROLLBACK TO SAVEPOINT work;
SELECT set_eq($$SELECT to_jsonb(j) FROM jobq._job AS j$$, $$SELECT row FROM before$$,
              'rolled back: every job is back untouched');
SELECT is((SELECT count(*)::int FROM jobq._counter), 0, 'rolled back: no counter row');

-- fail_held: backoff, retry_at, error -------------------------------------------------------------
SAVEPOINT work2;
CREATE TEMP TABLE got2 AS SELECT x.* FROM jobq.hold('h', 3) AS x;
SELECT is((SELECT count(*)::int FROM got2), 3, 'hold 3 (the future job is not due)');
SELECT is(jobq.fail_held((SELECT id FROM got2 WHERE payload->>'n' = 'urgent'), 'boom'), true, 'fail_held returns true');
SELECT results_eq(
    $$SELECT status, parked, attempts, last_error, worker, lease_token IS NULL,
             run_at BETWEEN now() + interval '1.5 seconds' AND clock_timestamp() + interval '2 seconds'
      FROM jobq._job WHERE id = (SELECT id FROM got2 WHERE payload->>'n' = 'urgent')$$,
    $$VALUES ('ready'::text, false, 1, 'boom'::text, session_user::text COLLATE "default", true, true)$$,
    'the failed job waits for its backoff (2 s base, 25 % jitter): ready, attempts 1, the error and worker recorded');
SELECT ok(jobq.fail_held((SELECT id FROM got2 WHERE payload->>'n' = 'late'), 'later', now() + interval '1 day'),
          'fail_held with retry_at');
SELECT is((SELECT run_at FROM jobq._job WHERE id = (SELECT id FROM got2 WHERE payload->>'n' = 'late')), now() + interval '1 day',
          'retry_at overrides the backoff');
SELECT results_eq($$SELECT completed, failed, dead FROM jobq._counter WHERE queue = 'h' ORDER BY failed$$,
                  $$VALUES (0::bigint, 1::bigint, 0::bigint), (0, 1, 0)$$, 'each fail_held counts one failed attempt');
SELECT is(jobq.complete_held(ARRAY(SELECT id FROM got2 WHERE payload->>'n' = 'urgent')), 1,
          'complete_held of a job this transaction failed still finds it ready (the caller''s contract: acknowledge once)');
RELEASE SAVEPOINT work2;

-- max_attempts: dead letter -----------------------------------------------------------------------
DO $$ BEGIN
    PERFORM jobq.configure_queue('hd', retention => interval '1 hour');
    PERFORM jobq.enqueue('hd', '{"d": 1}', max_attempts => 1, job_key => 'dk');
    PERFORM jobq.enqueue('hd', '{"d": 2}', max_attempts => 3);
END $$;
CREATE TEMP TABLE gd AS SELECT x.* FROM jobq.hold('hd', 2) AS x;
SELECT ok(jobq.fail_held((SELECT id FROM gd WHERE payload->>'d' = '1'), 'fatal'), 'fail_held on the last attempt');
SELECT results_eq($$SELECT status, attempts, last_error, worker, prune_after FROM jobq._job_archive
                    WHERE id = (SELECT id FROM gd WHERE payload->>'d' = '1')$$,
                  $$VALUES ('dead'::text, 1, 'fatal'::text, session_user::text COLLATE "default", NULL::timestamptz)$$,
                  'out of attempts: dead-lettered with attempts 1, the error, kept until retried');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id = (SELECT id FROM gd WHERE payload->>'d' = '1')), 0, 'and out of the live table');
SELECT results_eq($$SELECT sum(failed)::int, sum(dead)::int FROM jobq._counter WHERE queue = 'hd'$$, $$VALUES (1, 1)$$,
                  'counted: 1 failed attempt, 1 dead');
SELECT isnt(jobq.enqueue('hd', '{}', job_key => 'dk'), (SELECT id FROM gd WHERE payload->>'d' = '1'),
            'the dead job''s job_key is free again');
SELECT is(jobq.complete_held(ARRAY(SELECT id FROM gd WHERE payload->>'d' = '2')), 1, 'complete_held the other');
SELECT results_eq($$SELECT status, attempts, worker FROM jobq._job_archive WHERE id = (SELECT id FROM gd WHERE payload->>'d' = '2')$$,
                  $$VALUES ('completed'::text, 1, session_user::text COLLATE "default")$$,
                  'with history on, the completed job is archived with attempts + 1 and the session user');
SELECT is((SELECT prune_after - finished_at FROM jobq._job_archive WHERE id = (SELECT id FROM gd WHERE payload->>'d' = '2')),
          interval '1 hour', 'prune_after follows the retention');

-- false and nothing changed ----------------------------------------------------------------------
DO $$ BEGIN PERFORM jobq.enqueue('hx', '{}'); END $$;
CREATE TEMP TABLE leased AS SELECT * FROM jobq.claim('hx', 1, 'w');
CREATE TEMP TABLE snap AS SELECT to_jsonb(j) AS row FROM jobq._job AS j UNION ALL SELECT to_jsonb(a) FROM jobq._job_archive AS a;
SELECT is(jobq.fail_held((SELECT id FROM leased), 'x'), false, 'fail_held of a leased job returns false');
SELECT is(jobq.complete_held(ARRAY(SELECT id FROM leased)), 0, 'complete_held of a leased job returns 0');
SELECT is(jobq.fail_held((SELECT id FROM gd WHERE payload->>'d' = '2'), 'x'), false, 'fail_held of a finished job returns false');
SELECT set_eq($$SELECT to_jsonb(j) FROM jobq._job AS j UNION ALL SELECT to_jsonb(a) FROM jobq._job_archive AS a$$,
              $$SELECT row FROM snap$$, 'those calls changed nothing');

-- pause, concurrency, groups ----------------------------------------------------------------------
DO $$ BEGIN
    PERFORM jobq.enqueue_many('hq', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 6) AS g));
    PERFORM jobq.pause('hq');
END $$;
SELECT is((SELECT count(*)::int FROM jobq.hold('hq', 10)), 0, 'hold honours pause');
SELECT ok(jobq.resume('hq'), 'resume');
SELECT is((jobq.configure_queue('hq', concurrency => 3)).concurrency, 3, 'limit the queue to 3');
CREATE TEMP TABLE run AS SELECT * FROM jobq.claim('hq', 1, 'w');
CREATE TEMP TABLE hq AS SELECT * FROM jobq.hold('hq', 10);
SELECT is((SELECT count(*)::int FROM hq), 2, 'hold honours concurrency: 1 running, so 2 slots');
SELECT is((SELECT count(*)::int FROM jobq.claim('hq', 10)), 0, 'held jobs hold their slots for the transaction: a claim gets none');
SELECT is((SELECT count(*)::int FROM jobq.hold('hq', 10)), 0, 'nor does a second hold');

DO $$ BEGIN
    PERFORM jobq.enqueue_many('hg', ARRAY['{"g": "a1"}', '{"g": "a2"}']::jsonb[], group_key => 'A');
    PERFORM jobq.enqueue_many('hg', ARRAY['{"g": "b1"}', '{"g": "b2"}']::jsonb[], group_key => 'B');
END $$;
CREATE TEMP TABLE hg AS SELECT * FROM jobq.hold('hg', 10);
SELECT is(ARRAY(SELECT payload->>'g' FROM hg ORDER BY id), ARRAY['a1', 'b1'], 'hold honours serial groups: only the heads');
SELECT ok(jobq.fail_held((SELECT id FROM hg WHERE payload->>'g' = 'a1'), 'x', now() + interval '1 hour'),
          'fail_held a1 (retry in an hour)');
SELECT is(jobq.complete_held(ARRAY(SELECT id FROM hg WHERE payload->>'g' = 'b1')), 1, 'complete_held b1');
SELECT is(ARRAY(SELECT payload->>'g' FROM jobq.hold('hg', 10) ORDER BY id), ARRAY['b2'],
          'then b2 heads group B; group A waits for a1 (its head, backing off)');

SELECT * FROM finish();
ROLLBACK;

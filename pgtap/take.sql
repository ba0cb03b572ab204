-- jobq.take(): exactly-once processing inside the caller's transaction. The
-- jobs come back without a lease and leave the live table in the same
-- transaction (counted as completed; archived only when the queue keeps
-- history): commit and they are done with the caller's writes, roll back
-- and they are back untouched. A SAVEPOINT stands in for the caller's
-- transaction here. take honours pause, concurrency, rate limits and groups.
BEGIN;
SELECT plan(44);

CREATE TEMP TABLE business (job_id bigint PRIMARY KEY, note text);
DO $$ BEGIN
    -- Queue tk keeps history (opt-in since 0.3.0), to show what take archives.
    PERFORM jobq.configure_queue('tk', retention => interval '1 day');
    PERFORM jobq.enqueue('tk', '{"n": "late"}', now() - interval '1 minute', 0, job_key => 'late');
    PERFORM jobq.enqueue('tk', '{"n": "urgent"}', now(), -5);
    PERFORM jobq.enqueue('tk', '{"n": "old"}', now() - interval '1 hour', 0);
    PERFORM jobq.enqueue('tk', '{"n": "future"}', now() + interval '1 hour', -10);
    PERFORM jobq.enqueue('tk', '{"n": "grouped"}', now() - interval '2 hours', 0, group_key => 'G');
END $$;
CREATE TEMP TABLE before AS SELECT to_jsonb(j) AS row FROM jobq._job AS j;

-- rollback: back untouched -------------------------------------------------------------------
SAVEPOINT work;
CREATE TEMP TABLE got AS SELECT row_number() OVER () AS ord, t.* FROM jobq.take('tk', 2) AS t;
INSERT INTO business SELECT id, 'processed ' || (payload->>'n') FROM got;
SELECT is(ARRAY(SELECT payload->>'n' FROM got ORDER BY ord), ARRAY['urgent', 'grouped'],
          'take(n => 2) returns the most urgent ready jobs: priority, then run_at');
SELECT is((SELECT count(*)::int FROM got WHERE lease_token IS NULL AND lease_expires_at IS NULL), 2,
          'taken jobs carry no lease (nothing to acknowledge)');
SELECT is((SELECT array_agg(DISTINCT attempts) FROM got), ARRAY[1], 'the returned rows count the attempt (attempts = 1)');
SELECT is((SELECT array_agg(DISTINCT worker) FROM got), ARRAY[session_user::text], 'worker is the session user');
SELECT is((SELECT group_key FROM got WHERE payload->>'n' = 'grouped'), 'G', 'the returned row carries group_key');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id IN (SELECT id FROM got)), 0,
          'within the transaction the taken jobs left the live table');
SELECT is((SELECT array_agg(DISTINCT status) FROM jobq._job_archive WHERE id IN (SELECT id FROM got)), ARRAY['completed'],
          'and are archived as completed');
SELECT is((SELECT array_agg(DISTINCT status) FROM jobq.jobs WHERE id IN (SELECT id FROM got)), ARRAY['completed'],
          'jobq.jobs shows them completed');
ROLLBACK TO SAVEPOINT work;
SELECT set_eq($$SELECT to_jsonb(j) FROM jobq._job AS j$$, $$SELECT row FROM before$$,
              'rolled back: every job is back in the live table untouched (status, attempts, run_at, no lease)');
SELECT is((SELECT count(*)::int FROM jobq._job_archive), 0, 'rolled back: nothing archived');
SELECT is((SELECT count(*)::int FROM business), 0, 'rolled back: no business row either');
SELECT is((SELECT array_agg(DISTINCT attempts) FROM jobq._job WHERE queue = 'tk'), ARRAY[0], 'attempts unchanged');
SELECT is((SELECT count(*)::int FROM jobq._counter), 0, 'rolled back: no counter row either');

-- commit: done together -------------------------------------------------------------------------
SAVEPOINT work2;
CREATE TEMP TABLE got2 AS SELECT t.* FROM jobq.take('tk', 2) AS t;
INSERT INTO business SELECT id, 'processed ' || (payload->>'n') FROM got2;
RELEASE SAVEPOINT work2;
SELECT is((SELECT count(*)::int FROM business), 2, 'committed: the business rows exist');
SELECT set_eq($$SELECT id, status FROM jobq._job_archive$$, $$SELECT id, 'completed'::text FROM got2$$,
              'committed: exactly the taken jobs are archived as completed');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id IN (SELECT id FROM got2)), 0, 'and gone from the live table');
SELECT results_eq(
    $$SELECT a.attempts, a.worker, a.started_at IS NOT NULL FROM jobq._job_archive AS a JOIN got2 AS g USING (id) ORDER BY id$$,
    $$SELECT attempts, worker, true FROM got2 ORDER BY id$$,
    'the archive records the attempt and the worker that take returned, and a start time');
SELECT ok((SELECT finished_at BETWEEN now() AND clock_timestamp() FROM jobq._job_archive WHERE id = (SELECT min(id) FROM got2)),
          'finished_at is the clock when take ran');
SELECT results_eq($$SELECT completed::int, failed::int, dead::int FROM jobq._counter WHERE queue = 'tk'$$,
                  $$VALUES (2, 0, 0)$$, 'take counts its jobs as completed: one counter row for the statement');

-- n, defaults, scheduled jobs ---------------------------------------------------------------------------
SELECT is(ARRAY(SELECT payload->>'n' FROM jobq.take('tk')), ARRAY['old'], 'n defaults to 1 (the next most urgent)');
SELECT is(ARRAY(SELECT payload->>'n' FROM jobq.take('tk', 10)), ARRAY['late'], 'jobs scheduled for later are not taken');
SELECT is((SELECT count(*)::int FROM jobq.take('tk', 0)), 0, 'take with n = 0 takes nothing');
SELECT isnt(jobq.enqueue('tk', '{}', job_key => 'late'), NULL, 'a taken job no longer holds its job_key');

-- retention 0: a taken job leaves no history -----------------------------------------------------------------
DO $$ BEGIN
    PERFORM jobq.configure_queue('noarch', retention => interval '0');
    PERFORM jobq.enqueue('noarch', '{}');
END $$;
SELECT is((SELECT count(*)::int FROM jobq.take('noarch', 5)), 1, 'take from a queue with retention 0');
SELECT is((SELECT count(*)::int FROM jobq.jobs WHERE queue = 'noarch'), 0, 'with retention 0 a taken job leaves no history');

-- the default (no history): take deletes without writing first ------------------------------------------------
DO $$ BEGIN
    PERFORM jobq.enqueue_many('tdef', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 4) AS g));
END $$;
CREATE TEMP TABLE io AS
    SELECT n_tup_upd, n_tup_del FROM pg_catalog.pg_stat_xact_user_tables WHERE relid = 'jobq._job'::regclass;
CREATE TEMP TABLE got3 AS SELECT t.* FROM jobq.take('tdef', 3) AS t;
SELECT is((SELECT count(*)::int FROM got3), 3, 'take 3 from a queue with default settings');
SELECT is((SELECT array_agg(DISTINCT attempts) FROM got3), ARRAY[1], 'the rows returned show attempts + 1');
SELECT results_eq(
    $$SELECT s.n_tup_upd - io.n_tup_upd, s.n_tup_del - io.n_tup_del
      FROM pg_catalog.pg_stat_xact_user_tables AS s, io WHERE s.relid = 'jobq._job'::regclass$$,
    $$VALUES (0::bigint, 3::bigint)$$,
    'take wrote no row version before deleting: 0 updates, 3 deletes on jobq._job');
SELECT is((SELECT count(*)::int FROM jobq.jobs WHERE queue = 'tdef'), 1,
          'by default a taken job leaves no history (only the job not taken is left)');
SELECT is((SELECT completed_total::int FROM jobq.stats WHERE queue = 'tdef'), 3, 'but it is counted: completed_total 3');

-- pause, concurrency, groups, rate limit ---------------------------------------------------------------------
DO $$ BEGIN
    PERFORM jobq.enqueue_many('tq', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 6) AS g));
    PERFORM jobq.pause('tq');
END $$;
SELECT is((SELECT count(*)::int FROM jobq.take('tq', 10)), 0, 'take honours pause: nothing from a paused queue');
SELECT ok(jobq.resume('tq'), 'resume');
SELECT is((jobq.configure_queue('tq', concurrency => 3)).concurrency, 3, 'limit the queue to 3');
CREATE TEMP TABLE running AS SELECT * FROM jobq.claim('tq', 2, 'w');
SELECT is((SELECT count(*)::int FROM running), 2, 'setup: 2 jobs running');
SELECT is((SELECT count(*)::int FROM jobq.take('tq', 10)), 1, 'take honours concurrency: only the 1 free slot');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'tq' AND status = 'ready'), 3, 'the rest stays ready');
SELECT is((jobq.configure_queue('tq', concurrency => 0)).concurrency, NULL, 'remove the limit');

DO $$ BEGIN
    PERFORM jobq.enqueue_many('tg', ARRAY['{"g": "a1"}', '{"g": "a2"}']::jsonb[], group_key => 'A');
    PERFORM jobq.enqueue_many('tg', ARRAY['{"g": "b1"}', '{"g": "b2"}']::jsonb[], group_key => 'B');
END $$;
CREATE TEMP TABLE ga AS SELECT * FROM jobq.claim('tg', 1, 'w');
SELECT is((SELECT payload->>'g' FROM ga), 'a1', 'setup: a1 (head of group A) is running');
SELECT is(ARRAY(SELECT payload->>'g' FROM jobq.take('tg', 10)), ARRAY['b1'],
          'take honours groups: only heads, and nothing from a group whose head runs');
SELECT is(ARRAY(SELECT payload->>'g' FROM jobq.take('tg', 10)), ARRAY['b2'], 'once b1 is taken, b2 heads group B');
SELECT ok(jobq.complete((SELECT id FROM ga), (SELECT lease_token FROM ga)), 'complete a1');
SELECT is(ARRAY(SELECT payload->>'g' FROM jobq.take('tg', 10)), ARRAY['a2'], 'then a2 can be taken');

DO $$ BEGIN
    PERFORM jobq.configure_queue('tr', rate_limit => 2);
    PERFORM jobq.enqueue_many('tr', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 5)));
END $$;
SELECT is((SELECT count(*)::int FROM jobq.take('tr', 10)), 2, 'take honours the rate limit: 2 per window');
SELECT is((SELECT sum(n)::int FROM jobq._rate_start WHERE queue = 'tr'), 2, 'and records its starts');

SELECT * FROM finish();
ROLLBACK;

-- 0.3.0 fast path: a claim of a plain queue is a HOT update that leaves the
-- lease in the claim index (unparked); the full path (limits, groups, pause)
-- parks its leases at once; heartbeat, reap (leases over 10 s) and
-- configure_queue(concurrency) park; release, snooze, fail and reap un-park.
-- HOT updates are read from pg_stat_xact_user_tables (this transaction's own
-- counts, no stats flush needed).
BEGIN;
SELECT plan(44);

CREATE FUNCTION pg_temp.hot() RETURNS bigint LANGUAGE sql AS $$
    SELECT n_tup_hot_upd FROM pg_catalog.pg_stat_xact_user_tables WHERE relid = 'jobq._job'::regclass
$$;
CREATE FUNCTION pg_temp.upd() RETURNS bigint LANGUAGE sql AS $$
    SELECT n_tup_upd FROM pg_catalog.pg_stat_xact_user_tables WHERE relid = 'jobq._job'::regclass
$$;
CREATE TEMP TABLE mark (hot bigint, upd bigint);
CREATE FUNCTION pg_temp.mark() RETURNS void LANGUAGE sql AS $$
    DELETE FROM mark; INSERT INTO mark SELECT pg_temp.hot(), pg_temp.upd();
$$;

-- plain queue: HOT, unparked ---------------------------------------------------------------------
DO $$ BEGIN
    PERFORM jobq.enqueue_many('plain', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 30) AS g));
END $$;
SELECT pg_temp.mark();
CREATE TEMP TABLE c1 AS SELECT * FROM jobq.claim('plain', 20, 'w1');
SELECT is((SELECT count(*)::int FROM c1), 20, 'claim 20 jobs of a plain queue');
SELECT is(pg_temp.upd() - (SELECT upd FROM mark), 20::bigint, 'the claim updated 20 rows');
SELECT is(pg_temp.hot() - (SELECT hot FROM mark), 20::bigint, 'every one of them a HOT update (no index entry written)');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id IN (SELECT id FROM c1) AND status = 'running' AND NOT parked), 20,
          'plain-queue leases are running and not parked');
SELECT is(ARRAY(SELECT id FROM jobq.claim('plain', 3, 'w2') ORDER BY id),
          ARRAY(SELECT id FROM jobq._job WHERE queue = 'plain' AND status = 'ready' ORDER BY id LIMIT 3),
          'the next claim steps over the unparked leases (skipped by status) to the next ready jobs');
SELECT is(jobq.next_run_at(ARRAY['plain']), NULL, 'next_run_at ignores running (unparked) jobs');

-- a fast-path lease finishes like any other
SELECT is(jobq.complete_many(ARRAY(SELECT id FROM c1 ORDER BY id LIMIT 5), ARRAY(SELECT lease_token FROM c1 ORDER BY id LIMIT 5)), 5,
          'unparked leases complete');
SELECT ok(jobq.fail((SELECT id FROM c1 ORDER BY id OFFSET 5 LIMIT 1), 'x', (SELECT lease_token FROM c1 ORDER BY id OFFSET 5 LIMIT 1)),
          'and fail');

-- heartbeat parks ---------------------------------------------------------------------------------
CREATE TEMP TABLE hb AS SELECT * FROM c1 ORDER BY id OFFSET 6 LIMIT 1;
SELECT ok(jobq.heartbeat((SELECT id FROM hb), (SELECT lease_token FROM hb)), 'heartbeat a plain lease');
SELECT is((SELECT parked FROM jobq._job WHERE id = (SELECT id FROM hb)), true, 'a heart-beaten lease is parked');
SELECT ok(NOT jobq.heartbeat((SELECT id FROM hb), gen_random_uuid()), 'a fenced heartbeat returns false');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'plain' AND parked), 1, 'and parks nothing');
SELECT ok(jobq.complete((SELECT id FROM hb), (SELECT lease_token FROM hb)), 'a parked lease still completes');

-- release / snooze un-park ------------------------------------------------------------------------
CREATE TEMP TABLE rs AS SELECT * FROM c1 ORDER BY id OFFSET 7 LIMIT 2;
SELECT is((SELECT count(*)::int FROM rs WHERE jobq.heartbeat(id, lease_token)), 2, 'heartbeat two more leases');
SELECT ok(jobq.release((SELECT min(id) FROM rs), (SELECT lease_token FROM rs ORDER BY id LIMIT 1)), 'release a parked lease');
SELECT ok(jobq.snooze((SELECT max(id) FROM rs), (SELECT lease_token FROM rs ORDER BY id DESC LIMIT 1), now() + interval '1 hour'),
          'snooze a parked lease');
SELECT results_eq($$SELECT status, parked FROM jobq._job WHERE id IN (SELECT id FROM rs) ORDER BY id$$,
                  $$VALUES ('ready'::text, false), ('ready', false)$$, 'released and snoozed jobs are ready and un-parked');

-- reap: parks leases held over 10 s; reaps expired ones, parked or not --------------------------
CREATE TEMP TABLE old AS SELECT * FROM c1 ORDER BY id OFFSET 9 LIMIT 3;
UPDATE jobq._job SET started_at = now() - interval '11 seconds' WHERE id IN (SELECT id FROM old);
UPDATE jobq._job SET started_at = now() - interval '9 seconds' WHERE id = (SELECT id FROM c1 ORDER BY id OFFSET 12 LIMIT 1);
SELECT is(jobq.reap(), 0, 'reap with no expired lease returns 0');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id IN (SELECT id FROM old) AND parked AND status = 'running'), 3,
          'reap parked the 3 leases held over 10 seconds (still running, same lease)');
SELECT is((SELECT parked FROM jobq._job WHERE id = (SELECT id FROM c1 ORDER BY id OFFSET 12 LIMIT 1)), false,
          'a lease held 9 seconds stays unparked');
SELECT ok((SELECT jobq.complete(id, lease_token) FROM (SELECT * FROM old ORDER BY id LIMIT 1) AS x), 'a lease parked by reap still completes');
-- expire one parked and one unparked lease
UPDATE jobq._job SET lease_expires_at = now() - interval '1 second'
WHERE id IN ((SELECT id FROM old ORDER BY id OFFSET 1 LIMIT 1), (SELECT id FROM c1 ORDER BY id OFFSET 13 LIMIT 1));
SELECT is(jobq.reap(), 2, 'reap finds expired leases parked or not (a table scan: no lease index)');
SELECT results_eq($$SELECT status, parked, lease_token IS NULL FROM jobq._job
                    WHERE id IN ((SELECT id FROM old ORDER BY id OFFSET 1 LIMIT 1), (SELECT id FROM c1 ORDER BY id OFFSET 13 LIMIT 1))$$,
                  $$VALUES ('ready'::text, false, true), ('ready', false, true)$$, 'reaped jobs are ready and un-parked');
SELECT is((SELECT jobq.fail(id, 'late', lease_token) FROM (SELECT * FROM old ORDER BY id OFFSET 1 LIMIT 1) AS x), false,
          'the reaped holder is fenced out');

-- full path: limits, groups, pause park at once, and are not HOT ---------------------------------
DO $$ BEGIN
    PERFORM jobq.configure_queue('lim', concurrency => 4);
    PERFORM jobq.enqueue_many('lim', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 6) AS g));
    PERFORM jobq.configure_queue('rated', rate_limit => 100);
    PERFORM jobq.enqueue_many('rated', ARRAY['{}', '{}']::jsonb[]);
    PERFORM jobq.enqueue_many('grp', ARRAY['{}', '{}']::jsonb[]);
    PERFORM jobq.enqueue('grp', '{}', group_key => 'G');
END $$;
SELECT pg_temp.mark();
CREATE TEMP TABLE cl AS SELECT * FROM jobq.claim('lim', 10, 'w');
SELECT is((SELECT count(*)::int FROM cl), 4, 'a concurrency-limited queue gives its 4 slots');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id IN (SELECT id FROM cl) AND parked), 4, 'full-path leases are parked at once');
SELECT is(pg_temp.hot() - (SELECT hot FROM mark), 0::bigint, 'a parking claim is no HOT update (parked is in the index predicates)');
SELECT is((SELECT count(*)::int FROM jobq.claim('lim', 10, 'w')), 0, 'the parked leases fill the slots: nothing more');
CREATE TEMP TABLE cr AS SELECT * FROM jobq.claim('rated', 5);
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id IN (SELECT id FROM cr) AND parked), 2,
          'a rate-limited queue takes the full path: parked');
CREATE TEMP TABLE cg AS SELECT * FROM jobq.claim('grp', 5);
SELECT is((SELECT count(*)::int FROM cg), 3, 'a queue with a serial-group job gives its ungrouped jobs and the group head');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id IN (SELECT id FROM cg) AND parked), 3,
          'a queue holding a group_key job takes the full path: even its ungrouped leases are parked');
DO $$ BEGIN PERFORM jobq.enqueue_many('mix', ARRAY['{}', '{}']::jsonb[]); PERFORM jobq.enqueue('lim', '{}'); END $$;
CREATE TEMP TABLE cm AS SELECT * FROM jobq.claim(ARRAY['mix', 'lim'], 5);
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id IN (SELECT id FROM cm) AND queue = 'mix' AND parked), 2,
          'a claim over a plain and a limited queue takes the full path: the plain queue''s leases are parked too');
SELECT ok((SELECT jobq.complete(id, lease_token) FROM (SELECT * FROM cl ORDER BY id LIMIT 1) AS x), 'a full-path lease completes');
SELECT is((SELECT count(*)::int FROM jobq.claim('lim', 10, 'w')), 1, 'which frees exactly its slot');

-- fail un-parks (retry) -----------------------------------------------------------------------------
SELECT ok((SELECT jobq.fail(id, 'boom', lease_token) FROM (SELECT * FROM cl ORDER BY id OFFSET 1 LIMIT 1) AS x), 'fail a parked lease');
SELECT results_eq($$SELECT status, parked FROM jobq._job WHERE id = (SELECT id FROM cl ORDER BY id OFFSET 1 LIMIT 1)$$,
                  $$VALUES ('ready'::text, false)$$, 'a failed job waits for its retry un-parked');

-- configure_queue(concurrency) parks the queue's current leases -------------------------------------
DO $$ BEGIN PERFORM jobq.enqueue_many('late', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 5))); END $$;
CREATE TEMP TABLE cla AS SELECT * FROM jobq.claim('late', 3);
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id IN (SELECT id FROM cla) AND NOT parked), 3, 'setup: 3 plain leases, unparked');
SELECT ok((jobq.configure_queue('late', lease => interval '1 minute')).lease = interval '1 minute', 'configure another setting');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'late' AND parked), 0, 'a setting other than concurrency parks nothing');
SELECT is((jobq.configure_queue('late', concurrency => 4)).concurrency, 4, 'set a concurrency limit of 4');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id IN (SELECT id FROM cla) AND parked), 3,
          'configure_queue(concurrency) parked the 3 leases granted before the limit');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'plain' AND parked AND status = 'running'),
          (SELECT count(*)::int FROM jobq._job WHERE queue = 'plain' AND parked AND status = 'running' AND id IN (SELECT id FROM old)),
          'other queues'' leases are untouched');
SELECT is((SELECT count(*)::int FROM jobq.claim('late', 10)), 1, 'so the limit counts them: 1 free slot of 4');

-- every parked row is running (the constraint), and the claim index holds no parked row
SELECT is_empty($$SELECT id FROM jobq._job WHERE parked AND status <> 'running'$$, 'every parked job is running');

SELECT * FROM finish();
ROLLBACK;

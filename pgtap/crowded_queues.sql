-- Crowded queues (since 0.8.0): a claim of a plain queue parks its leases
-- when the queue is crowded with leases — the first due entry of its claim index is a job
-- leased before the claiming transaction began and over 50 ms before the
-- claim (jobq._crowded_queues) — and leases in place (HOT, unparked)
-- otherwise. The whole file is one transaction: leases taken in it are never
-- "before the transaction", so a lease is made old by moving its started_at
-- back. Parked fast-path leases finish, fail, release and reap like any other.
BEGIN;
SELECT plan(30);

SET LOCAL client_min_messages = warning;
CREATE FUNCTION pg_temp.hot() RETURNS bigint LANGUAGE sql AS $$
    SELECT n_tup_hot_upd FROM pg_catalog.pg_stat_xact_user_tables WHERE relid = 'jobq._job'::regclass
$$;
CREATE TEMP TABLE mark (hot bigint);
CREATE FUNCTION pg_temp.mark() RETURNS void LANGUAGE sql AS $$
    DELETE FROM mark; INSERT INTO mark SELECT pg_temp.hot();
$$;
CREATE FUNCTION pg_temp.hot_since_mark() RETURNS bigint LANGUAGE sql AS $$
    SELECT pg_temp.hot() - (SELECT hot FROM mark)
$$;
-- Lease ids as if their claim were p_ago before this transaction began.
CREATE FUNCTION pg_temp.age(p_ids bigint[], p_ago interval) RETURNS void LANGUAGE sql AS $$
    UPDATE jobq._job SET started_at = now() - p_ago WHERE id = ANY (p_ids)
$$;
-- Every unparked lease of a queue, the same way.
CREATE FUNCTION pg_temp.age_queue(p_queue text, p_ago interval) RETURNS void LANGUAGE sql AS $$
    UPDATE jobq._job SET started_at = now() - p_ago WHERE queue = p_queue AND status = 'running' AND NOT parked
$$;
CREATE FUNCTION pg_temp.parked(p_ids bigint[]) RETURNS boolean[] LANGUAGE sql AS $$
    SELECT array_agg(j.parked ORDER BY j.id) FROM jobq._job AS j WHERE j.id = ANY (p_ids)
$$;

DO $$ BEGIN
    PERFORM jobq.enqueue_many('crowd', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 40) AS g));
    PERFORM jobq.enqueue_many('calm', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 10) AS g));
END $$;

-- the probe -----------------------------------------------------------------------------------------
SELECT is(jobq._crowded_queues(ARRAY['crowd', 'calm', 'nothing'], clock_timestamp()), '{}'::text[],
          'queues whose first job is ready, and an empty queue, are not crowded');
CREATE TEMP TABLE first AS SELECT * FROM jobq.claim('crowd', 5, 'w1');
SELECT is(jobq._crowded_queues(ARRAY['crowd'], clock_timestamp()), '{}'::text[],
          'leases taken in this transaction are not a crowd (whatever their age)');
SELECT pg_temp.age(ARRAY(SELECT id FROM first), interval '30 milliseconds');
SELECT is(jobq._crowded_queues(ARRAY['crowd'], now()), '{}'::text[],
          'a lease taken 30 ms before the claim, in an earlier transaction, at the head: a passing one, not crowded');
SELECT is(jobq._crowded_queues(ARRAY['crowd'], now() + interval '21 milliseconds'), ARRAY['crowd'],
          'the same lease 51 ms before the claim: crowded');
SELECT pg_temp.age(ARRAY(SELECT id FROM first), interval '1 second');
SELECT is(jobq._crowded_queues(ARRAY['crowd', 'calm'], clock_timestamp()), ARRAY['crowd'],
          'a lease taken 1 s ago at the head: crowded (the other queue is not)');

-- a claim of a crowded queue parks its leases ---------------------------------------------------------
SELECT pg_temp.mark();
CREATE TEMP TABLE second AS SELECT * FROM jobq.claim('crowd', 5, 'w2');
SELECT is(ARRAY(SELECT id FROM second ORDER BY id),
          ARRAY(SELECT id FROM jobq._job WHERE queue = 'crowd' AND id NOT IN (SELECT id FROM first) ORDER BY id LIMIT 5),
          'the claim behind the old leases takes the next 5 ready jobs, in order');
SELECT is(pg_temp.parked(ARRAY(SELECT id FROM second)), array_fill(true, ARRAY[5]),
          'and parks them (out of the claim index)');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id IN (SELECT id FROM second) AND status = 'running'
              AND worker = 'w2' AND attempts = 1 AND lease_token IS NOT NULL), 5,
          'parked leases are running, with their worker, attempt and token');
SELECT is(pg_temp.hot_since_mark(), 0::bigint, 'parking leases is no HOT update');
SELECT is(pg_temp.parked(ARRAY(SELECT id FROM first)), array_fill(false, ARRAY[5]),
          'the old leases ahead stay where they are (reap and heartbeat park them)');
SELECT is(ARRAY(SELECT job_id FROM (SELECT id AS job_id FROM jobq.claim('crowd', 3, 'w3')) AS c ORDER BY job_id),
          ARRAY(SELECT id FROM jobq._job WHERE queue = 'crowd' AND status = 'ready' ORDER BY id LIMIT 3),
          'the next claim steps over both kinds of lease to the next ready jobs');

-- the head decides: ready, scheduled, parked ----------------------------------------------------------
DO $$ BEGIN PERFORM jobq.enqueue('crowd', '{"urgent": true}', priority => -1); END $$;
SELECT is(jobq._crowded_queues(ARRAY['crowd'], clock_timestamp()), '{}'::text[],
          'a ready job of higher priority ahead of the old leases: not crowded');
CREATE TEMP TABLE urgent AS SELECT * FROM jobq.claim('crowd', 1, 'w4');
SELECT is((SELECT payload FROM urgent), '{"urgent": true}'::jsonb, 'the claim takes the urgent job first');
SELECT is(pg_temp.parked(ARRAY(SELECT id FROM urgent)), ARRAY[false], 'and leases it in place');
SELECT ok(jobq.complete((SELECT id FROM urgent), (SELECT lease_token FROM urgent)), 'complete it');
DO $$ BEGIN PERFORM jobq.enqueue('crowd', '{"later": true}', priority => -1, run_at => now() + interval '1 hour'); END $$;
SELECT is(jobq._crowded_queues(ARRAY['crowd'], clock_timestamp()), ARRAY['crowd'],
          'a job scheduled for later ahead in priority is not due: the old leases behind it still crowd the queue');
SELECT ok((SELECT bool_and(jobq.heartbeat(id, lease_token)) FROM first), 'heartbeat the old leases (which parks them)');
SELECT is(jobq._crowded_queues(ARRAY['crowd'], clock_timestamp()), '{}'::text[],
          'with the old leases parked the first due entry is ready again: not crowded');
CREATE TEMP TABLE third AS SELECT * FROM jobq.claim('crowd', 4, 'w5');
SELECT is(pg_temp.parked(ARRAY(SELECT id FROM third)), array_fill(false, ARRAY[4]), 'so claims lease in place again');

-- a claim over two queues parks only the crowded one's leases -----------------------------------------
CREATE TEMP TABLE calm_first AS SELECT * FROM jobq.claim('calm', 2, 'w6');
DO $$ BEGIN PERFORM jobq.enqueue_many('calm', ARRAY['{}', '{}', '{}']::jsonb[], priority => -2); END $$;
SELECT pg_temp.age_queue('crowd', interval '1 second');
CREATE TEMP TABLE both_q AS SELECT * FROM jobq.claim(ARRAY['crowd', 'calm'], 6, 'w7');
SELECT results_eq($$SELECT queue, parked, count(*)::int FROM jobq._job WHERE id IN (SELECT id FROM both_q)
                    GROUP BY 1, 2 ORDER BY 1$$,
                  $$VALUES ('calm'::text, false, 3), ('crowd', true, 3)$$,
                  'a claim across a crowded and a calm queue parks the crowded queue''s leases only');

-- parked fast-path leases finish like any other ---------------------------------------------------------
SELECT is(jobq.complete_many(ARRAY(SELECT id FROM second ORDER BY id LIMIT 2),
                             ARRAY(SELECT lease_token FROM second ORDER BY id LIMIT 2)), 2, 'complete parked leases');
SELECT is_empty($$SELECT id FROM jobq._job WHERE id IN (SELECT id FROM second ORDER BY id LIMIT 2)$$,
                'they leave the live table');
SELECT ok(jobq.fail((SELECT id FROM second ORDER BY id OFFSET 2 LIMIT 1), 'boom',
                    (SELECT lease_token FROM second ORDER BY id OFFSET 2 LIMIT 1)), 'fail a parked lease');
SELECT results_eq($$SELECT status, parked, attempts FROM jobq._job WHERE id = (SELECT id FROM second ORDER BY id OFFSET 2 LIMIT 1)$$,
                  $$VALUES ('ready'::text, false, 1)$$, 'it waits for its retry un-parked, back in the claim index');
SELECT ok(jobq.release((SELECT id FROM second ORDER BY id OFFSET 3 LIMIT 1),
                       (SELECT lease_token FROM second ORDER BY id OFFSET 3 LIMIT 1)), 'release a parked lease');
SELECT results_eq($$SELECT status, parked, attempts FROM jobq._job WHERE id = (SELECT id FROM second ORDER BY id OFFSET 3 LIMIT 1)$$,
                  $$VALUES ('ready'::text, false, 0)$$, 'released: ready, un-parked, the attempt given back');
UPDATE jobq._job SET lease_expires_at = now() - interval '1 second' WHERE id = (SELECT id FROM second ORDER BY id OFFSET 4 LIMIT 1);
SELECT is(jobq.reap(), 1, 'reap finds the expired parked lease');
SELECT results_eq($$SELECT status, parked, lease_token IS NULL FROM jobq._job WHERE id = (SELECT id FROM second ORDER BY id OFFSET 4 LIMIT 1)$$,
                  $$VALUES ('ready'::text, false, true)$$, 'reaped: ready and un-parked');
SELECT is((SELECT running FROM jobq.stats WHERE queue = 'crowd'),
          (SELECT count(*) FROM jobq._job WHERE queue = 'crowd' AND status = 'running'),
          'jobq.stats counts parked and unparked leases alike as running');

SELECT is_empty($$SELECT id FROM jobq._job WHERE parked AND status NOT IN ('running', 'waiting')$$,
                'every parked job is running or waiting');

SELECT * FROM finish();
ROLLBACK;

-- jobq.claim(): ordering, scheduling, batch size, leases, attempts, worker.
-- Since 0.2.0 a claim stamps started_at with the clock time of the claim
-- (clock_timestamp(), not the transaction start) and leases from it.
BEGIN;
SELECT plan(45);

CREATE TEMP TABLE t (name text PRIMARY KEY, id bigint);
INSERT INTO t VALUES
    ('a',     jobq.enqueue('q', '{"j": "a"}', now() - interval '3 minutes', 0)),
    ('b',     jobq.enqueue('q', '{"j": "b"}', now() - interval '1 minute', -5)),
    ('c',     jobq.enqueue('q', '{"j": "c"}', now() - interval '3 minutes', 0)),
    ('d',     jobq.enqueue('q', '{"j": "d"}', now() - interval '10 minutes', 0)),
    ('e',     jobq.enqueue('q', '{"j": "e"}', now() + interval '1 hour', 0)),
    ('f',     jobq.enqueue('q', '{"j": "f"}', now() + interval '1 second', -10)),
    ('g',     jobq.enqueue('q', '{"j": "g"}', now() - interval '1 day', 3)),
    ('other', jobq.enqueue('other', '{"j": "other"}', now() - interval '1 day', -100));

-- n = 0 claims nothing and changes nothing
CREATE TEMP TABLE snap AS SELECT to_jsonb(j) AS row FROM jobq._job AS j;
SELECT is_empty($$SELECT * FROM jobq.claim('q', 0)$$, 'claim with n = 0 returns no rows');
SELECT set_eq($$SELECT to_jsonb(j) FROM jobq._job AS j$$, $$SELECT row FROM snap$$,
              'claim with n = 0 changes nothing');

-- ordering: priority, then run_at, then id; scheduled jobs are not claimed
CREATE TEMP TABLE c1 AS SELECT row_number() OVER () AS ord, c.* FROM jobq.claim('q', 10, 'w1') AS c;
SELECT results_eq(
    $$SELECT c1.id FROM c1 ORDER BY ord$$,
    $$SELECT t.id FROM unnest(ARRAY['b', 'd', 'a', 'c', 'g']) WITH ORDINALITY AS x(name, ord)
      JOIN t USING (name) ORDER BY x.ord$$,
    'claim returns ready jobs by priority, then oldest run_at, then id');
SELECT ok((SELECT id FROM t WHERE name = 'a') < (SELECT id FROM t WHERE name = 'c'),
          'a and c tie on priority and run_at, a has the lower id');
SELECT is((SELECT count(*)::int FROM c1 WHERE id IN (SELECT id FROM t WHERE name IN ('e', 'f'))), 0,
          'jobs scheduled in the future are not claimed early, whatever their priority');
SELECT is((SELECT count(*)::int FROM c1 WHERE queue <> 'q'), 0, 'claim only takes jobs of the named queue');
SELECT is((SELECT status FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'other')), 'ready',
          'the other queue''s job is untouched');

-- the claimed rows
SELECT is((SELECT array_agg(DISTINCT attempts) FROM c1), ARRAY[1], 'claim counts the attempt: attempts = 1');
SELECT is((SELECT array_agg(DISTINCT worker) FROM c1), ARRAY['w1'], 'the returned rows carry the worker');
SELECT is((SELECT count(DISTINCT lease_token)::int FROM c1 WHERE lease_token IS NOT NULL), 5,
          'each claimed job gets its own lease token');
SELECT is((SELECT array_agg(DISTINCT c1.lease_expires_at - j.started_at) FROM c1 JOIN jobq._job AS j USING (id)),
          ARRAY[interval '5 minutes'], 'the default lease is 5 minutes from the claim''s start');
SELECT is((SELECT count(DISTINCT j.started_at)::int FROM c1 JOIN jobq._job AS j USING (id)), 1,
          'the jobs of one claim share one started_at');
SELECT ok((SELECT min(j.started_at) FROM c1 JOIN jobq._job AS j USING (id)) BETWEEN now() AND clock_timestamp(),
          'started_at is the clock time of the claim (not before the transaction, not in the future)');
SELECT results_eq(
    $$SELECT c1.queue, c1.payload, c1.priority, c1.max_attempts, c1.run_at, c1.created_at, c1.job_key, c1.last_error
      FROM c1 WHERE c1.id = (SELECT id FROM t WHERE name = 'b')$$,
    $$VALUES ('q'::text, '{"j": "b"}'::jsonb, -5, 25, now() - interval '1 minute', now(), NULL::text, NULL::text)$$,
    'the returned row carries queue, payload, priority, max_attempts, run_at, created_at, job_key');
SELECT set_eq(
    $$SELECT id, status, attempts, worker, lease_token, lease_expires_at, started_at FROM jobq._job
      WHERE id IN (SELECT id FROM c1)$$,
    $$SELECT id, 'running'::text AS status, 1 AS attempts, 'w1'::text AS worker, lease_token, lease_expires_at,
             lease_expires_at - interval '5 minutes' AS started_at FROM c1$$,
    'the table records running, attempts, worker, the same lease token and expiry, started_at');

SELECT is_empty($$SELECT * FROM jobq.claim('q', 10)$$, 'running and scheduled jobs are not claimed again');

-- a scheduled job becomes claimable once its run_at has passed
UPDATE jobq._job SET run_at = now() - interval '1 second' WHERE id = (SELECT id FROM t WHERE name = 'e');
SELECT is((SELECT array_agg(id) FROM jobq.claim('q', 10)), ARRAY[(SELECT id FROM t WHERE name = 'e')],
          'once run_at has passed the job is claimed');
UPDATE jobq._job SET run_at = now() WHERE id = (SELECT id FROM t WHERE name = 'f');
SELECT is((SELECT array_agg(id) FROM jobq.claim('q', 10)), ARRAY[(SELECT id FROM t WHERE name = 'f')],
          'run_at = now() counts as ready');
SELECT is((SELECT worker FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'f')), NULL,
          'worker defaults to NULL');

-- n limits the batch, most urgent first
DO $$ BEGIN
    PERFORM jobq.enqueue_many('n', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 5) AS g));
END $$;
INSERT INTO t SELECT 'n_urgent', jobq.enqueue('n', '{}', priority => -1);
SELECT is((SELECT count(*)::int FROM jobq.claim('n', 2)), 2, 'claim(n => 2) returns 2 jobs');
SELECT is((SELECT status FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'n_urgent')), 'running',
          'the most urgent job was among them');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'n' AND status = 'ready'), 4, 'the others stay ready');
SELECT is((SELECT count(*)::int FROM jobq.claim('n')), 1, 'n defaults to 1');
SELECT is((SELECT count(*)::int FROM jobq.claim('n', 1000)), 3, 'claim returns fewer than n when fewer are ready');

-- lease: queue setting and per-call override
DO $$ BEGIN
    PERFORM jobq.configure_queue('short', lease => interval '30 seconds');
    PERFORM jobq.enqueue_many('short', ARRAY['{}', '{}']::jsonb[]);
END $$;
CREATE TEMP TABLE sh AS SELECT 1 AS k, * FROM jobq.claim('short');
INSERT INTO sh SELECT 2, * FROM jobq.claim('short', lease => interval '10 minutes');
SELECT is((SELECT sh.lease_expires_at - j.started_at FROM sh JOIN jobq._job AS j USING (id) WHERE k = 1),
          interval '30 seconds', 'the queue''s lease setting applies');
SELECT is((SELECT sh.lease_expires_at - j.started_at FROM sh JOIN jobq._job AS j USING (id) WHERE k = 2),
          interval '10 minutes', 'an explicit lease overrides the queue setting');

-- attempts increment across claims
INSERT INTO t SELECT 'again', jobq.enqueue('again', '{}');
CREATE TEMP TABLE c2 AS SELECT * FROM jobq.claim('again');
SELECT ok(jobq.fail((SELECT id FROM c2), 'boom', (SELECT lease_token FROM c2), now()), 'fail with retry_at now');
CREATE TEMP TABLE c3 AS SELECT * FROM jobq.claim('again', worker => 'w2');
SELECT is((SELECT attempts FROM c3), 2, 'the second claim makes attempts = 2');
SELECT is((SELECT last_error FROM c3), 'boom', 'the re-claimed row carries the last error');
SELECT is((SELECT worker FROM c3), 'w2', 'the new worker is recorded');
SELECT isnt((SELECT lease_token FROM c3), (SELECT lease_token FROM c2), 'a new claim gets a new lease token');

-- several queues at once
DO $$ BEGIN
    PERFORM jobq.configure_queue('mq_a', lease => interval '45 seconds');
    PERFORM jobq.enqueue('mq_a', '{"n": "a1"}', now() - interval '5 minutes', 1);
    PERFORM jobq.enqueue('mq_a', '{"n": "a2"}', now() - interval '1 minute', -1);
    PERFORM jobq.enqueue('mq_b', '{"n": "b1"}', now() - interval '2 minutes', -1);
    PERFORM jobq.enqueue('mq_b', '{"n": "b2"}', now() - interval '9 minutes', 0);
    PERFORM jobq.enqueue('mq_c', '{"n": "c1"}', now() - interval '9 minutes', -9);
END $$;
CREATE TEMP TABLE m AS SELECT row_number() OVER () AS ord, c.* FROM jobq.claim(ARRAY['mq_a', 'mq_b'], 3, 'mw') AS c;
SELECT is(ARRAY(SELECT payload->>'n' FROM m ORDER BY ord), ARRAY['b1', 'a2', 'b2'],
          'a multi-queue claim takes the globally most urgent jobs, in order');
SELECT is((SELECT m.lease_expires_at - j.started_at FROM m JOIN jobq._job AS j USING (id) WHERE m.payload->>'n' = 'a2'),
          interval '45 seconds', 'a multi-queue claim uses each queue''s own lease (mq_a: 45 s)');
SELECT is((SELECT m.lease_expires_at - j.started_at FROM m JOIN jobq._job AS j USING (id) WHERE m.payload->>'n' = 'b1'),
          interval '5 minutes', 'a multi-queue claim uses each queue''s own lease (mq_b: default 5 min)');
SELECT is((SELECT status FROM jobq._job WHERE payload->>'n' = 'c1'), 'ready',
          'a queue not listed is not claimed from');
SELECT is(ARRAY(SELECT payload->>'n' FROM jobq.claim(ARRAY['mq_b', 'mq_a'], 5)), ARRAY['a1'],
          'the remaining job is claimed next');
SELECT is((SELECT array_agg(payload->>'n') FROM jobq.claim(ARRAY['mq_c'], 1, lease => interval '2 seconds')),
          ARRAY['c1'], 'a one-element queue array works like claim(text)');
SELECT is((SELECT lease_expires_at - started_at FROM jobq._job WHERE payload->>'n' = 'c1'), interval '2 seconds',
          'lease override applies in multi-queue claim');

-- A queue named twice counts once: n jobs still come back.
SELECT jobq.enqueue_many('mq_d', ARRAY['{"n": "d1"}', '{"n": "d2"}', '{"n": "d3"}']::jsonb[]);
SELECT is(ARRAY(SELECT payload->>'n' FROM jobq.claim(ARRAY['mq_d', 'mq_d'], 3)), ARRAY['d1', 'd2', 'd3'],
          'a repeated queue in the array does not reduce the batch');
SELECT throws_ok($$SELECT * FROM jobq.claim('[0:1]={mq_d,"bad name"}'::text[], 1)$$, 'JQ001',
                 'jobq: queues[1] must be a queue name of 1 to 128 characters from [A-Za-z0-9_.:-], got ''bad name''',
                 'an array starting at index 0 names the bad element by its own subscript (0.8.0: its position, 2)');

-- The inner order picks WHICH jobs a claim takes (issue 30: a claim of all the ready jobs, re-sorted by the
-- outer ORDER BY, passed with the inner order broken). Eight ready jobs per queue whose id, run_at and
-- priority orders all differ, and a tie on (priority, run_at) cut by n = 3: by priority, run_at, id the
-- first three are o6, o3, o2 (by id: o1 o2 o3; run_at first: o7 o4 o2; id descending on the tie: o5).
-- On a plain queue (one statement) and on a limited one (jobq._pick), and across two queues.
DO $$
DECLARE
    v_queue text;
BEGIN
    PERFORM jobq.configure_queue('ord_limited', concurrency => 100);
    FOREACH v_queue IN ARRAY ARRAY['ord_plain', 'ord_limited', 'ord_x', 'ord_y'] LOOP
        PERFORM jobq.enqueue(v_queue, jsonb_build_object('o', o.name, 'q', v_queue), now() - o.age, o.priority)
        FROM (VALUES ('o1', interval '1 minute', 0), ('o2', interval '5 minutes', 0), ('o3', interval '1 minute', -1),
                     ('o4', interval '10 minutes', 1), ('o5', interval '5 minutes', 0), ('o6', interval '2 minutes', -1),
                     ('o7', interval '1 day', 2), ('o8', interval '3 minutes', 0)) AS o(name, age, priority)
        ORDER BY o.name;
    END LOOP;
END $$;
SELECT is(ARRAY(SELECT payload->>'o' FROM jobq.claim('ord_plain', 3)), ARRAY['o6', 'o3', 'o2'],
          'a plain queue''s claim of 3 of 8 takes the 3 most urgent (priority, run_at, id)');
SELECT is(ARRAY(SELECT payload->>'o' FROM jobq.claim('ord_plain', 3)), ARRAY['o5', 'o8', 'o1'],
          '... and the next claim the next 3');
SELECT is(ARRAY(SELECT payload->>'o' FROM jobq.claim('ord_limited', 3)), ARRAY['o6', 'o3', 'o2'],
          'a limited queue''s claim (jobq._pick) of 3 of 8 takes the 3 most urgent');
SELECT is(ARRAY(SELECT payload->>'o' FROM jobq.claim('ord_limited', 3)), ARRAY['o5', 'o8', 'o1'],
          '... and the next claim the next 3');
SELECT is(ARRAY(SELECT (payload->>'q') || ':' || (payload->>'o') FROM jobq.claim(ARRAY['ord_x', 'ord_y'], 3)),
          ARRAY['ord_x:o6', 'ord_y:o6', 'ord_x:o3'],
          'a claim of 3 across two queues of 8 takes the 3 most urgent of both (the tie on o6 by id)');

SELECT * FROM finish();
ROLLBACK;

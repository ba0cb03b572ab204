-- The fast argument checks agree with the full ones (issue 30, item 4).
-- enqueue, enqueue_many, claim, take and hold ask one expression first
-- (jobq._enqueue_args_ok, jobq._claim_args_ok); only a false sends the call
-- through the _check_* functions that name the bad argument. Validity is
-- defined in both places, so here both judge every input of a generated
-- table: the fast check never passes what a full check refuses (a bad
-- argument would slip through unchecked), and never refuses what they all
-- pass (a good call would pay for the slow path).
BEGIN;
SELECT plan(8);

-- The full checks as enqueue and claim run them: NULL when all pass, else the SQLSTATE raised.
CREATE FUNCTION pg_temp.enqueue_refusal(p_queue text, p_run_at timestamptz, p_priority integer,
                                        p_max_attempts integer, p_job_key text, p_group_key text)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM jobq._check_queue(p_queue, 'queue');
    PERFORM jobq._check_time(p_run_at, 'run_at');
    PERFORM jobq._check_job_options(p_priority, p_max_attempts);
    PERFORM jobq._check_job_key(p_job_key, 'job_key');
    PERFORM jobq._check_job_key(p_group_key, 'group_key');
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;

CREATE FUNCTION pg_temp.claim_refusal(p_queues text[], p_n integer, p_lease interval, p_worker text)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM jobq._check_worker(p_worker);
    PERFORM jobq._check_claim_args(p_queues, p_n, p_lease);
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;

-- enqueue: every combination of good, boundary and bad values of each argument
CREATE TEMP TABLE enqueue_inputs AS
SELECT q.v AS queue, r.v AS run_at, p.v AS priority, m.v AS max_attempts, k.v AS job_key, g.v AS group_key
FROM (VALUES ('q'), ('billing.invoices:eu-1_A'), (repeat('x', 128)), (repeat('x', 129)), (''), (NULL),
             ('has space'), ('é'), (E'q\n')) AS q(v),
     (VALUES (now()), (NULL), ('infinity'), ('-infinity'), (now() + interval '10 years'),
             (now() + interval '10 years 1 second'), (now() - interval '10 years'),
             (now() - interval '10 years 1 second')) AS r(v),
     (VALUES (0), (-32768), (32767), (-32769), (32768), (NULL)) AS p(v),
     (VALUES (NULL), (1), (1000), (0), (1001)) AS m(v),
     (VALUES (NULL), (repeat('k', 512)), (''), (repeat('k', 513))) AS k(v),
     (VALUES (NULL), ('g'), (''), (repeat('g', 513))) AS g(v)
WHERE (k.v IS NULL AND g.v IS NULL) OR (q.v = 'q' AND r.v = now());  -- keys crossed with the rest at one point
CREATE TEMP TABLE enqueue_judged AS
SELECT i.*, jobq._enqueue_args_ok(i.queue, i.run_at, i.priority, i.max_attempts, i.job_key, i.group_key) AS fast,
       pg_temp.enqueue_refusal(i.queue, i.run_at, i.priority, i.max_attempts, i.job_key, i.group_key) AS refusal
FROM enqueue_inputs AS i;

SELECT results_eq($$SELECT count(*) FILTER (WHERE fast) > 100, count(*) FILTER (WHERE NOT fast) > 100
                    FROM enqueue_judged$$,
                  $$VALUES (true, true)$$,
                  'the enqueue inputs hold many good and many bad combinations');
SELECT is_empty($$SELECT queue, run_at, priority, max_attempts, job_key, group_key, refusal
                  FROM enqueue_judged WHERE fast AND refusal IS NOT NULL$$,
                'jobq._enqueue_args_ok passes nothing the full checks refuse');
SELECT is_empty($$SELECT queue, run_at, priority, max_attempts, job_key, group_key
                  FROM enqueue_judged WHERE NOT fast AND refusal IS NULL$$,
                'jobq._enqueue_args_ok refuses nothing the full checks pass');
SELECT is_empty($$SELECT DISTINCT refusal FROM enqueue_judged WHERE refusal NOT LIKE 'JQ%'$$,
                'the full enqueue checks refuse with jobq''s SQLSTATEs only');

-- claim, take, hold: queue lists, n, lease, worker
CREATE TEMP TABLE claim_inputs AS
SELECT q.v AS queues, n.v AS n, l.v AS lease, w.v AS worker
FROM (VALUES (ARRAY['q']), (ARRAY['a', 'b.c:d-e_F']), (ARRAY['a', 'a']), (ARRAY[repeat('x', 128)]),
             (ARRAY[repeat('x', 129)]), (ARRAY['']), (ARRAY['a', NULL]), (ARRAY[NULL]::text[]), ('{}'::text[]),
             (NULL::text[]), (ARRAY['has space']), (ARRAY['a b']), (ARRAY['a', 'b c']), (ARRAY['a', ' ']),
             (ARRAY['é']), ('[0:1]={a,b}'::text[]), (ARRAY[['a'], ['b']]),
             (ARRAY(SELECT 'q' || i FROM generate_series(1, 100) AS i)),
             (ARRAY(SELECT 'q' || i FROM generate_series(1, 101) AS i))) AS q(v),
     (VALUES (0), (1), (1000), (1001), (-1), (NULL)) AS n(v),
     (VALUES (NULL::interval), ('1 second'), ('1 day'), ('0.999 seconds'), ('1 day 00:00:01'), ('24:00:00'),
             ('24:00:01'), ('1 mon'), ('1 day -23:59:59'), ('-1 day 25:00:00')) AS l(v),
     (VALUES (NULL), ('w'), (''), (repeat('w', 200)), (repeat('w', 201))) AS w(v);
CREATE TEMP TABLE claim_judged AS
SELECT i.*, jobq._claim_args_ok(i.queues, i.n, i.lease, i.worker) AS fast,
       pg_temp.claim_refusal(i.queues, i.n, i.lease, i.worker) AS refusal
FROM claim_inputs AS i;

SELECT results_eq($$SELECT count(*) FILTER (WHERE fast) > 100, count(*) FILTER (WHERE NOT fast) > 100
                    FROM claim_judged$$,
                  $$VALUES (true, true)$$,
                  'the claim inputs hold many good and many bad combinations');
SELECT is_empty($$SELECT queues, n, lease, worker, refusal FROM claim_judged WHERE fast AND refusal IS NOT NULL$$,
                'jobq._claim_args_ok passes nothing the full checks refuse');
SELECT is_empty($$SELECT queues, n, lease, worker FROM claim_judged WHERE NOT fast AND refusal IS NULL$$,
                'jobq._claim_args_ok refuses nothing the full checks pass');
SELECT is_empty($$SELECT DISTINCT refusal FROM claim_judged WHERE refusal NOT LIKE 'JQ%'$$,
                'the full claim checks refuse with jobq''s SQLSTATEs only');

SELECT * FROM finish();
ROLLBACK;

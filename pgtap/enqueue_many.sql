-- jobq.enqueue_many(): bulk add in one call, ids in payload order.
BEGIN;
SELECT plan(21);

CREATE TEMP TABLE r (name text PRIMARY KEY, ids bigint[]);

INSERT INTO r SELECT 'five', ARRAY(SELECT jobq.enqueue_many('bulk',
    ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}', '{"n": 4}', '{"n": 5}']::jsonb[]));
SELECT is(cardinality((SELECT ids FROM r WHERE name = 'five')), 5, 'one id per payload');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'bulk'), 5, 'five rows were added');
SELECT is(ARRAY(SELECT (j.payload->>'n')::int
                FROM unnest((SELECT ids FROM r WHERE name = 'five')) WITH ORDINALITY AS i(id, ord)
                JOIN jobq._job AS j ON j.id = i.id ORDER BY i.ord),
          ARRAY[1, 2, 3, 4, 5], 'the returned ids are in payload order');
SELECT is((SELECT ids FROM r WHERE name = 'five'),
          ARRAY(SELECT unnest((SELECT ids FROM r WHERE name = 'five')) ORDER BY 1),
          'ids increase in payload order');
SELECT results_eq(
    $$SELECT DISTINCT status, priority::int, max_attempts, run_at, attempts, job_key FROM jobq._job WHERE queue = 'bulk'$$,
    $$VALUES ('ready'::text, 0, 25, now(), 0, NULL::text)$$,
    'every row gets the defaults: ready now, priority 0, max_attempts 25, no key');

INSERT INTO r SELECT 'opts', ARRAY(SELECT jobq.enqueue_many('bulk2', ARRAY['{}', '{}', '{}']::jsonb[],
                                                         now() + interval '10 minutes', 4, 9));
SELECT results_eq(
    $$SELECT count(*)::int, min(run_at), max(run_at), min(priority)::int, max(priority)::int,
             min(max_attempts), max(max_attempts)
      FROM jobq._job WHERE queue = 'bulk2'$$,
    $$VALUES (3, now() + interval '10 minutes', now() + interval '10 minutes', 4, 4, 9, 9)$$,
    'run_at, priority and max_attempts apply to every row');

DO $$ BEGIN PERFORM jobq.configure_queue('bulk3', max_attempts => 4); END $$;
INSERT INTO r SELECT 'tuned', ARRAY(SELECT jobq.enqueue_many('bulk3', ARRAY['{}', '{}']::jsonb[]));
SELECT is((SELECT array_agg(DISTINCT max_attempts) FROM jobq._job WHERE queue = 'bulk3'), ARRAY[4],
          'max_attempts defaults to the queue setting');

-- empty batch
SELECT is_empty($$SELECT jobq.enqueue_many('empty', '{}'::jsonb[])$$, 'an empty array returns no ids');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'empty'), 0, 'an empty array adds nothing');
SELECT is_empty($$SELECT jobq.enqueue_many('empty', '{}'::jsonb[], job_keys => '{}'::text[])$$,
                'an empty array with empty job_keys returns no ids');

-- a large batch
INSERT INTO r SELECT 'big', ARRAY(SELECT jobq.enqueue_many('big',
    ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 5000) AS g)));
SELECT is(cardinality((SELECT ids FROM r WHERE name = 'big')), 5000, '5000 payloads give 5000 ids');
SELECT is((SELECT count(DISTINCT id)::int FROM jobq._job WHERE queue = 'big'), 5000, '5000 distinct rows were added');
SELECT is(ARRAY(SELECT (j.payload->>'i')::int
                FROM unnest((SELECT ids FROM r WHERE name = 'big')) WITH ORDINALITY AS i(id, ord)
                JOIN jobq._job AS j ON j.id = i.id ORDER BY i.ord),
          ARRAY(SELECT generate_series(1, 5000)), 'a large batch keeps payload order');

-- with job_keys
INSERT INTO r SELECT 'keys', ARRAY(SELECT jobq.enqueue_many('keyed',
    ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[], job_keys => ARRAY['a', NULL, 'c']));
SELECT is(cardinality((SELECT ids FROM r WHERE name = 'keys')), 3, 'with job_keys: one id per payload');
SELECT is(ARRAY(SELECT j.job_key
                FROM unnest((SELECT ids FROM r WHERE name = 'keys')) WITH ORDINALITY AS i(id, ord)
                JOIN jobq._job AS j ON j.id = i.id ORDER BY i.ord),
          ARRAY['a', NULL, 'c'], 'with job_keys: ids in payload order, each key on its job (NULL = no key)');
SELECT is(ARRAY(SELECT (j.payload->>'n')::int
                FROM unnest((SELECT ids FROM r WHERE name = 'keys')) WITH ORDINALITY AS i(id, ord)
                JOIN jobq._job AS j ON j.id = i.id ORDER BY i.ord),
          ARRAY[1, 2, 3], 'with job_keys: payloads match their ids');

-- arrays that do not start at index 1 are paired by position
INSERT INTO r SELECT 'offset', ARRAY(SELECT jobq.enqueue_many('offset',
    '[0:2]={"{\"i\": 1}","{\"i\": 2}","{\"i\": 3}"}'::jsonb[], job_keys => '[5:7]={x,NULL,z}'::text[]));
SELECT is(ARRAY(SELECT (j.payload->>'i') || ':' || coalesce(j.job_key, '-')
                FROM unnest((SELECT ids FROM r WHERE name = 'offset')) WITH ORDINALITY AS i(id, ord)
                JOIN jobq._job AS j ON j.id = i.id ORDER BY i.ord),
          ARRAY['1:x', '2:-', '3:z'], 'payloads and job_keys with other lower bounds are paired by position');
INSERT INTO r SELECT 'offset2', ARRAY(SELECT jobq.enqueue_many('offset2', '[-1:0]={"{\"i\": 1}","{\"i\": 2}"}'::jsonb[]));
SELECT is(ARRAY(SELECT (j.payload->>'i')::int
                FROM unnest((SELECT ids FROM r WHERE name = 'offset2')) WITH ORDINALITY AS i(id, ord)
                JOIN jobq._job AS j ON j.id = i.id ORDER BY i.ord),
          ARRAY[1, 2], 'a payload array with another lower bound keeps its order (no job_keys)');

-- mixed with single enqueue, same queue ordering by claim
SELECT is((SELECT array_agg(id ORDER BY id) FROM jobq.claim('bulk', 5)),
          (SELECT ids FROM r WHERE name = 'five'), 'equal-priority bulk jobs are claimed in payload order');

-- nothing else leaked into other queues
SELECT set_eq($$SELECT DISTINCT queue FROM jobq._job$$,
              ARRAY['bulk', 'bulk2', 'bulk3', 'big', 'keyed', 'offset', 'offset2'],
              'enqueue_many only writes to the named queue');
SELECT is((SELECT count(*)::int FROM jobq._job_archive), 0, 'enqueue_many does not touch the archive');

SELECT * FROM finish();
ROLLBACK;

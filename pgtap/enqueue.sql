-- jobq.enqueue(): one job per call, defaults, options, queue settings.
BEGIN;
SELECT plan(31);

CREATE TEMP TABLE t (name text PRIMARY KEY, id bigint);

INSERT INTO t VALUES ('plain', jobq.enqueue('emails', '{"to": "a@example.com"}'));
SELECT isnt((SELECT id FROM t WHERE name = 'plain'), NULL, 'enqueue returns an id');
SELECT results_eq(
    $$SELECT queue, payload, status, priority::int, attempts, max_attempts, run_at, created_at,
             job_key, lease_token, lease_expires_at, worker, last_error, started_at, group_key
      FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'plain')$$,
    $$VALUES ('emails'::text, '{"to": "a@example.com"}'::jsonb, 'ready'::text, 0, 0, 25, now(), now(),
              NULL::text, NULL::uuid, NULL::timestamptz, NULL::text, NULL::text, NULL::timestamptz, NULL::text)$$,
    'defaults: ready now, priority 0, 0 attempts, max_attempts 25, no key, no lease, no group');
SELECT is((SELECT count(*)::int FROM jobq._job), 1, 'exactly one row was added');
SELECT is((SELECT count(*)::int FROM jobq._job_archive), 0, 'enqueue does not touch the archive');

INSERT INTO t VALUES ('second', jobq.enqueue('emails', '{"n": 2}'));
SELECT cmp_ok((SELECT id FROM t WHERE name = 'second'), '>', (SELECT id FROM t WHERE name = 'plain'),
              'ids increase');

-- options
INSERT INTO t VALUES ('opts', jobq.enqueue('reports', '{"r": 1}', now() + interval '1 hour', -7, 3, 'report:1'));
SELECT results_eq(
    $$SELECT queue, run_at, priority::int, max_attempts, job_key, status
      FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'opts')$$,
    $$VALUES ('reports'::text, now() + interval '1 hour', -7, 3, 'report:1'::text, 'ready'::text)$$,
    'run_at, priority, max_attempts and job_key are stored');
SELECT is((SELECT status FROM jobq.jobs WHERE id = (SELECT id FROM t WHERE name = 'opts')), 'scheduled',
          'a job with a future run_at shows as scheduled');

INSERT INTO t VALUES ('named', jobq.enqueue(queue => 'named', payload => '{}', job_key => 'k', priority => 5));
INSERT INTO t VALUES ('grouped', jobq.enqueue('named', '{}', group_key => repeat('g', 512)));
SELECT is((SELECT group_key FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'grouped')), repeat('g', 512),
          'a 512-character group_key is stored');
SELECT results_eq(
    $$SELECT priority::int, job_key, run_at FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'named')$$,
    $$VALUES (5, 'k'::text, now())$$,
    'named arguments work and unnamed options keep their defaults');

INSERT INTO t VALUES ('past', jobq.enqueue('emails', '{}', now() - interval '1 day'));
SELECT is((SELECT run_at FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'past')),
          now() - interval '1 day', 'a run_at in the recent past is accepted as is');
SELECT is((SELECT status FROM jobq.jobs WHERE id = (SELECT id FROM t WHERE name = 'past')), 'ready',
          'a job with a past run_at is ready');

-- boundaries that must be accepted
SELECT lives_ok($$SELECT jobq.enqueue('x', '{}', priority => -32768)$$, 'priority -32768 is accepted');
SELECT lives_ok($$SELECT jobq.enqueue('x', '{}', priority => 32767)$$, 'priority 32767 is accepted');
SELECT lives_ok($$SELECT jobq.enqueue('x', '{}', max_attempts => 1)$$, 'max_attempts 1 is accepted');
SELECT lives_ok($$SELECT jobq.enqueue('x', '{}', max_attempts => 1000)$$, 'max_attempts 1000 is accepted');
SELECT lives_ok($$SELECT jobq.enqueue(repeat('q', 128), '{}')$$, 'a 128-character queue name is accepted');
SELECT lives_ok($$SELECT jobq.enqueue('Billing.invoices:v2-EU_1', '{}')$$,
                'queue names may use letters, digits and _ . : -');
SELECT lives_ok($$SELECT jobq.enqueue('x', '{}', job_key => repeat('k', 512))$$, 'a 512-character job_key is accepted');
SELECT lives_ok($$SELECT jobq.enqueue('x', '{}', now() + interval '9 years')$$, 'run_at 9 years ahead is accepted');
SELECT lives_ok($$SELECT jobq.enqueue('x', '{"nested": {"a": [1, 2, {"b": null}]}}')$$, 'nested payloads are accepted');

-- queue settings
SELECT lives_ok($$SELECT jobq.configure_queue('tuned', max_attempts => 7)$$, 'configure max_attempts 7 for queue tuned');
INSERT INTO t VALUES ('tuned', jobq.enqueue('tuned', '{}'));
SELECT is((SELECT max_attempts FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'tuned')), 7,
          'max_attempts defaults to the queue setting');
INSERT INTO t VALUES ('tuned2', jobq.enqueue('tuned', '{}', max_attempts => 2));
SELECT is((SELECT max_attempts FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'tuned2')), 2,
          'an explicit max_attempts overrides the queue setting');

-- payload size cap is inclusive and per queue
DO $$ BEGIN PERFORM jobq.configure_queue('small', max_payload_bytes => pg_column_size('{"data": "0123456789"}'::jsonb)); END $$;
SELECT lives_ok($$SELECT jobq.enqueue('small', '{"data": "0123456789"}')$$,
                'a payload of exactly max_payload_bytes is accepted');
SELECT throws_ok($$SELECT jobq.enqueue('small', '{"data": "0123456789x"}')$$, 'JQ003', NULL,
                 'a payload one byte over the queue cap is rejected with JQ003');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'small'), 1,
          'the rejected payload left no job (the one-statement path inserts nothing over the cap)');

-- the one-statement path (no key, group, timeout, parents) and the general one store the same settings
DO $$ BEGIN PERFORM jobq.configure_queue('same', max_attempts => 4, timeout => '40 seconds'); END $$;
INSERT INTO t VALUES ('same_fast', jobq.enqueue('same', '{}', priority => 3));
INSERT INTO t VALUES ('same_keyed', jobq.enqueue('same', '{}', priority => 3, job_key => 'k'));
SELECT results_eq(
    $$SELECT queue, payload, status, priority::int, attempts, max_attempts, timeout, run_at, parked
      FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'same_fast')$$,
    $$SELECT queue, payload, status, priority::int, attempts, max_attempts, timeout, run_at, parked
      FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'same_keyed')$$,
    'a job without a key gets the queue''s max_attempts and timeout as a keyed one does');
SELECT is((SELECT max_attempts || ' ' || timeout FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'same_fast')),
          '4 00:00:40', 'the queue''s settings, not the defaults');
SELECT lives_ok($$SELECT jobq.enqueue('big', jsonb_build_object('data', repeat('x', 1000000)))$$,
                'a payload just under the 1 MiB default cap is accepted');

-- the job exists iff the caller's transaction (here: subtransaction) commits
SAVEPOINT before_enqueue;
DO $$ BEGIN PERFORM jobq.enqueue('txn', '{}'); END $$;
ROLLBACK TO SAVEPOINT before_enqueue;
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'txn'), 0,
          'an enqueue rolled back with its (sub)transaction leaves no job');
SAVEPOINT before_enqueue2;
DO $$ BEGIN PERFORM jobq.enqueue('txn', '{}'); END $$;
RELEASE SAVEPOINT before_enqueue2;
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'txn'), 1,
          'an enqueue whose (sub)transaction commits leaves exactly one job');

SELECT * FROM finish();
ROLLBACK;

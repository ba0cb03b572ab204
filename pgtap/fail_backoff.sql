-- jobq._backoff_delay() and jobq.fail(): backoff, jitter, retry_at, dead letter.
BEGIN;
SELECT plan(51);

-- _backoff_delay(attempt, base, cap, jitter, random) -----------------------
SELECT is(jobq._backoff_delay(1, '2 s', '1 hour', 0, 0), interval '2 s', 'attempt 1: base');
SELECT is(jobq._backoff_delay(2, '2 s', '1 hour', 0, 0), interval '4 s', 'attempt 2: base * 2');
SELECT is(jobq._backoff_delay(10, '2 s', '1 hour', 0, 0), interval '1024 s', 'attempt 10: base * 2^9');
SELECT is(jobq._backoff_delay(11, '2 s', '1 hour', 0, 0), interval '2048 s', 'attempt 11: base * 2^10');
SELECT is(jobq._backoff_delay(12, '2 s', '1 hour', 0, 0), interval '1 hour', 'attempt 12: capped (4096 s > 1 h)');
SELECT is(jobq._backoff_delay(1000, '2 s', '1 hour', 0, 0), interval '1 hour', 'attempt 1000: the cap');
SELECT is(jobq._backoff_delay(2147483647, '2 s', '1 hour', 0, 0), interval '1 hour', 'attempt 2147483647: the cap, no overflow');
SELECT is(jobq._backoff_delay(2147483647, '1 day', '30 days', 0, 0), interval '30 days',
          'attempt 2147483647 with the largest base and cap: no overflow');
SELECT is(jobq._backoff_delay(2147483647, '1 day', '30 days', 1, 0.999999), interval '2.592 s',
          'attempt 2147483647, full jitter, random near 1: no overflow');
SELECT is(jobq._backoff_delay(0, '2 s', '1 hour', 0, 0), interval '2 s', 'attempt 0 is treated as 1');
SELECT is(jobq._backoff_delay(-5, '2 s', '1 hour', 0, 0), interval '2 s', 'a negative attempt is treated as 1');
SELECT is(jobq._backoff_delay(5, '0', '1 hour', 0.5, 0.5), interval '0', 'base 0: no delay');
SELECT is(jobq._backoff_delay(5, '2 s', '0', 0, 0), interval '0', 'cap 0: no delay');
-- jitter: factor 1 - jitter * random, random in [0, 1)
SELECT is(jobq._backoff_delay(1, '2 s', '1 hour', 0.25, 0), interval '2 s', 'attempt 1, jitter 0.25, random 0: full delay');
SELECT is(jobq._backoff_delay(1, '2 s', '1 hour', 0.25, 0.5), interval '1.75 s', 'attempt 1, jitter 0.25, random 0.5: x0.875');
SELECT is(jobq._backoff_delay(2, '2 s', '1 hour', 0.25, 0.5), interval '3.5 s', 'attempt 2, jitter 0.25, random 0.5: x0.875');
SELECT is(jobq._backoff_delay(10, '2 s', '1 hour', 0.25, 0.5), interval '896 s', 'attempt 10, jitter 0.25, random 0.5: x0.875');
SELECT is(jobq._backoff_delay(1000, '2 s', '1 hour', 0.25, 0.5), interval '3150 s', 'attempt 1000, jitter 0.25, random 0.5: cap x0.875');
SELECT is(jobq._backoff_delay(2147483647, '2 s', '1 hour', 0.25, 0.5), interval '3150 s', 'attempt 2147483647 with jitter: cap x0.875');
SELECT ok(jobq._backoff_delay(1000, '2 s', '1 hour', 0.25, 0.999999) BETWEEN interval '2700 s' AND interval '3600 s',
          'jitter never takes the delay below (1 - jitter) * delay');
SELECT is(jobq._backoff_delay(3, '2 s', '1 hour', 1, 0.5), interval '4 s', 'jitter 1, random 0.5: half of 8 s');

-- fail(): backoff with the defaults (base 2 s, cap 1 h, jitter 0.25) --------
CREATE TEMP TABLE t (name text PRIMARY KEY, id bigint);
INSERT INTO t VALUES ('j', jobq.enqueue('f', '{"x": 1}', max_attempts => 3));
CREATE TEMP TABLE c1 AS SELECT * FROM jobq.claim('f', 1, 'w1');
SELECT is(jobq.fail((SELECT id FROM c1), 'first error', (SELECT lease_token FROM c1)), true,
          'fail with the lease token returns true');
SELECT results_eq(
    $$SELECT status, attempts, lease_token, lease_expires_at, last_error FROM jobq._job WHERE id = (SELECT id FROM t)$$,
    $$VALUES ('ready'::text, 1, NULL::uuid, NULL::timestamptz, 'first error'::text)$$,
    'after fail: ready again, attempts kept, lease cleared, last_error recorded');
SELECT ok((SELECT run_at FROM jobq._job WHERE id = (SELECT id FROM t))
          BETWEEN now() + interval '1.5 s' AND now() + interval '2 s',
          'after the 1st failure run_at is in [now + 2 s * 0.75, now + 2 s]');
SELECT is((SELECT status FROM jobq.jobs WHERE id = (SELECT id FROM t)), 'scheduled', 'a backing-off job shows as scheduled');
SELECT is_empty($$SELECT * FROM jobq.claim('f')$$, 'a backing-off job is not claimed before its run_at');

UPDATE jobq._job SET run_at = now() - interval '1 s' WHERE id = (SELECT id FROM t);
CREATE TEMP TABLE c2 AS SELECT * FROM jobq.claim('f', 1, 'w2');
SELECT is((SELECT attempts FROM c2), 2, 'second claim: attempts 2');
SELECT ok(jobq.fail((SELECT id FROM c2), 'second error', (SELECT lease_token FROM c2)), 'second failure');
SELECT ok((SELECT run_at FROM jobq._job WHERE id = (SELECT id FROM t))
          BETWEEN now() + interval '3 s' AND now() + interval '4 s',
          'after the 2nd failure run_at is in [now + 4 s * 0.75, now + 4 s]');

-- the last attempt: dead letter
UPDATE jobq._job SET run_at = now() - interval '1 s' WHERE id = (SELECT id FROM t);
CREATE TEMP TABLE c3 AS SELECT * FROM jobq.claim('f', 1, 'w3');
SELECT is((SELECT attempts FROM c3), 3, 'third claim: attempts 3 of 3');
SELECT is(jobq.fail((SELECT id FROM c3), 'final error', (SELECT lease_token FROM c3)), true,
          'failing the last attempt returns true');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id = (SELECT id FROM t)), 0, 'a dead job leaves the live table');
SELECT results_eq(
    $$SELECT status, payload, attempts, max_attempts, last_error, worker, prune_after
      FROM jobq._job_archive WHERE id = (SELECT id FROM t)$$,
    $$VALUES ('dead'::text, '{"x": 1}'::jsonb, 3, 3, 'final error'::text, 'w3'::text, NULL::timestamptz)$$,
    'the dead job keeps payload, attempts and last error, and is kept until retried (no dead_retention)');
SELECT is((SELECT status FROM jobq.jobs WHERE id = (SELECT id FROM t)), 'dead', 'jobq.jobs shows it as dead');
SELECT is((SELECT dead::int FROM jobq.stats WHERE queue = 'f'), 1, 'jobq.stats counts it as dead');
SELECT is_empty($$SELECT * FROM jobq.claim('f', 1000)$$, 'a dead job is never claimed');
SELECT is(jobq.fail((SELECT id FROM c3), 'again', (SELECT lease_token FROM c3)), false,
          'failing a dead job again returns false');

-- max_attempts 1: the first failure is final
INSERT INTO t VALUES ('once', jobq.enqueue('once', '{}', max_attempts => 1));
CREATE TEMP TABLE c4 AS SELECT * FROM jobq.claim('once');
SELECT throws_ok($$SELECT jobq.fail((SELECT id FROM c4), NULL, (SELECT lease_token FROM c4))$$, 'JQ017',
                 'jobq: error must not be NULL', 'fail with a NULL error raises JQ017 (a failure records why)');
SELECT is((SELECT status FROM jobq._job WHERE id = (SELECT id FROM c4)), 'running',
          '... and changes nothing: the job is still running');
SELECT ok(jobq.fail((SELECT id FROM c4), '', (SELECT lease_token FROM c4)), 'fail with an empty error');
SELECT is((SELECT status FROM jobq._job_archive WHERE id = (SELECT id FROM t WHERE name = 'once')), 'dead',
          'with max_attempts 1 the first failure dead-letters');

-- retry_at overrides the backoff
INSERT INTO t VALUES ('at', jobq.enqueue('at', '{}'));
CREATE TEMP TABLE c5 AS SELECT * FROM jobq.claim('at');
SELECT ok(jobq.fail((SELECT id FROM c5), 'later', (SELECT lease_token FROM c5), now() + interval '3 hours'), 'fail with retry_at');
SELECT is((SELECT run_at FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'at')), now() + interval '3 hours',
          'retry_at sets run_at exactly (beyond the cap)');

-- queue settings: base, cap, jitter 0 give an exact delay; dead_retention
DO $$ BEGIN
    PERFORM jobq.configure_queue('tuned', backoff_base => interval '10 s', backoff_cap => interval '1 min',
                                 backoff_jitter => 0, dead_retention => interval '2 days');
END $$;
INSERT INTO t VALUES ('tuned', jobq.enqueue('tuned', '{}', max_attempts => 30));
CREATE TEMP TABLE c6 AS SELECT * FROM jobq.claim('tuned');
SELECT ok(jobq.fail((SELECT id FROM c6), 'e', (SELECT lease_token FROM c6)), 'fail in a tuned queue');
SELECT is((SELECT run_at FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'tuned')), now() + interval '10 s',
          'jitter 0: the delay is exactly the queue''s base');
UPDATE jobq._job SET run_at = now(), attempts = 9 WHERE id = (SELECT id FROM t WHERE name = 'tuned');
CREATE TEMP TABLE c7 AS SELECT * FROM jobq.claim('tuned');
SELECT ok(jobq.fail((SELECT id FROM c7), 'e', (SELECT lease_token FROM c7)), 'fail at attempt 10 in a tuned queue');
SELECT is((SELECT run_at FROM jobq._job WHERE id = (SELECT id FROM t WHERE name = 'tuned')), now() + interval '1 min',
          'the delay is capped at the queue''s backoff_cap');
UPDATE jobq._job SET run_at = now(), attempts = 29 WHERE id = (SELECT id FROM t WHERE name = 'tuned');
CREATE TEMP TABLE c8 AS SELECT * FROM jobq.claim('tuned');
SELECT ok(jobq.fail((SELECT id FROM c8), repeat('h', 5000) || repeat('x', 10000) || 'ValueError: the end',
                    (SELECT lease_token FROM c8)), 'final failure with a 15019-character error');
SELECT results_eq(
    $$SELECT status, prune_after - finished_at, char_length(last_error) <= 10000,
             left(last_error, 2000) = repeat('h', 2000), right(last_error, 19) = 'ValueError: the end',
             last_error LIKE '%[… 5119 characters cut …]%'
      FROM jobq._job_archive WHERE id = (SELECT id FROM t WHERE name = 'tuned')$$,
    $$VALUES ('dead'::text, interval '2 days', true, true, true, true)$$,
    'dead_retention sets prune_after; a long error keeps its head and its tail (the exception) within 10000 characters');

-- jitter is random per failure (issue 30: a fail() passing 0 instead of random() kept every other test
-- green): 40 first failures with jitter 0.5 and base 100 s each get their own delay in [50 s, 100 s],
-- spread over that range (40 uniform draws all within 25 s of each other: p < 1e-10)
DO $$ BEGIN
    PERFORM jobq.configure_queue('spread', backoff_base => interval '100 s', backoff_cap => interval '1 hour',
                                 backoff_jitter => 0.5);
    PERFORM jobq.configure_queue('spread_held', backoff_base => interval '100 s', backoff_cap => interval '1 hour',
                                 backoff_jitter => 0.5);
    PERFORM jobq.enqueue_many('spread', array_fill('{}'::jsonb, ARRAY[40]));
    PERFORM jobq.enqueue_many('spread_held', array_fill('{}'::jsonb, ARRAY[40]));
    PERFORM jobq.fail(c.id, 'e', c.lease_token) FROM jobq.claim('spread', 40) AS c;
    PERFORM jobq.fail_held(h.id, 'e') FROM jobq.hold('spread_held', 40) AS h;
END $$;
SELECT results_eq(
    $$SELECT count(*)::int, count(DISTINCT run_at)::int, bool_and(run_at - now() BETWEEN interval '50 s' AND interval '100 s'),
             max(run_at) - min(run_at) > interval '25 s'
      FROM jobq._job WHERE queue = 'spread' AND attempts = 1 AND status = 'ready'$$,
    $$VALUES (40, 40, true, true)$$,
    'fail: each retry draws its own jitter: 40 distinct delays within [base * (1 - jitter), base], spread over it');
SELECT results_eq(
    $$SELECT count(*)::int, count(DISTINCT run_at)::int, bool_and(run_at - now() BETWEEN interval '50 s' AND interval '100 s'),
             max(run_at) - min(run_at) > interval '25 s'
      FROM jobq._job WHERE queue = 'spread_held' AND attempts = 1 AND status = 'ready'$$,
    $$VALUES (40, 40, true, true)$$,
    'fail_held: each retry draws its own jitter: 40 distinct delays within [base * (1 - jitter), base], spread over it');

SELECT * FROM finish();
ROLLBACK;

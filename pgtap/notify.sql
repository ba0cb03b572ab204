-- Wake-up: one NOTIFY jobq, <queue> per queue per inserting statement.
-- Pending notifications are invisible before commit, so the trigger function
-- (unchanged) is pointed at a spy pg_notify() for the length of this
-- rolled-back transaction, and the exact calls are counted.
BEGIN;
SELECT plan(43);

-- the trigger definition
SELECT has_trigger('jobq', '_job', '_900_notify_worker', 'jobq._job has the notify trigger');
SELECT trigger_is('jobq', '_job', '_900_notify_worker', 'jobq', '_notify_inserted',
                  'the trigger calls jobq._notify_inserted()');
SELECT is((SELECT tgtype::int FROM pg_catalog.pg_trigger
           WHERE tgrelid = 'jobq._job'::regclass AND tgname = '_900_notify_worker'),
          4, 'tgtype = INSERT only, AFTER, FOR EACH STATEMENT (no ROW bit, no BEFORE bit)');
SELECT is((SELECT tgenabled::text FROM pg_catalog.pg_trigger
           WHERE tgrelid = 'jobq._job'::regclass AND tgname = '_900_notify_worker'),
          'O', 'the trigger is enabled');
SELECT is((SELECT tgnewtable::text FROM pg_catalog.pg_trigger
           WHERE tgrelid = 'jobq._job'::regclass AND tgname = '_900_notify_worker'),
          'inserted', 'the trigger reads the inserted rows through a transition table');
SELECT is((SELECT count(*)::int FROM pg_catalog.pg_trigger WHERE tgrelid = 'jobq._job'::regclass AND NOT tgisinternal),
          1, 'no other (e.g. row-level) trigger on jobq._job');
SELECT matches(pg_catalog.pg_get_functiondef('jobq._notify_inserted()'::regprocedure),
               'SELECT DISTINCT [a-z_.]*queue',
               'the trigger function notifies once per DISTINCT queue');

-- the spy
CREATE SCHEMA jobq_spy;
CREATE TABLE jobq_spy.calls (n serial PRIMARY KEY, channel text, payload text);
CREATE TABLE jobq_spy.log (channel text, payload text);   -- never truncated
CREATE FUNCTION jobq_spy.pg_notify(channel text, payload text) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO jobq_spy.calls (channel, payload) VALUES (channel, payload);
    INSERT INTO jobq_spy.log (channel, payload) VALUES (channel, payload);
$$;
ALTER FUNCTION jobq._notify_inserted() SET search_path = jobq_spy, pg_catalog, pg_temp;
ALTER FUNCTION jobq.reap(integer) SET search_path = jobq_spy, pg_catalog, pg_temp;
ALTER FUNCTION jobq.retry(bigint) SET search_path = jobq_spy, pg_catalog, pg_temp;
ALTER FUNCTION jobq.release(bigint, uuid) SET search_path = jobq_spy, pg_catalog, pg_temp;

DO $$ BEGIN PERFORM jobq.enqueue('alpha', '{"secret": "do not broadcast"}'); END $$;
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls ORDER BY n$$,
                  $$VALUES ('jobq'::text, 'alpha'::text)$$,
                  'enqueue sends one notification on channel jobq with the queue name as payload');

TRUNCATE jobq_spy.calls;
DO $$ BEGIN PERFORM jobq.enqueue_many('beta', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 500) AS g)); END $$;
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'beta'), 500, 'setup: 500 jobs in one enqueue_many');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls ORDER BY n$$,
                  $$VALUES ('jobq'::text, 'beta'::text)$$,
                  'enqueue_many of 500 jobs sends exactly one notification');

TRUNCATE jobq_spy.calls;
INSERT INTO jobq._job (queue, payload, max_attempts)
SELECT CASE WHEN g % 2 = 0 THEN 'gamma' ELSE 'delta' END, jsonb_build_object('i', g), 3
FROM generate_series(1, 300) AS g;
SELECT is((SELECT count(*)::int FROM jobq_spy.calls), 2, 'one statement inserting 300 rows into 2 queues sends exactly 2 notifications');
SELECT set_eq($$SELECT channel, payload FROM jobq_spy.calls$$,
              $$VALUES ('jobq'::text, 'gamma'::text), ('jobq', 'delta')$$,
              'one per queue, payload = queue name');

TRUNCATE jobq_spy.calls;
DO $$ BEGIN PERFORM jobq.enqueue_many('eps', ARRAY['{}', '{}', '{}']::jsonb[], job_keys => ARRAY['a', 'b', 'a']); END $$;
SELECT set_eq($$SELECT DISTINCT channel, payload FROM jobq_spy.calls$$,
              $$VALUES ('jobq'::text, 'eps'::text)$$,
              'enqueue_many with job_keys notifies only channel jobq with the queue name (listeners get one: same payload within a transaction)');

TRUNCATE jobq_spy.calls;
DO $$ BEGIN PERFORM jobq.enqueue('alpha', '{}', job_key => 'k'); END $$;
TRUNCATE jobq_spy.calls;
DO $$ BEGIN PERFORM jobq.enqueue('alpha', '{}', job_key => 'k'); END $$;
SELECT is((SELECT count(*)::int FROM jobq_spy.calls), 0, 'a duplicate job_key inserts nothing and notifies nothing');

TRUNCATE jobq_spy.calls;
DO $$ BEGIN
    PERFORM jobq.claim('alpha', 10);
    PERFORM jobq.claim('beta', 3);
    PERFORM jobq.claim(ARRAY['gamma'], 5);
END $$;
SELECT is((SELECT count(*)::int FROM jobq_spy.calls), 0, 'claim sends no notification');

-- reap wakes the queues that got jobs back, once each
UPDATE jobq._job SET lease_expires_at = now() - interval '1 minute' WHERE status = 'running';
TRUNCATE jobq_spy.calls;
SELECT is(jobq.reap(), 10, 'setup: reap returns 10 expired jobs (2 alpha, 3 beta, 5 gamma)');
SELECT set_eq($$SELECT channel, payload FROM jobq_spy.calls$$,
              $$VALUES ('jobq'::text, 'alpha'::text), ('jobq', 'beta'), ('jobq', 'gamma')$$,
              'reap notifies each queue that got jobs back');
SELECT is((SELECT count(*)::int FROM jobq_spy.calls), 3, 'reap notifies once per queue, not per job');

-- retry of a waiting job wakes its queue; retry_dead inserts and so notifies
TRUNCATE jobq_spy.calls;
SELECT ok(jobq.retry((SELECT min(id) FROM jobq._job WHERE queue = 'delta')), 'retry a ready job');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls$$, $$VALUES ('jobq'::text, 'delta'::text)$$,
                  'retry notifies the job''s queue');
DO $$ BEGIN
    PERFORM jobq.enqueue_many('zeta', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 5)), max_attempts => 1);
    PERFORM jobq.fail(c.id, 'x', c.lease_token) FROM jobq.claim('zeta', 5) AS c;
END $$;
TRUNCATE jobq_spy.calls;
SELECT is(jobq.retry_dead('zeta'), 5, 'setup: retry_dead brings back 5 jobs');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls$$, $$VALUES ('jobq'::text, 'zeta'::text)$$,
                  'retry_dead sends one notification for its queue');

-- release hands a job back and wakes its queue
CREATE TEMP TABLE rel AS SELECT * FROM jobq.claim('zeta');
TRUNCATE jobq_spy.calls;
SELECT ok(jobq.release((SELECT id FROM rel), (SELECT lease_token FROM rel)), 'release a claimed job');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls$$, $$VALUES ('jobq'::text, 'zeta'::text)$$,
                  'release notifies the job''s queue');

-- 0.2.0: finishing a job of a serial group or a concurrency-limited queue
-- frees a slot, so it wakes that queue (once per statement); other queues
-- stay quiet. resume() wakes the queue it un-pauses.
ALTER FUNCTION jobq._finish(bigint[], uuid[], text, text) SET search_path = jobq_spy, pg_catalog, pg_temp;
ALTER FUNCTION jobq.resume(text) SET search_path = jobq_spy, pg_catalog, pg_temp;
ALTER FUNCTION jobq.pause(text) SET search_path = jobq_spy, pg_catalog, pg_temp;
DO $$ BEGIN
    PERFORM jobq.enqueue('plain', '{}');
    PERFORM jobq.enqueue('grp', '{}', group_key => 'g' || g) FROM generate_series(1, 3) AS g;
    PERFORM jobq.configure_queue('lim', concurrency => 5);
    PERFORM jobq.enqueue_many('lim', ARRAY['{}', '{}', '{}']::jsonb[], max_attempts => 1);
END $$;
CREATE TEMP TABLE held AS SELECT * FROM jobq.claim(ARRAY['plain', 'grp', 'lim'], 10, 'w');
SELECT is((SELECT count(*)::int FROM held), 7, 'setup: 1 plain, 3 grouped and 3 limited jobs claimed');

TRUNCATE jobq_spy.calls;
SELECT ok(jobq.complete(h.id, h.lease_token), 'complete a plain job') FROM held AS h WHERE h.queue = 'plain';
SELECT is((SELECT count(*)::int FROM jobq_spy.calls), 0, 'completing a job of a plain queue notifies nothing');

TRUNCATE jobq_spy.calls;
SELECT is(jobq.complete_many(array_agg(h.id), array_agg(h.lease_token)), 3, 'complete three grouped jobs in one call')
FROM held AS h WHERE h.queue = 'grp';
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls$$, $$VALUES ('jobq'::text, 'grp'::text)$$,
                  'completing serial-group jobs wakes their queue, once per statement');

TRUNCATE jobq_spy.calls;
SELECT ok(jobq.complete(h.id, h.lease_token), 'complete a job of a concurrency-limited queue')
FROM held AS h WHERE h.queue = 'lim' ORDER BY h.id LIMIT 1;
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls$$, $$VALUES ('jobq'::text, 'lim'::text)$$,
                  'completing a job of a concurrency-limited queue wakes the queue');

TRUNCATE jobq_spy.calls;
SELECT ok(jobq.fail(h.id, 'x', h.lease_token), 'fail (dead-letter) a job of a concurrency-limited queue')
FROM held AS h WHERE h.queue = 'lim' ORDER BY h.id DESC LIMIT 1;
SELECT is((SELECT count(*)::int FROM jobq_spy.calls WHERE payload = 'lim'), 1,
          'a dead-lettered job of a concurrency-limited queue wakes the queue');

TRUNCATE jobq_spy.calls;
SELECT ok(jobq.pause('lim'), 'pause a queue');
SELECT is((SELECT count(*)::int FROM jobq_spy.calls), 0, 'pause notifies nothing');
SELECT ok(jobq.resume('lim'), 'resume it');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls$$, $$VALUES ('jobq'::text, 'lim'::text)$$,
                  'resume wakes the queue');
TRUNCATE jobq_spy.calls;
SELECT ok(NOT jobq.resume('lim'), 'resume of a queue that is not paused returns false');
SELECT is((SELECT count(*)::int FROM jobq_spy.calls), 0, 'and notifies nothing');

TRUNCATE jobq_spy.calls;
SELECT jobq.enqueue('grp', '{}', group_key => 'taken');
TRUNCATE jobq_spy.calls;
SELECT is((SELECT count(*)::int FROM jobq.take('grp')), 1, 'take a grouped job');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls$$, $$VALUES ('jobq'::text, 'grp'::text)$$,
                  'take of a serial-group job wakes its queue (delivered when the taking transaction commits)');

-- over the whole file: only channel jobq, only queue names, never a job payload
SELECT cmp_ok((SELECT count(*)::int FROM jobq_spy.log), '>=', 10, 'the spy saw every notification of this file');
SELECT is_empty($$SELECT channel, payload FROM jobq_spy.log
                  WHERE channel <> 'jobq'
                     OR payload NOT IN ('alpha', 'beta', 'gamma', 'delta', 'eps', 'zeta', 'plain', 'grp', 'lim')$$,
                'every notification was on channel jobq with a queue name as payload, never a job payload');

SELECT * FROM finish();
ROLLBACK;

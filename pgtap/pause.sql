-- pause / resume: a paused queue yields nothing to claim or take, enqueueing
-- goes on, running jobs finish; resume frees it and wakes its workers.
BEGIN;
SELECT plan(30);

-- NOTIFY is only delivered at commit: point resume() at a spy pg_notify()
-- for this rolled-back transaction (as notify.sql does).
CREATE SCHEMA jobq_spy;
CREATE TABLE jobq_spy.calls (n serial PRIMARY KEY, channel text, payload text);
CREATE FUNCTION jobq_spy.pg_notify(channel text, payload text) RETURNS void
LANGUAGE sql AS $$ INSERT INTO jobq_spy.calls (channel, payload) VALUES (channel, payload) $$;
ALTER FUNCTION jobq.resume(text) SET search_path = jobq_spy, pg_catalog, pg_temp;
ALTER FUNCTION jobq.pause(text) SET search_path = jobq_spy, pg_catalog, pg_temp;

DO $$ BEGIN
    PERFORM jobq.configure_queue('p', max_attempts => 4);
    PERFORM jobq.enqueue_many('p', ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}']::jsonb[]);
    PERFORM jobq.enqueue('other', '{}');
END $$;
CREATE TEMP TABLE held AS SELECT * FROM jobq.claim('p', 1, 'w');

-- pause -------------------------------------------------------------------------------
SELECT is(jobq.pause('p'), true, 'pause returns true for a running queue');
SELECT is(jobq.pause('p'), false, 'pausing it again returns false');
SELECT is((SELECT count(*)::int FROM jobq_spy.calls), 0, 'pause notifies nothing');
SELECT is((SELECT paused FROM jobq.stats WHERE queue = 'p'), true, 'jobq.stats shows the queue as paused');
SELECT is((SELECT paused FROM jobq.stats WHERE queue = 'other'), false, 'other queues are not paused');
SELECT is((SELECT paused FROM jobq.queues WHERE queue = 'p'), true, 'jobq.queues shows paused');
SELECT is((SELECT max_attempts FROM jobq.queues WHERE queue = 'p'), 4, 'pausing keeps the queue''s settings');

SELECT is((SELECT count(*)::int FROM jobq.claim('p', 10)), 0, 'a paused queue yields nothing to claim');
SELECT is(ARRAY(SELECT queue FROM jobq.claim(ARRAY['p', 'other'], 10)), ARRAY['other'],
          'a multi-queue claim skips the paused queue and takes from the others');
SELECT is((SELECT count(*)::int FROM jobq.take('p', 10)), 0, 'a paused queue yields nothing to take');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'p' AND status = 'ready'), 2, 'its ready jobs stay ready');

SELECT isnt(jobq.enqueue('p', '{"i": 4}'), NULL, 'enqueue into a paused queue works');
SELECT is((SELECT ready FROM jobq.stats WHERE queue = 'p'), 3::bigint, 'the new job is ready, waiting');
SELECT is((SELECT running FROM jobq.stats WHERE queue = 'p'), 1::bigint, 'the job claimed before the pause still runs');
SELECT ok(jobq.heartbeat(h.id, h.lease_token), 'its worker can heartbeat') FROM held AS h;
SELECT ok(jobq.complete(h.id, h.lease_token), 'and complete it') FROM held AS h;

SELECT is((jobq.configure_queue('p', lease => interval '1 minute')).paused, true, 'configuring a paused queue keeps it paused');
SELECT is((jobq._settings('fresh')).paused, false, 'a queue is not paused by default');
SELECT is(jobq.pause('fresh'), true, 'a queue without settings or jobs can be paused');
SELECT is((SELECT paused FROM jobq.stats WHERE queue = 'fresh'), true, 'and shows in jobq.stats as paused');
SELECT is((SELECT max_attempts FROM jobq.queues WHERE queue = 'fresh'), 25, 'with default settings');

-- resume --------------------------------------------------------------------------------------
TRUNCATE jobq_spy.calls;
SELECT is(jobq.resume('p'), true, 'resume returns true for a paused queue');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls$$, $$VALUES ('jobq'::text, 'p'::text)$$,
                  'resume wakes the queue''s workers (NOTIFY jobq, p)');
SELECT is((SELECT paused FROM jobq.stats WHERE queue = 'p'), false, 'jobq.stats shows it running again');
SELECT is((SELECT count(*)::int FROM jobq.claim('p', 10)), 3, 'a resumed queue yields its ready jobs');
TRUNCATE jobq_spy.calls;
SELECT is(jobq.resume('p'), false, 'resuming it again returns false');
SELECT is((SELECT count(*)::int FROM jobq_spy.calls), 0, 'and notifies nothing');
SELECT is(jobq.resume('never-paused'), false, 'resume of an unknown queue returns false');
SELECT is((SELECT count(*)::int FROM jobq._queue WHERE queue = 'never-paused'), 0, 'and creates nothing');
SELECT is((SELECT max_attempts FROM jobq.queues WHERE queue = 'p'), 4, 'pause and resume kept the settings');

SELECT * FROM finish();
ROLLBACK;

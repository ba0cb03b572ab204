-- Wake-up: one NOTIFY jobq, <queue> per queue per inserting statement.
-- Since 0.3.0 the inserting functions call pg_notify themselves (the
-- statement trigger is gone). Pending notifications are invisible before
-- commit, so every function that notifies is pointed at a spy pg_notify()
-- for the length of this rolled-back transaction, and the exact calls are
-- counted.
BEGIN;
SELECT plan(65);

-- no trigger any more
SELECT hasnt_trigger('jobq', '_job', '_900_notify_worker', 'jobq._job has no notify trigger (0.3.0)');
SELECT is((SELECT count(*)::int FROM pg_catalog.pg_trigger WHERE tgrelid = 'jobq._job'::regclass AND NOT tgisinternal),
          0, 'no trigger at all on jobq._job');
SELECT hasnt_function('jobq', '_notify_inserted', ARRAY[]::text[], 'the trigger function jobq._notify_inserted() is gone');

-- the spy
CREATE SCHEMA jobq_spy;
CREATE TABLE jobq_spy.calls (n serial PRIMARY KEY, channel text, payload text);
CREATE TABLE jobq_spy.log (channel text, payload text);   -- never truncated
CREATE FUNCTION jobq_spy.pg_notify(channel text, payload text) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO jobq_spy.calls (channel, payload) VALUES (channel, payload);
    INSERT INTO jobq_spy.log (channel, payload) VALUES (channel, payload);
$$;
-- Every jobq function whose body calls pg_notify, found from the catalog
-- (so a new notifier cannot escape the spy), gets the spy first on its path.
CREATE TEMP TABLE notifiers AS
    SELECT p.oid::regprocedure AS fn FROM pg_catalog.pg_proc AS p
    WHERE p.pronamespace = 'jobq'::regnamespace AND p.prosrc ~ 'pg_notify';
DO $$
DECLARE
    v_fn regprocedure;
BEGIN
    FOR v_fn IN SELECT fn FROM notifiers LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = jobq_spy, pg_catalog, pg_temp', v_fn);
    END LOOP;
END $$;
SELECT set_eq($$SELECT fn::text FROM notifiers$$,
              ARRAY['jobq._insert_job(text,jsonb,timestamp with time zone,integer,integer,text,text,interval,interval,boolean,jsonb,text)',
                    'jobq._replace_job(text,jsonb,timestamp with time zone,integer,integer,text,text,interval,interval,boolean,boolean,jsonb,text)',
                    'jobq.enqueue(text,jsonb,timestamp with time zone,integer,integer,text,text,interval,interval,bigint[],text,jsonb,text,text)',
                    'jobq.enqueue_many(text,jsonb[],timestamp with time zone,integer,integer,text[],text,interval,interval,bigint[],text,jsonb[],text[],text)',
                    'jobq._finish(bigint[],uuid[],text,text,boolean,jsonb[],bigint)',
                    'jobq._notify_cancelled(bigint[],uuid[])',
                    'jobq._settle(bigint[])',
                    'jobq._retry_or_bury(jobq._job,integer,text,text,timestamp with time zone,boolean)',
                    'jobq.release(bigint,uuid)',
                    'jobq.snooze(bigint,uuid,timestamp with time zone)',
                    'jobq.reap(integer)',
                    'jobq.retry(bigint)',
                    'jobq.retry_dead(text)',
                    'jobq.run_now(bigint)',
                    'jobq.resume(text)',
                    'jobq._settle_at_commit()'],
              'exactly these functions notify (enqueue itself for a job without key, group, timeout or parents, and through _insert_job, as enqueue_periodic; _settle wakes released jobs'' queues; fail and fail_held through _retry_or_bury; _finish and, for a job that finished before its watcher committed, _settle_at_commit send jobq_finished for watched jobs; _notify_cancelled sends jobq_cancel for cancelled running jobs, see running_jobs.sql)');

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
SELECT is((SELECT count(*)::int FROM jobq_spy.calls), 0,
          'a raw INSERT into jobq._job notifies nothing (no trigger: only the jobq functions notify)');
TRUNCATE jobq_spy.calls;
SELECT is((SELECT count(*)::int
           FROM unnest(ARRAY['gamma', 'delta']) AS q,
                LATERAL jobq.enqueue_many(q, ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 150) AS g)) AS e),
          300, 'one statement calling enqueue_many for 2 queues inserts 300 jobs');
SELECT set_eq($$SELECT channel, payload FROM jobq_spy.calls$$,
              $$VALUES ('jobq'::text, 'gamma'::text), ('jobq', 'delta')$$,
              'one notification per queue (one per enqueue_many call), payload = queue name');

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
DO $$ BEGIN PERFORM jobq.cancel(jobq.enqueue('theta', '{}')); END $$;
TRUNCATE jobq_spy.calls;
SELECT ok(jobq.retry((SELECT id FROM jobq._job_archive WHERE queue = 'theta')), 'retry an archived (cancelled) job');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls$$, $$VALUES ('jobq'::text, 'theta'::text)$$,
                  'retry of an archived job notifies its queue once');
DO $$ BEGIN
    PERFORM jobq.enqueue_many('zeta', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 5)), max_attempts => 1);
    PERFORM jobq.fail(c.id, 'x', c.lease_token) FROM jobq.claim('zeta', 5) AS c;
END $$;
TRUNCATE jobq_spy.calls;
SELECT is(jobq.retry_dead('zeta'), 5, 'setup: retry_dead brings back 5 jobs');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls$$, $$VALUES ('jobq'::text, 'zeta'::text)$$,
                  'retry_dead sends one notification for its queue');
TRUNCATE jobq_spy.calls;
SELECT is(jobq.retry_dead('zeta'), 0, 'retry_dead with no dead job moves nothing');
SELECT is((SELECT count(*)::int FROM jobq_spy.calls), 0, 'and notifies nothing');

-- run_now (0.5.0) wakes the queue of the scheduled job it makes due, as enqueue does
DO $$ BEGIN PERFORM jobq.enqueue('iota', '{}', now() + interval '1 hour'); END $$;
TRUNCATE jobq_spy.calls;
SELECT ok(jobq.run_now((SELECT max(id) FROM jobq._job WHERE queue = 'iota')), 'run_now a scheduled job');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls$$, $$VALUES ('jobq'::text, 'iota'::text)$$,
                  'run_now sends one notification for the job''s queue');
TRUNCATE jobq_spy.calls;
SELECT ok(NOT jobq.run_now((SELECT max(id) FROM jobq._job WHERE queue = 'iota')), 'run_now of a job already due is false');
SELECT is((SELECT count(*)::int FROM jobq_spy.calls), 0, 'and notifies nothing');

-- enqueue_periodic (what pg_cron runs) inserts through _insert_job: it notifies
SELECT lives_ok($$SELECT jobq._periodic_save('tick', '* * * * *', 'iota', '{"p": 1}', 0, NULL, 'pg_cron')$$,
                'setup: a periodic job definition for queue iota');
TRUNCATE jobq_spy.calls;
SELECT jobq.enqueue_periodic('tick') AS tick_id \gset
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls$$, $$VALUES ('jobq'::text, 'iota'::text)$$,
                  'enqueue_periodic notifies its queue');
TRUNCATE jobq_spy.calls;
SELECT is(jobq.enqueue_periodic('tick'), :tick_id::bigint, 'a second tick while the first run is active returns its id');
SELECT is((SELECT count(*)::int FROM jobq_spy.calls), 0, 'and, inserting nothing, notifies nothing');

-- release hands a job back and wakes its queue
CREATE TEMP TABLE rel AS SELECT * FROM jobq.claim('zeta');
TRUNCATE jobq_spy.calls;
SELECT ok(jobq.release((SELECT id FROM rel), (SELECT lease_token FROM rel)), 'release a claimed job');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls$$, $$VALUES ('jobq'::text, 'zeta'::text)$$,
                  'release notifies the job''s queue');

-- Finishing a job of a serial group or a concurrency-limited queue frees a
-- slot, so it wakes that queue (once per statement); other queues stay
-- quiet. resume() wakes the queue it un-pauses.
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

-- hold writes nothing and notifies nothing; its acknowledgements wake like the others
DO $$ BEGIN
    PERFORM jobq.enqueue('plainh', '{}');
    PERFORM jobq.enqueue('grph', '{}', group_key => 'h' || g) FROM generate_series(1, 2) AS g;
END $$;
TRUNCATE jobq_spy.calls;
CREATE TEMP TABLE hp AS SELECT * FROM jobq.hold('plainh', 5);
CREATE TEMP TABLE hg AS SELECT * FROM jobq.hold('grph', 5);
SELECT is((SELECT count(*)::int FROM hp) + (SELECT count(*)::int FROM hg), 3, 'setup: hold 1 plain and 2 grouped jobs');
SELECT is((SELECT count(*)::int FROM jobq_spy.calls), 0, 'hold notifies nothing');
SELECT is(jobq.complete_held(ARRAY(SELECT id FROM hp)), 1, 'complete_held the plain job');
SELECT is((SELECT count(*)::int FROM jobq_spy.calls), 0, 'complete_held of a plain queue''s job notifies nothing');
SELECT is(jobq.complete_held(ARRAY(SELECT id FROM hg ORDER BY id LIMIT 1)), 1, 'complete_held a grouped job');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls$$, $$VALUES ('jobq'::text, 'grph'::text)$$,
                  'complete_held of a serial-group job wakes its queue');
TRUNCATE jobq_spy.calls;
SELECT ok(jobq.fail_held((SELECT max(id) FROM hg), 'boom', now()), 'fail_held the other grouped job, retry now');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls$$, $$VALUES ('jobq'::text, 'grph'::text)$$,
                  'fail_held wakes the job''s queue (a retry may be due)');

-- on_duplicate 'replace' (jobq._replace_job): a ready or scheduled job, new or replaced, wakes its queue; a
-- waiting one does not
TRUNCATE jobq_spy.calls;
SELECT jobq.enqueue('kappa', '{"v": 1}', now() + interval '1 minute', job_key => 'k', on_duplicate => 'replace') AS kj \gset
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls$$, $$VALUES ('jobq'::text, 'kappa'::text)$$,
                  'replace that inserts wakes the queue once');
TRUNCATE jobq_spy.calls;
SELECT is(jobq.enqueue('kappa', '{"v": 2}', job_key => 'k', on_duplicate => 'replace'), :kj::bigint, 'replace the job');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls$$, $$VALUES ('jobq'::text, 'kappa'::text)$$,
                  'replace of a scheduled job (now due) wakes the queue once, without the payload');
SELECT jobq.enqueue('kappa', '{}') AS kparent \gset
TRUNCATE jobq_spy.calls;
SELECT jobq.enqueue('kappa', '{}', job_key => 'kw', depends_on => ARRAY[:kparent]::bigint[],
                    on_duplicate => 'replace') IS NOT NULL AS kw \gset
SELECT jobq.enqueue('kappa', '{"v": 3}', job_key => 'kw', on_duplicate => 'replace') IS NOT NULL AS kw2 \gset
SELECT is((SELECT count(*)::int FROM jobq_spy.calls), 0, 'a waiting job, inserted or replaced, wakes nobody');

-- over the whole file: only channel jobq, only queue names, never a job payload
SELECT cmp_ok((SELECT count(*)::int FROM jobq_spy.log), '>=', 10, 'the spy saw every notification of this file');
SELECT is_empty($$SELECT channel, payload FROM jobq_spy.log
                  WHERE channel <> 'jobq'
                     OR payload NOT IN ('alpha', 'beta', 'gamma', 'delta', 'eps', 'zeta', 'theta', 'iota', 'plain', 'grp',
                                        'lim', 'plainh', 'grph', 'kappa')$$,
                'every notification was on channel jobq with a queue name as payload, never a job payload');

SELECT * FROM finish();
ROLLBACK;

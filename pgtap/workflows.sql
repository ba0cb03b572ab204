-- Workflows (since 0.6.0): dependencies (depends_on, on_parent_failure, the
-- waiting state, release, cancel cascade and its undoing by retry), results
-- (complete's result, result(), status(), parent_results(), result_retention,
-- what prune keeps), batch callbacks (enqueue_callback), and every bad input
-- of that API. Every wake-up is counted with a spy pg_notify(), as in
-- notify.sql. Jobs are named in the temp table ids (pg_temp.id(name)).
BEGIN;
SELECT plan(213);

SET LOCAL client_min_messages = warning;   -- retry's NOTICE when it cancels a job again
CREATE TEMP TABLE ids (name text PRIMARY KEY, id bigint NOT NULL);
CREATE FUNCTION pg_temp.id(p_name text) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_id bigint;
BEGIN
    SELECT i.id INTO STRICT v_id FROM ids AS i WHERE i.name = p_name;
    RETURN v_id;
END
$$;
-- Claim the one ready job of a queue and complete it (with a result), or
-- fail it for good (its queue's jobs have max_attempts 1): returns its id.
CREATE FUNCTION pg_temp.done(p_queue text, p_result jsonb DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_job record;
BEGIN
    SELECT c.id, c.lease_token INTO v_job FROM jobq.claim(p_queue, 1, 'wf') AS c;
    IF v_job.id IS NULL THEN
        RAISE EXCEPTION 'no ready job in queue %', p_queue;
    END IF;
    IF NOT jobq.complete(v_job.id, v_job.lease_token, p_result) THEN
        RAISE EXCEPTION 'completing job % failed', v_job.id;
    END IF;
    RETURN v_job.id;
END
$$;
CREATE FUNCTION pg_temp.die(p_queue text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_job record;
BEGIN
    SELECT c.id, c.lease_token INTO v_job FROM jobq.claim(p_queue, 1, 'wf') AS c;
    IF v_job.id IS NULL THEN
        RAISE EXCEPTION 'no ready job in queue %', p_queue;
    END IF;
    PERFORM jobq.fail(v_job.id, 'boom', v_job.lease_token);
    IF NOT EXISTS (SELECT FROM jobq._job_archive AS a WHERE a.id = v_job.id AND a.status = 'dead') THEN
        RAISE EXCEPTION 'job % is not dead (enqueue it with max_attempts => 1)', v_job.id;
    END IF;
    RETURN v_job.id;
END
$$;
-- the state and cancelled_by of named jobs, as jobq.jobs shows them
CREATE FUNCTION pg_temp.states(p_names text[]) RETURNS TABLE (name text, status text, cancelled_by text)
LANGUAGE sql STABLE AS $$
    SELECT n.name, j.status, (SELECT c.name FROM ids AS c WHERE c.id = j.cancelled_by)
    FROM unnest(p_names) WITH ORDINALITY AS n(name, ord)
    JOIN ids AS i ON i.name = n.name
    LEFT JOIN jobq.jobs AS j ON j.id = i.id
    ORDER BY n.ord
$$;

-- the spy: every jobq function that calls pg_notify calls this one instead
CREATE SCHEMA jobq_spy;
CREATE TABLE jobq_spy.calls (n serial PRIMARY KEY, channel text, payload text);
CREATE FUNCTION jobq_spy.pg_notify(channel text, payload text) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO jobq_spy.calls (channel, payload) VALUES (channel, payload);
$$;
DO $$
DECLARE
    v_fn regprocedure;
BEGIN
    FOR v_fn IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc AS p
                WHERE p.pronamespace = 'jobq'::regnamespace AND p.prosrc ~ 'pg_notify' LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = jobq_spy, pg_catalog, pg_temp', v_fn);
    END LOOP;
END $$;

-- 1. waiting, then released by the last parent ---------------------------------------------
INSERT INTO ids VALUES ('a1', jobq.enqueue('wf_a1', '{"n": 1}'));
INSERT INTO ids VALUES ('a2', jobq.enqueue('wf_a2', '{"n": 2}'));
TRUNCATE jobq_spy.calls;
INSERT INTO ids VALUES ('ac', jobq.enqueue('wf_ac', '{"n": 3}', depends_on => ARRAY[pg_temp.id('a2'), pg_temp.id('a1')]));
SELECT is((SELECT count(*)::int FROM jobq_spy.calls), 0, 'enqueueing a waiting job wakes nobody (nothing to claim)');
INSERT INTO ids VALUES ('ac_later', jobq.enqueue('wf_ac', '{"n": 4}', run_at => now() + interval '1 hour',
                                                 depends_on => ARRAY[pg_temp.id('a1')]));
SELECT is(jobq.status(pg_temp.id('ac')), 'waiting', 'a job whose parents are live is waiting');
SELECT is((SELECT status FROM jobq.jobs WHERE id = pg_temp.id('ac')), 'waiting', 'jobq.jobs shows it waiting');
SELECT is((SELECT status FROM jobq.jobs WHERE id = pg_temp.id('ac_later')), 'waiting',
          'a waiting job with a later run_at is waiting, not scheduled');
SELECT ok((SELECT bool_and(parked) FROM jobq._job WHERE id IN (pg_temp.id('ac'), pg_temp.id('ac_later'))),
          'waiting jobs are parked (off the claim index)');
SELECT is((SELECT count(*)::int FROM jobq.claim('wf_ac', 10)), 0, 'a waiting job is never claimed');
SELECT is((SELECT count(*)::int FROM jobq.take('wf_ac', 10)), 0, 'nor taken');
SELECT results_eq($$SELECT waiting, ready, scheduled, running FROM jobq.stats WHERE queue = 'wf_ac'$$,
                  $$VALUES (2::bigint, 0::bigint, 0::bigint, 0::bigint)$$,
                  'jobq.stats counts them as waiting, not as ready, scheduled or running');
SELECT is((SELECT value FROM jobq.metrics() WHERE name = 'jobq_jobs' AND labels = '{"queue": "wf_ac", "state": "waiting"}'),
          2::double precision, 'metrics(): jobq_jobs{state="waiting"} counts them');
SELECT is((SELECT value FROM jobq.metrics() WHERE name = 'jobq_jobs' AND labels = '{"queue": "wf_ac", "state": "ready"}'),
          0::double precision, 'metrics(): and not as ready');
SELECT results_eq($$SELECT parent_id FROM jobq.job_dependencies WHERE child_id = pg_temp.id('ac') ORDER BY parent_id$$,
                  $$VALUES (pg_temp.id('a1')), (pg_temp.id('a2'))$$, 'jobq.job_dependencies: one edge per parent');
SELECT is(jobq.result(pg_temp.id('ac')), NULL, 'result() of a waiting job is NULL');
SELECT results_eq($$SELECT parent_id, result FROM jobq.parent_results(pg_temp.id('ac'))$$,
                  $$VALUES (pg_temp.id('a1'), NULL::jsonb), (pg_temp.id('a2'), NULL::jsonb)$$,
                  'parent_results() of a waiting job: its parents by id, no results yet');

TRUNCATE jobq_spy.calls;
SELECT is(pg_temp.done('wf_a1', '{"from": "a1"}'), pg_temp.id('a1'), 'setup: a1 completes with a result');
SELECT is(jobq.status(pg_temp.id('ac')), 'waiting', 'with one parent left, the child still waits');
SELECT is(jobq.status(pg_temp.id('ac_later')), 'scheduled',
          'a child released by its last parent whose own run_at is later is scheduled');
SELECT ok(NOT (SELECT parked FROM jobq._job WHERE id = pg_temp.id('ac_later')), 'a released job is no longer parked');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls ORDER BY n$$, $$VALUES ('jobq'::text, 'wf_ac'::text)$$,
                  'releasing a child wakes its queue: one NOTIFY jobq, wf_ac (nothing for the plain parent queue)');
TRUNCATE jobq_spy.calls;
SELECT is(pg_temp.done('wf_a2', '"two"'), pg_temp.id('a2'), 'setup: a2 completes with a string result');
SELECT is(jobq.status(pg_temp.id('ac')), 'ready', 'the last parent completing makes the child ready, in its transaction');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls ORDER BY n$$, $$VALUES ('jobq'::text, 'wf_ac'::text)$$,
                  'and wakes the child''s queue');
SELECT results_eq(
    $$SELECT parents_left, completed FROM jobq._job_wait
      WHERE job_id IN (pg_temp.id('ac'), pg_temp.id('ac_later')) ORDER BY job_id$$,
    $$VALUES (0, 2), (0, 1)$$,
    'released jobs keep their gates, counted to the end (a retry goes through them again)');
SELECT results_eq($$SELECT parent_id, result FROM jobq.parent_results(pg_temp.id('ac'))$$,
                  $$VALUES (pg_temp.id('a1'), '{"from": "a1"}'::jsonb), (pg_temp.id('a2'), '"two"'::jsonb)$$,
                  'parent_results(): each parent''s result, by parent id');
SELECT is((SELECT array_agg(c.id) FROM jobq.claim('wf_ac', 10) AS c), ARRAY[pg_temp.id('ac')],
          'the ready child is claimed (the scheduled one is not due)');
SELECT is(jobq.status(pg_temp.id('ac')), 'running', 'status() of a claimed job: running');
SELECT is(jobq.result(pg_temp.id('ac')), NULL, 'result() of a running job is NULL');

-- 2. parents finished before the child is enqueued ----------------------------------------
SELECT lives_ok($$SELECT jobq.configure_queue('wf_kept', retention => interval '1 hour')$$, 'setup: queue wf_kept keeps history');
INSERT INTO ids VALUES ('kept', jobq.enqueue('wf_kept', '{}'));
INSERT INTO ids VALUES ('gone', jobq.enqueue('wf_gone', '{}'));
SELECT is(pg_temp.done('wf_kept'), pg_temp.id('kept'), 'setup: a job completes and stays in history');
SELECT is(pg_temp.done('wf_gone'), pg_temp.id('gone'), 'setup: a job completes without history (retention 0, no result)');
SELECT throws_ok(format('SELECT jobq.status(%s)', pg_temp.id('gone')), 'JQ019', NULL,
                 'status() of a job completed without history: JQ019 (forgotten)');
TRUNCATE jobq_spy.calls;
INSERT INTO ids VALUES ('b_kept', jobq.enqueue('wf_b', '{}', depends_on => ARRAY[pg_temp.id('kept')]));
SELECT is(jobq.status(pg_temp.id('b_kept')), 'ready', 'a parent completed (in history) counts as done: the child is ready at once');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls ORDER BY n$$, $$VALUES ('jobq'::text, 'wf_b'::text)$$,
                  'a child ready at once wakes its queue');
INSERT INTO ids VALUES ('b_gone', jobq.enqueue('wf_b', '{}', depends_on => ARRAY[pg_temp.id('gone')]));
SELECT is(jobq.status(pg_temp.id('b_gone')), 'ready', 'a parent completed and forgotten counts as done');
INSERT INTO ids VALUES ('b_both', jobq.enqueue('wf_b', '{}', depends_on => ARRAY[pg_temp.id('kept'), pg_temp.id('gone'), pg_temp.id('a1')]));
SELECT is(jobq.status(pg_temp.id('b_both')), 'ready', 'parents completed in history, forgotten or with a result: ready at once');
SELECT results_eq($$SELECT parent_id, result FROM jobq.parent_results(pg_temp.id('b_both'))$$,
                  $$VALUES (pg_temp.id('a1'), '{"from": "a1"}'::jsonb), (pg_temp.id('kept'), NULL), (pg_temp.id('gone'), NULL)$$,
                  'parent_results(): NULL for a parent without a result and for a forgotten one');

-- 3. failed parents: 'cancel' and 'run' ----------------------------------------------------
INSERT INTO ids VALUES ('dead1', jobq.enqueue('wf_dead1', '{}', max_attempts => 1));
SELECT is(pg_temp.die('wf_dead1'), pg_temp.id('dead1'), 'setup: a job dies');
INSERT INTO ids VALUES ('can1', jobq.enqueue('wf_can1', '{}'));
SELECT ok(jobq.cancel(pg_temp.id('can1')), 'setup: a job is cancelled');
INSERT INTO ids VALUES ('cx_dead', jobq.enqueue('wf_x', '{}', depends_on => ARRAY[pg_temp.id('dead1')]));
SELECT results_eq($$SELECT * FROM pg_temp.states(ARRAY['cx_dead'])$$, $$VALUES ('cx_dead', 'cancelled', 'dead1')$$,
                  'a child of a dead parent (cancel, the default) is cancelled at once, cancelled_by the parent');
SELECT matches((SELECT last_error FROM jobq.jobs WHERE id = pg_temp.id('cx_dead')),
               '^cancelled: ancestor (job )?' || pg_temp.id('dead1') || '\M', 'its last_error names the ancestor');
INSERT INTO ids VALUES ('cx_can', jobq.enqueue('wf_x', '{}', depends_on => ARRAY[pg_temp.id('a1'), pg_temp.id('can1')]));
SELECT results_eq($$SELECT * FROM pg_temp.states(ARRAY['cx_can'])$$, $$VALUES ('cx_can', 'cancelled', 'can1')$$,
                  'a child of a cancelled parent is cancelled at once, cancelled_by that parent');
INSERT INTO ids VALUES ('rx_dead', jobq.enqueue('wf_x', '{}', depends_on => ARRAY[pg_temp.id('dead1'), pg_temp.id('can1')],
                                               on_parent_failure => 'run'));
SELECT is(jobq.status(pg_temp.id('rx_dead')), 'ready', '''run'': dead and cancelled parents count as finished: ready at once');
INSERT INTO ids VALUES ('live1', jobq.enqueue('wf_live1', '{}'));
INSERT INTO ids VALUES ('rx_wait', jobq.enqueue('wf_x', '{}', depends_on => ARRAY[pg_temp.id('can1'), pg_temp.id('live1')],
                                               on_parent_failure => 'run'));
SELECT is(jobq.status(pg_temp.id('rx_wait')), 'waiting', '''run'' with a cancelled and a live parent: waiting');
SELECT is(pg_temp.done('wf_live1', '{"v": 1}'), pg_temp.id('live1'), 'setup: the live parent completes');
SELECT is(jobq.status(pg_temp.id('rx_wait')), 'ready', '''run'': ready once every parent finished');
SELECT results_eq($$SELECT parent_id, result FROM jobq.parent_results(pg_temp.id('rx_wait'))$$,
                  $$VALUES (pg_temp.id('can1'), NULL::jsonb), (pg_temp.id('live1'), '{"v": 1}'::jsonb)$$,
                  'parent_results(): NULL for the cancelled parent');

-- a parent that fails later, under 'run' and under 'cancel'
INSERT INTO ids VALUES ('rp1', jobq.enqueue('wf_rp1', '{}', max_attempts => 1));
INSERT INTO ids VALUES ('rp2', jobq.enqueue('wf_rp2', '{}'));
INSERT INTO ids VALUES ('rc', jobq.enqueue('wf_rc', '{}', depends_on => ARRAY[pg_temp.id('rp1'), pg_temp.id('rp2')],
                                          on_parent_failure => 'run'));
INSERT INTO ids VALUES ('lc', jobq.enqueue('wf_rc', '{}', depends_on => ARRAY[pg_temp.id('rp2')]));
SELECT is(pg_temp.die('wf_rp1'), pg_temp.id('rp1'), 'setup: a parent of a ''run'' child dies');
SELECT is(jobq.status(pg_temp.id('rc')), 'waiting', '''run'': a dead parent counts as finished, the other is still live');
SELECT ok(jobq.cancel(pg_temp.id('rp2')), 'setup: the other parent is cancelled');
SELECT is(jobq.status(pg_temp.id('rc')), 'ready', '''run'': ready once the dead and the cancelled parent finished');
SELECT results_eq($$SELECT * FROM pg_temp.states(ARRAY['lc'])$$, $$VALUES ('lc', 'cancelled', 'rp2')$$,
                  'a parent cancelled later cancels its waiting child (cancel), cancelled_by it');
SELECT matches((SELECT last_error FROM jobq.jobs WHERE id = pg_temp.id('lc')),
               '^cancelled: ancestor (job )?' || pg_temp.id('rp2') || '\M', 'its last_error names the cancelled parent');

-- 4. a cascade through three levels, and retry undoing it ---------------------------------
INSERT INTO ids VALUES ('root', jobq.enqueue('wf_root', '{}', max_attempts => 1));
INSERT INTO ids VALUES ('x', jobq.enqueue('wf_xp', '{}', max_attempts => 1));
INSERT INTO ids VALUES ('d1', jobq.enqueue('wf_d', '{"l": 1}', depends_on => ARRAY[pg_temp.id('root')]));
INSERT INTO ids VALUES ('d2', jobq.enqueue('wf_d', '{"l": 2}', depends_on => ARRAY[pg_temp.id('d1')]));
INSERT INTO ids VALUES ('d3', jobq.enqueue('wf_d', '{"l": 3}', depends_on => ARRAY[pg_temp.id('d2')]));
INSERT INTO ids VALUES ('drun', jobq.enqueue('wf_drun', '{}', depends_on => ARRAY[pg_temp.id('d2')], on_parent_failure => 'run'));
INSERT INTO ids VALUES ('e', jobq.enqueue('wf_e', '{}', depends_on => ARRAY[pg_temp.id('root'), pg_temp.id('x')]));
INSERT INTO ids VALUES ('f', jobq.enqueue('wf_e', '{}', depends_on => ARRAY[pg_temp.id('e')]));
SELECT is((SELECT waiting FROM jobq.stats WHERE queue = 'wf_d'), 3::bigint, 'setup: three levels waiting');
SELECT is(pg_temp.die('wf_root'), pg_temp.id('root'), 'setup: the root dies');
SELECT results_eq($$SELECT * FROM pg_temp.states(ARRAY['d1', 'd2', 'd3', 'e', 'f'])$$,
                  $$VALUES ('d1', 'cancelled', 'root'), ('d2', 'cancelled', 'root'), ('d3', 'cancelled', 'root'),
                           ('e', 'cancelled', 'root'), ('f', 'cancelled', 'root')$$,
                  'the root''s death cancels every descendant, each cancelled_by the root');
SELECT ok((SELECT bool_and(last_error ~ ('^cancelled: ancestor (job )?' || pg_temp.id('root') || '\M'))
           FROM jobq.jobs WHERE id IN (pg_temp.id('d1'), pg_temp.id('d2'), pg_temp.id('d3'))),
          'every level''s last_error names the root');
SELECT is(jobq.status(pg_temp.id('drun')), 'ready', 'a ''run'' child of a cascade-cancelled job is released');
SELECT is((SELECT count(*)::int FROM jobq.jobs WHERE queue = 'wf_d' AND status = 'waiting'), 0, 'nothing waits in wf_d any more');
SELECT is(pg_temp.die('wf_xp'), pg_temp.id('x'), 'setup: e''s second parent dies too');
SELECT results_eq($$SELECT * FROM pg_temp.states(ARRAY['e'])$$, $$VALUES ('e', 'cancelled', 'root')$$,
                  'a job already cancelled stays cancelled_by the first root');
SELECT is(jobq.status(pg_temp.id('root')), 'dead', 'setup: the root is dead');
SELECT ok(jobq.retry(pg_temp.id('root')), 'retry the dead root');
SELECT results_eq($$SELECT * FROM pg_temp.states(ARRAY['root', 'd1', 'd2', 'd3', 'e', 'f'])$$,
                  $$VALUES ('root', 'ready', NULL), ('d1', 'waiting', NULL), ('d2', 'waiting', NULL), ('d3', 'waiting', NULL),
                           ('e', 'cancelled', 'x'), ('f', 'cancelled', 'x')$$,
                  'retry of the root brings its descendants back to waiting; one with another dead parent stays cancelled, re-rooted (and so does its child)');
SELECT is((SELECT count(*)::int FROM jobq._job_wait WHERE job_id IN (pg_temp.id('d1'), pg_temp.id('d2'), pg_temp.id('d3'))), 3,
          'the restored jobs have their gates');
SELECT is(jobq.status(pg_temp.id('drun')), 'waiting',
          'the released ''run'' child nobody claimed waits again: its parent is back (0.9.0; it was left ready)');
SELECT is(pg_temp.done('wf_root'), pg_temp.id('root'), 'setup: the retried root completes');
SELECT results_eq($$SELECT * FROM pg_temp.states(ARRAY['d1', 'd2', 'd3'])$$,
                  $$VALUES ('d1', 'ready', NULL), ('d2', 'waiting', NULL), ('d3', 'waiting', NULL)$$,
                  'the restored chain runs in order: its first level is ready');
SELECT ok(jobq.retry(pg_temp.id('x')), 'retry the other dead parent');
SELECT results_eq($$SELECT * FROM pg_temp.states(ARRAY['x', 'e', 'f'])$$,
                  $$VALUES ('x', 'ready', NULL), ('e', 'waiting', NULL), ('f', 'waiting', NULL)$$,
                  'its retry restores the jobs re-rooted to it');

-- retry_dead restores too
INSERT INTO ids VALUES ('rd', jobq.enqueue('wf_rd', '{}', max_attempts => 1));
INSERT INTO ids VALUES ('rd_c', jobq.enqueue('wf_rdc', '{}', depends_on => ARRAY[pg_temp.id('rd')]));
SELECT is(pg_temp.die('wf_rd'), pg_temp.id('rd'), 'setup: a parent dies');
SELECT results_eq($$SELECT * FROM pg_temp.states(ARRAY['rd_c'])$$, $$VALUES ('rd_c', 'cancelled', 'rd')$$,
                  'setup: its child is cancelled');
SELECT is(jobq.retry_dead('wf_rd'), 1, 'retry_dead brings the dead parent back');
SELECT results_eq($$SELECT * FROM pg_temp.states(ARRAY['rd', 'rd_c'])$$, $$VALUES ('rd', 'ready', NULL), ('rd_c', 'waiting', NULL)$$,
                  'retry_dead restores the descendants its jobs'' deaths cancelled');

-- 5. cancelling waiting jobs ------------------------------------------------------------------
INSERT INTO ids VALUES ('gp', jobq.enqueue('wf_gp', '{}'));
INSERT INTO ids VALUES ('g1', jobq.enqueue('wf_g', '{}', depends_on => ARRAY[pg_temp.id('gp')]));
INSERT INTO ids VALUES ('g2', jobq.enqueue('wf_g', '{}', depends_on => ARRAY[pg_temp.id('g1')]));
INSERT INTO ids VALUES ('g3', jobq.enqueue('wf_g', '{}', depends_on => ARRAY[pg_temp.id('gp')]));
INSERT INTO ids VALUES ('g_ready', jobq.enqueue('wf_g', '{}'));
SELECT ok(jobq.cancel(pg_temp.id('g1')), 'jobq.cancel of a waiting job');
SELECT results_eq($$SELECT * FROM pg_temp.states(ARRAY['g1', 'g2', 'g3'])$$,
                  $$VALUES ('g1', 'cancelled', NULL), ('g2', 'cancelled', 'g1'), ('g3', 'waiting', NULL)$$,
                  'a cancelled waiting job cancels its children (cancelled_by it), not its siblings');
SELECT ok(NOT jobq.retry(pg_temp.id('g3')), 'retry of a waiting job is false');
SELECT ok(jobq.retry(pg_temp.id('g1')), 'retry of the job cancelled while waiting');
SELECT results_eq($$SELECT * FROM pg_temp.states(ARRAY['g1', 'g2'])$$, $$VALUES ('g1', 'waiting', NULL), ('g2', 'waiting', NULL)$$,
                  'it waits for its live parent again, and its child waits for it');
INSERT INTO ids VALUES ('hp', jobq.enqueue('wf_hp', '{}'));
INSERT INTO ids VALUES ('h1', jobq.enqueue('wf_h', '{}', depends_on => ARRAY[pg_temp.id('hp')]));
SELECT ok(jobq.cancel(pg_temp.id('hp')), 'setup: cancel a parent');
SELECT ok(NOT jobq.retry(pg_temp.id('h1')), 'retry of a child whose parent is still cancelled is false');
SELECT results_eq($$SELECT * FROM pg_temp.states(ARRAY['h1'])$$, $$VALUES ('h1', 'cancelled', 'hp')$$,
                  'the child is cancelled again, cancelled_by that parent');
SELECT is(jobq.cancel_jobs('wf_g', 'waiting'), 3, 'cancel_jobs(status => ''waiting'') cancels the three waiting jobs');
SELECT results_eq($$SELECT * FROM pg_temp.states(ARRAY['g1', 'g2', 'g3', 'g_ready'])$$,
                  $$VALUES ('g1', 'cancelled', NULL), ('g2', 'cancelled', NULL), ('g3', 'cancelled', NULL), ('g_ready', 'ready', NULL)$$,
                  'and leaves the ready job alone');

-- 6. enqueue_many with depends_on, job keys, empty depends_on ----------------------------
INSERT INTO ids VALUES ('mp1', jobq.enqueue('wf_mp1', '{}'));
INSERT INTO ids VALUES ('mp2', jobq.enqueue('wf_mp2', '{}'));
CREATE TEMP TABLE many AS
    SELECT e.id FROM jobq.enqueue_many('wf_m', ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}']::jsonb[],
                                       depends_on => ARRAY[pg_temp.id('mp2'), pg_temp.id('mp1')]) AS e(id);
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id IN (SELECT id FROM many) AND status = 'waiting'), 3,
          'enqueue_many with depends_on: every job waits');
SELECT set_eq($$SELECT child_id, parent_id FROM jobq.job_dependencies WHERE child_id IN (SELECT id FROM many)$$,
              $$SELECT m.id AS child_id, p.id AS parent_id FROM many AS m, (VALUES (pg_temp.id('mp1')), (pg_temp.id('mp2'))) AS p(id)$$,
              'every job of the call depends on the same two parents');
CREATE TEMP TABLE many_keyed AS
    SELECT e.id FROM jobq.enqueue_many('wf_m', ARRAY['{"i": 4}', '{"i": 5}']::jsonb[], job_keys => ARRAY['mk', NULL],
                                       depends_on => ARRAY[pg_temp.id('mp1')]) AS e(id);
SELECT is((SELECT count(*)::int FROM jobq.job_dependencies WHERE child_id IN (SELECT id FROM many_keyed)
             AND parent_id = pg_temp.id('mp1')), 2,
          'enqueue_many with job_keys and depends_on links every job');
SELECT is(pg_temp.done('wf_mp1'), pg_temp.id('mp1'), 'setup: one parent completes');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id IN (SELECT id FROM many) AND status = 'waiting'), 3,
          'the jobs with a parent left still wait');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id IN (SELECT id FROM many_keyed) AND status = 'ready'), 2,
          'the keyed jobs of the completed parent are ready');
TRUNCATE jobq_spy.calls;
SELECT is(pg_temp.done('wf_mp2'), pg_temp.id('mp2'), 'setup: the other parent completes');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id IN (SELECT id FROM many) AND status = 'ready'), 3,
          'every job of the call is released');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls ORDER BY n$$, $$VALUES ('jobq'::text, 'wf_m'::text)$$,
                  'one wake-up for the queue of the three released jobs');

INSERT INTO ids VALUES ('k_live', jobq.enqueue('wf_k', '{}', job_key => 'held'));
INSERT INTO ids VALUES ('kp', jobq.enqueue('wf_kp', '{}'));
SELECT is(jobq.enqueue('wf_k', '{}', job_key => 'held', depends_on => ARRAY[pg_temp.id('kp')]), pg_temp.id('k_live'),
          'a job_key held by an active job returns that job''s id');
SELECT is(jobq.status(pg_temp.id('k_live')), 'ready', 'which stays ready');
SELECT is_empty($$SELECT * FROM jobq.job_dependencies WHERE child_id = pg_temp.id('k_live')$$, 'and gains no edge');
SELECT is((SELECT array_agg(e.id) FROM jobq.enqueue_many('wf_k', ARRAY['{}']::jsonb[], job_keys => ARRAY['held'],
                                                          depends_on => ARRAY[pg_temp.id('kp')]) AS e(id)),
          ARRAY[pg_temp.id('k_live')], 'enqueue_many: the same');
SELECT is_empty($$SELECT * FROM jobq.job_dependencies WHERE child_id = pg_temp.id('k_live')$$, 'still no edge');
INSERT INTO ids VALUES ('k_wait', jobq.enqueue('wf_k', '{}', job_key => 'waits', depends_on => ARRAY[pg_temp.id('kp')]));
SELECT is(jobq.enqueue('wf_k', '{}', job_key => 'waits', depends_on => ARRAY[pg_temp.id('mp1'), pg_temp.id('gp')]),
          pg_temp.id('k_wait'), 'a key held by a waiting job returns that job''s id');
SELECT results_eq($$SELECT parent_id FROM jobq.job_dependencies WHERE child_id = pg_temp.id('k_wait')$$,
                  $$VALUES (pg_temp.id('kp'))$$, 'and its parents stay what they were');

CREATE TEMP TABLE dup_keys AS
    SELECT e.id, e.ord FROM jobq.enqueue_many('wf_k', ARRAY['{}', '{}', '{}']::jsonb[], job_keys => ARRAY['twice', 'twice', NULL],
                                              depends_on => ARRAY[pg_temp.id('kp')]) WITH ORDINALITY AS e(id, ord);
SELECT is((SELECT count(DISTINCT id)::int FROM dup_keys), 2, 'enqueue_many: a key given twice in one call makes one job');
SELECT set_eq($$SELECT child_id FROM jobq.job_dependencies WHERE child_id IN (SELECT id FROM dup_keys)$$,
              $$SELECT DISTINCT id FROM dup_keys$$, 'one edge per job made, none twice');

INSERT INTO ids VALUES ('nodeps', jobq.enqueue('wf_n', '{}', depends_on => '{}'));
SELECT is(jobq.status(pg_temp.id('nodeps')), 'ready', 'depends_on ''{}'' is no dependency: ready');
SELECT ok(NOT (SELECT has_parents OR parked FROM jobq._job WHERE id = pg_temp.id('nodeps')), 'neither parented nor parked');
CREATE TEMP TABLE nodeps AS SELECT e.id FROM jobq.enqueue_many('wf_n', ARRAY['{}', '{}']::jsonb[], depends_on => '{}') AS e(id);
SELECT is((SELECT count(*)::int FROM nodeps JOIN jobq._job AS j ON j.id = nodeps.id AND j.status = 'ready'), 2,
          'enqueue_many with depends_on ''{}'': ready');
SELECT is_empty($$SELECT * FROM jobq.job_dependencies AS d JOIN jobq._job AS j ON j.id = d.child_id WHERE j.queue = 'wf_n'$$,
                'and no edges');

-- 7. bad input ----------------------------------------------------------------------------------
SELECT count(*) AS jobs_before FROM jobq._job \gset
SELECT throws_ok(format('SELECT jobq.enqueue(''wf_bad'', ''{}'', depends_on => ARRAY[%s, NULL])', pg_temp.id('gp')),
                 'JQ018', NULL, 'depends_on with a NULL element: JQ018');
SELECT throws_ok(format('SELECT jobq.enqueue(''wf_bad'', ''{}'', depends_on => ARRAY[%s, %s])', pg_temp.id('gp'), pg_temp.id('gp')),
                 'JQ018', NULL, 'depends_on naming a job twice: JQ018');
SELECT throws_ok($$SELECT jobq.enqueue('wf_bad', '{}', depends_on => ARRAY(SELECT g::bigint FROM generate_series(1, 100001) AS g))$$,
                 'JQ018', NULL, 'depends_on with over 100,000 ids: JQ018');
SELECT throws_ok($$SELECT jobq.enqueue('wf_bad', '{}', depends_on => NULL, on_parent_failure => NULL)$$,
                 'JQ017', NULL, 'on_parent_failure NULL: JQ017, even without parents');
SELECT lives_ok($$SELECT jobq.enqueue('wf_bad', '{}', depends_on => ARRAY(SELECT id FROM jobq._job WHERE queue = 'wf_gp'))$$,
                'exactly one live parent: fine (the checks above were about the input)');
SELECT throws_ok(format('SELECT jobq.enqueue(''wf_bad'', ''{}'', depends_on => ARRAY[%s, %s])',
                        pg_temp.id('gp'), (SELECT last_value + 1 FROM jobq._job_id_seq)),
                 'JQ019', NULL, 'depends_on naming an id above the id sequence: JQ019');
SELECT throws_ok($$SELECT jobq.enqueue('wf_bad', '{}', depends_on => ARRAY[0])$$, 'JQ019', NULL, 'depends_on naming id 0: JQ019');
SELECT throws_ok($$SELECT jobq.enqueue('wf_bad', '{}', depends_on => ARRAY[-5])$$, 'JQ019', NULL,
                 'depends_on naming a negative id: JQ019');
SELECT throws_ok(format('SELECT jobq.enqueue(''wf_bad'', ''{}'', depends_on => ARRAY[%s], on_parent_failure => ''ignore'')',
                        pg_temp.id('gp')),
                 'JQ017', NULL, 'on_parent_failure ''ignore'': JQ017');
SELECT throws_ok(format('SELECT jobq.enqueue(''wf_bad'', ''{}'', depends_on => ARRAY[%s], on_parent_failure => NULL)',
                        pg_temp.id('gp')),
                 'JQ017', NULL, 'on_parent_failure NULL with parents: JQ017');
SELECT throws_ok(format('SELECT jobq.enqueue_many(''wf_bad'', ARRAY[''{}'']::jsonb[], depends_on => ARRAY[%s, NULL])', pg_temp.id('gp')),
                 'JQ018', NULL, 'enqueue_many: depends_on with a NULL element: JQ018');
SELECT throws_ok(format('SELECT jobq.enqueue_many(''wf_bad'', ARRAY[''{}'', ''{}'']::jsonb[], depends_on => ARRAY[%s])',
                        (SELECT last_value + 7 FROM jobq._job_id_seq)),
                 'JQ019', NULL, 'enqueue_many: an unknown parent: JQ019');
SELECT throws_ok(format('SELECT jobq.enqueue_many(''wf_bad'', ARRAY[''{}'']::jsonb[], depends_on => ARRAY[%s], on_parent_failure => ''Cancel'')',
                        pg_temp.id('gp')),
                 'JQ017', NULL, 'enqueue_many: on_parent_failure ''Cancel'' (case matters): JQ017');
SELECT throws_ok($$SELECT jobq.enqueue_callback('wf_bad', '{}', NULL)$$, 'JQ018', NULL, 'enqueue_callback: members NULL: JQ018');
SELECT throws_ok(format('SELECT jobq.enqueue_callback(''wf_bad'', ''{}'', ARRAY[%s, NULL])', pg_temp.id('gp')),
                 'JQ018', NULL, 'enqueue_callback: a NULL member: JQ018');
SELECT throws_ok(format('SELECT jobq.enqueue_callback(''wf_bad'', ''{}'', ARRAY[%s, %s])', pg_temp.id('gp'), pg_temp.id('gp')),
                 'JQ018', NULL, 'enqueue_callback: a member named twice: JQ018');
SELECT throws_ok(format('SELECT jobq.enqueue_callback(''wf_bad'', ''{}'', ARRAY[%s])', (SELECT last_value + 1 FROM jobq._job_id_seq)),
                 'JQ019', NULL, 'enqueue_callback: an unknown member: JQ019');
SELECT is((SELECT count(*) FROM jobq._job), :jobs_before::bigint + 1, 'the refused calls enqueued nothing (one call succeeded)');

-- 8. results --------------------------------------------------------------------------------------
SELECT lives_ok($$SELECT jobq.configure_queue('wf_r', max_payload_bytes => 200, retention => interval '1 hour')$$,
                'setup: queue wf_r caps payloads and results at 200 bytes, keeps history');
CREATE TEMP TABLE rv (n integer PRIMARY KEY, v jsonb, id bigint);
INSERT INTO rv (n, v) VALUES (1, '{"a": [1, 2]}'), (2, '[1, "x", null]'), (3, '"text"'), (4, '42.5'), (5, 'null'), (6, 'true');
UPDATE rv SET id = jobq.enqueue('wf_r', jsonb_build_object('n', n));
CREATE TEMP TABLE rc AS SELECT * FROM jobq.claim('wf_r', 10, 'wf');
SELECT is((SELECT count(*)::int FROM rc), 6, 'setup: six jobs claimed');
SELECT ok(bool_and(jobq.complete(c.id, c.lease_token, rv.v)), 'complete with results of every JSON kind')
FROM rc AS c JOIN rv ON rv.id = c.id;
SELECT results_eq($$SELECT jobq.result(id) FROM rv ORDER BY n$$, $$SELECT v FROM rv ORDER BY n$$,
                  'result() returns each result: object, array, string, number, JSON null, true');
SELECT is((SELECT jsonb_typeof(jobq.result(id)) FROM rv WHERE n = 5), 'null', 'a JSON null result is JSON null, not SQL NULL');
SELECT results_eq($$SELECT j.result FROM rv JOIN jobq.jobs AS j ON j.id = rv.id ORDER BY rv.n$$, $$SELECT v FROM rv ORDER BY n$$,
                  'jobq.jobs shows the results');
SELECT is((SELECT count(*)::int FROM rv WHERE jobq.status(id) = 'completed'), 6, 'status(): completed');

DO $$ BEGIN PERFORM jobq.enqueue('wf_r', '{}') FROM generate_series(1, 3); END $$;
CREATE TEMP TABLE rm AS SELECT * FROM jobq.claim('wf_r', 3, 'wf');
SELECT throws_ok($$SELECT jobq.complete_many(ARRAY(SELECT id FROM rm ORDER BY id), ARRAY(SELECT lease_token FROM rm ORDER BY id),
                                             ARRAY['{}']::jsonb[])$$,
                 'JQ010', NULL, 'complete_many: results not as long as ids: JQ010');
SELECT throws_ok($$SELECT jobq.complete_many(ARRAY(SELECT id FROM rm ORDER BY id), ARRAY(SELECT lease_token FROM rm ORDER BY id),
                                             ARRAY[NULL, jsonb_build_object('big', repeat('x', 500)), NULL]::jsonb[])$$,
                 'JQ003', NULL, 'complete_many: one result over max_payload_bytes: JQ003');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE id IN (SELECT id FROM rm) AND status = 'running'), 3,
          'and no job of the call was completed');
SELECT is(jobq.complete_many(ARRAY(SELECT id FROM rm ORDER BY id), ARRAY(SELECT lease_token FROM rm ORDER BY id),
                             ARRAY['{"m": 1}', NULL, '"m3"']::jsonb[]), 3, 'complete_many with results and a NULL');
SELECT results_eq($$SELECT jobq.result(id), jobq.status(id) FROM rm ORDER BY id$$,
                  $$VALUES ('{"m": 1}'::jsonb, 'completed'::text), (NULL, 'completed'), ('"m3"', 'completed')$$,
                  'each job has its own result; the NULL one completed without one');
SELECT is(jobq.complete_many(ARRAY(SELECT id FROM rm ORDER BY id), ARRAY(SELECT lease_token FROM rm ORDER BY id),
                             ARRAY['{"again": 1}', NULL, NULL]::jsonb[]), 0, 'completing them again completes nothing');
SELECT is(jobq.result((SELECT min(id) FROM rm)), '{"m": 1}'::jsonb, 'and changes no result');

INSERT INTO ids VALUES ('big', jobq.enqueue('wf_r', '{}'));
CREATE TEMP TABLE rb AS SELECT * FROM jobq.claim('wf_r', 1, 'wf');
SELECT throws_ok($$SELECT jobq.complete(id, lease_token, jsonb_build_object('big', repeat('x', 500))) FROM rb$$,
                 'JQ003', NULL, 'complete with a result over max_payload_bytes: JQ003');
SELECT is(jobq.status(pg_temp.id('big')), 'running', 'the job is still running');
SELECT ok((SELECT jobq.complete(id, lease_token, '[3]') FROM rb), 'its lease still holds: complete with a result');
SELECT is(jobq.result(pg_temp.id('big')), '[3]'::jsonb, 'complete keeps the result');

DO $$ BEGIN PERFORM jobq.enqueue('wf_r', '{}') FROM generate_series(1, 2); END $$;
CREATE TEMP TABLE rh AS SELECT * FROM jobq.hold('wf_r', 2);
SELECT throws_ok($$SELECT jobq.complete_held(ARRAY(SELECT id FROM rh ORDER BY id), ARRAY['{}', '{}', '{}']::jsonb[])$$,
                 'JQ010', NULL, 'complete_held: results not as long as ids: JQ010');
SELECT is(jobq.complete_held(ARRAY(SELECT id FROM rh ORDER BY id), ARRAY['{"h": 1}', NULL]::jsonb[]), 2,
          'complete_held with results');
SELECT results_eq($$SELECT jobq.result(id) FROM rh ORDER BY id$$, $$VALUES ('{"h": 1}'::jsonb), (NULL)$$,
                  'complete_held keeps the results');

SELECT is(jobq.result(pg_temp.id('dead1')), NULL, 'result() of a dead job is NULL');
SELECT is(jobq.result(pg_temp.id('can1')), NULL, 'result() of a cancelled job is NULL');
SELECT is(jobq.result(pg_temp.id('kept')), NULL, 'result() of a job completed without one is NULL');
SELECT results_eq($$SELECT jobq.status(pg_temp.id(n)) FROM unnest(ARRAY['ac', 'ac_later', 'g_ready', 'k_wait', 'kept', 'dead1', 'can1']) AS n$$,
                  $$VALUES ('running'), ('scheduled'), ('ready'), ('waiting'), ('completed'), ('dead'), ('cancelled')$$,
                  'status(): running, scheduled, ready, waiting, completed, dead, cancelled');
SELECT throws_ok(format('SELECT jobq.result(%s)', (SELECT last_value + 1 FROM jobq._job_id_seq)), 'JQ019', NULL,
                 'result() of an id never issued: JQ019');
SELECT throws_ok(format('SELECT jobq.status(%s)', (SELECT last_value + 1 FROM jobq._job_id_seq)), 'JQ019', NULL,
                 'status() of an id never issued: JQ019');
SELECT throws_ok(format('SELECT * FROM jobq.parent_results(%s)', (SELECT last_value + 1 FROM jobq._job_id_seq)), 'JQ019', NULL,
                 'parent_results() of an id never issued: JQ019');
SELECT throws_ok(format('SELECT jobq.result(%s)', pg_temp.id('gone')), 'JQ019', NULL, 'result() of a forgotten job: JQ019');
SELECT throws_ok(format('SELECT * FROM jobq.parent_results(%s)', pg_temp.id('gone')), 'JQ019', NULL,
                 'parent_results() of a forgotten job: JQ019');
SELECT throws_ok('SELECT jobq.result(NULL)', 'JQ010', NULL, 'result(NULL): JQ010');
SELECT throws_ok('SELECT jobq.status(NULL)', 'JQ010', NULL, 'status(NULL): JQ010');
SELECT throws_ok('SELECT * FROM jobq.parent_results(NULL)', 'JQ010', NULL, 'parent_results(NULL): JQ010');
SELECT is_empty($$SELECT * FROM jobq.parent_results(pg_temp.id('g_ready'))$$, 'parent_results() of a job without parents: no rows');

-- result_retention
SELECT lives_ok($$SELECT jobq.configure_queue('wf_rr', retention => interval '1 hour', result_retention => interval '2 days')$$,
                'setup: wf_rr keeps history 1 hour, results 2 days');
SELECT lives_ok($$SELECT jobq.configure_queue('wf_rs', retention => interval '3 hours', result_retention => interval '10 minutes')$$,
                'setup: wf_rs keeps history 3 hours, results 10 minutes');
SELECT is((SELECT result_retention FROM jobq.queues WHERE queue = 'wf_rr'), interval '2 days', 'jobq.queues shows result_retention');
INSERT INTO ids VALUES ('rr_res', jobq.enqueue('wf_rr', '{}'));
SELECT is(pg_temp.done('wf_rr', '{"r": 1}'), pg_temp.id('rr_res'), 'setup: a job of wf_rr completes with a result');
INSERT INTO ids VALUES ('rr_none', jobq.enqueue('wf_rr', '{}'));
SELECT is(pg_temp.done('wf_rr'), pg_temp.id('rr_none'), 'setup: another completes without one');
INSERT INTO ids VALUES ('rs_res', jobq.enqueue('wf_rs', '{}'));
SELECT is(pg_temp.done('wf_rs', '[1]'), pg_temp.id('rs_res'), 'setup: a job of wf_rs completes with a result');
INSERT INTO ids VALUES ('rdef', jobq.enqueue('wf_rdef', '{}'));
SELECT is(pg_temp.done('wf_rdef', '1'), pg_temp.id('rdef'), 'setup: a job of an unconfigured queue completes with a result');
SELECT results_eq($$SELECT n, a.prune_after - a.finished_at FROM unnest(ARRAY['rr_res', 'rr_none', 'rs_res', 'rdef']) AS n
                    JOIN jobq._job_archive AS a ON a.id = pg_temp.id(n)$$,
                  $$VALUES ('rr_res'::text, interval '2 days'), ('rr_none', interval '1 hour'), ('rs_res', interval '3 hours'),
                           ('rdef', interval '1 day')$$,
                  'prune_after = finished_at + greatest(retention, result_retention) with a result, + retention without (default result_retention 1 day)');
SELECT throws_ok($$SELECT jobq.configure_queue('wf_rr', result_retention => interval '3651 days')$$, NULL, NULL,
                 'result_retention over 3650 days is refused');
SELECT throws_ok($$SELECT jobq.configure_queue('wf_rr', result_retention => interval '-1 second')$$, NULL, NULL,
                 'a negative result_retention is refused');

-- prune keeps a parent while a child is live; edges go with their child
INSERT INTO ids VALUES ('pp', jobq.enqueue('wf_pp', '{}'));
INSERT INTO ids VALUES ('pq', jobq.enqueue('wf_pq', '{}'));
INSERT INTO ids VALUES ('pc', jobq.enqueue('wf_pc', '{}', depends_on => ARRAY[pg_temp.id('pp'), pg_temp.id('pq')]));
SELECT is(pg_temp.done('wf_pp', '{"keep": true}'), pg_temp.id('pp'), 'setup: a parent completes with a result');
UPDATE jobq._job_archive SET prune_after = now() - interval '2 days' WHERE id = pg_temp.id('pp');
SELECT lives_ok('SELECT jobq.prune()', 'prune with the parent''s retention over');
SELECT is(jobq.result(pg_temp.id('pp')), '{"keep": true}'::jsonb, 'prune keeps a completed parent while its child waits');
SELECT is(pg_temp.done('wf_pq'), pg_temp.id('pq'), 'setup: the other parent completes');
SELECT lives_ok('SELECT jobq.prune()', 'prune again');
SELECT is(jobq.result(pg_temp.id('pp')), '{"keep": true}'::jsonb, '... and while its child is ready');
SELECT results_eq($$SELECT parent_id, result FROM jobq.parent_results(pg_temp.id('pc'))$$,
                  $$VALUES (pg_temp.id('pp'), '{"keep": true}'::jsonb), (pg_temp.id('pq'), NULL)$$,
                  'so the child reads its parent''s result');
SELECT is(pg_temp.done('wf_pc'), pg_temp.id('pc'), 'setup: the child completes (no history)');
SELECT is_empty($$SELECT * FROM jobq.job_dependencies WHERE child_id = pg_temp.id('pc')$$,
                'a child completed without history takes its edges along');
SELECT cmp_ok(jobq.prune(), '>=', 1, 'prune now removes the parent');
SELECT throws_ok(format('SELECT jobq.result(%s)', pg_temp.id('pp')), 'JQ019', NULL, 'the pruned parent is forgotten');

INSERT INTO ids VALUES ('ep', jobq.enqueue('wf_ep', '{}'));
INSERT INTO ids VALUES ('ec', jobq.enqueue('wf_ec', '{}', depends_on => ARRAY[pg_temp.id('ep')]));
INSERT INTO ids VALUES ('dc', jobq.enqueue('wf_dc', '{}', max_attempts => 1, depends_on => ARRAY[pg_temp.id('ep')]));
SELECT is(pg_temp.done('wf_ep', '{}'), pg_temp.id('ep'), 'setup: a parent completes');
SELECT is(pg_temp.done('wf_ec', '"kept"'), pg_temp.id('ec'), 'setup: its child completes with a result (kept)');
SELECT is(pg_temp.die('wf_dc'), pg_temp.id('dc'), 'setup: its other child dies');
SELECT is((SELECT count(*)::int FROM jobq.job_dependencies WHERE child_id IN (pg_temp.id('ec'), pg_temp.id('dc'))), 2,
          'the finished children keep their edges in history');
UPDATE jobq._job_archive SET prune_after = now() - interval '2 days' WHERE id = pg_temp.id('ec');
SELECT cmp_ok(jobq.prune(), '>=', 1, 'prune the child past its retention');
SELECT is_empty($$SELECT * FROM jobq.job_dependencies WHERE child_id = pg_temp.id('ec')$$, 'its edges went with it');
SELECT is(jobq.discard_dead('wf_dc'), 1, 'discard the dead child');
SELECT is_empty($$SELECT * FROM jobq.job_dependencies WHERE child_id = pg_temp.id('dc')$$, 'its edges went with it too');

-- 9. batch callbacks ----------------------------------------------------------------------------
INSERT INTO ids VALUES ('bm1', jobq.enqueue('wf_bm1', '{}'));
INSERT INTO ids VALUES ('bm2', jobq.enqueue('wf_bm2', '{}', max_attempts => 1));
INSERT INTO ids VALUES ('bm3', jobq.enqueue('wf_bm3', '{}'));
INSERT INTO ids VALUES ('bm4', jobq.enqueue('wf_bm4', '{}'));
INSERT INTO ids VALUES ('cb', jobq.enqueue_callback('wf_cb', '{"album": 7, "batch": "mine"}',
                                                    ARRAY[pg_temp.id('bm4'), pg_temp.id('bm2'), pg_temp.id('bm1'), pg_temp.id('bm3')]));
SELECT is(jobq.status(pg_temp.id('cb')), 'waiting', 'a callback waits for its members');
SELECT is(pg_temp.done('wf_bm1', '{"size": 10}'), pg_temp.id('bm1'), 'setup: a member completes');
SELECT is(pg_temp.die('wf_bm2'), pg_temp.id('bm2'), 'setup: a member dies');
SELECT ok(jobq.cancel(pg_temp.id('bm3')), 'setup: a member is cancelled');
SELECT is(jobq.status(pg_temp.id('cb')), 'waiting', 'the callback waits while a member is live, whatever the others did');
TRUNCATE jobq_spy.calls;
SELECT is(pg_temp.done('wf_bm4'), pg_temp.id('bm4'), 'setup: the last member completes');
SELECT is(jobq.status(pg_temp.id('cb')), 'ready', 'the callback is released when every member finished');
SELECT is((SELECT payload FROM jobq._job WHERE id = pg_temp.id('cb')),
          '{"album": 7, "batch": {"completed": 2, "dead": 1, "cancelled": 1, "members": 4}}'::jsonb,
          'its payload carries the counts under "batch" (jobq''s, not the caller''s)');
SELECT results_eq($$SELECT channel, payload FROM jobq_spy.calls ORDER BY n$$, $$VALUES ('jobq'::text, 'wf_cb'::text)$$,
                  'and its queue is woken');
SELECT results_eq($$SELECT parent_id, result FROM jobq.parent_results(pg_temp.id('cb'))$$,
                  $$VALUES (pg_temp.id('bm1'), '{"size": 10}'::jsonb), (pg_temp.id('bm2'), NULL), (pg_temp.id('bm3'), NULL),
                           (pg_temp.id('bm4'), NULL)$$,
                  'parent_results() of a callback: its members by id, with their results');
SELECT ok(jobq.retry(pg_temp.id('bm2')), 'retry the dead member after the release');
SELECT is(jobq.status(pg_temp.id('cb')), 'waiting',
          'the callback nobody claimed yet waits again for its retried member (0.9.0; it stayed ready)');
SELECT is(pg_temp.done('wf_bm2'), pg_temp.id('bm2'), 'and it completes');
SELECT results_eq($$SELECT id, status, payload FROM jobq._job WHERE queue = 'wf_cb'$$,
                  $$VALUES (pg_temp.id('cb'), 'ready'::text,
                            '{"album": 7, "batch": {"completed": 3, "dead": 0, "cancelled": 1, "members": 4}}'::jsonb)$$,
                  'the callback is released again, one job with the counts of now');
INSERT INTO ids VALUES ('bn1', jobq.enqueue('wf_bn1', '{}', max_attempts => 1));
INSERT INTO ids VALUES ('bn2', jobq.enqueue('wf_bn2', '{}'));
INSERT INTO ids VALUES ('cbn', jobq.enqueue_callback('wf_cb', '{}', ARRAY[pg_temp.id('bn1'), pg_temp.id('bn2')]));
SELECT is(pg_temp.die('wf_bn1'), pg_temp.id('bn1'), 'setup: a member dies before the release');
SELECT ok(jobq.retry(pg_temp.id('bn1')), 'and is retried while the callback still waits');
SELECT is(pg_temp.done('wf_bn1'), pg_temp.id('bn1'), 'setup: this time it completes');
SELECT is(jobq.status(pg_temp.id('cbn')), 'waiting', 'the callback still waits for the other member');
SELECT is(pg_temp.done('wf_bn2'), pg_temp.id('bn2'), 'setup: the other member completes');
SELECT is((SELECT payload FROM jobq._job WHERE id = pg_temp.id('cbn') AND status = 'ready'),
          '{"batch": {"completed": 2, "dead": 0, "cancelled": 0, "members": 2}}'::jsonb,
          'a member retried before the release counts by its last outcome');
INSERT INTO ids VALUES ('cb0', jobq.enqueue_callback('wf_cb', '{}', '{}'));
SELECT is((SELECT payload FROM jobq._job WHERE id = pg_temp.id('cb0') AND status = 'ready'),
          '{"batch": {"completed": 0, "dead": 0, "cancelled": 0, "members": 0}}'::jsonb,
          'a callback without members is released at once, with zero counts');
INSERT INTO ids VALUES ('cb_fin', jobq.enqueue_callback('wf_cb', '{"x": 1}', ARRAY[pg_temp.id('dead1'), pg_temp.id('a1'), pg_temp.id('can1')]));
SELECT is((SELECT payload FROM jobq._job WHERE id = pg_temp.id('cb_fin') AND status = 'ready'),
          '{"x": 1, "batch": {"completed": 1, "dead": 1, "cancelled": 1, "members": 3}}'::jsonb,
          'a callback whose members already finished is released at once, counting them');

-- 10. a concurrency limit counts running jobs, not waiting ones ---------------------------------
SELECT lives_ok($$SELECT jobq.configure_queue('wf_lim', concurrency => 1)$$, 'setup: wf_lim runs one job at a time');
INSERT INTO ids VALUES ('limp', jobq.enqueue('wf_limp', '{}'));
SELECT is((SELECT count(*)::int FROM jobq.enqueue_many('wf_lim', ARRAY['{}', '{}', '{}']::jsonb[],
                                                       depends_on => ARRAY[pg_temp.id('limp')])), 3,
          'setup: three waiting jobs in wf_lim');
INSERT INTO ids VALUES ('lim_r', jobq.enqueue('wf_lim', '{}'));
SELECT is((SELECT array_agg(c.id) FROM jobq.claim('wf_lim', 5, 'wf') AS c), ARRAY[pg_temp.id('lim_r')],
          'with concurrency 1 and three waiting jobs, the ready job is claimed: waiting jobs do not count as running');
SELECT is(pg_temp.done('wf_limp'), pg_temp.id('limp'), 'setup: their parent completes');
SELECT is((SELECT ready FROM jobq.stats WHERE queue = 'wf_lim'), 3::bigint, 'the three are ready');
SELECT is((SELECT count(*)::int FROM jobq.claim('wf_lim', 5, 'wf')), 0, 'and the limit holds them back while one runs');

SELECT * FROM finish();
ROLLBACK;

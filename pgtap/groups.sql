-- Serial groups: jobs sharing a group_key run one at a time, in enqueue (id)
-- order, while other groups and ungrouped jobs of the queue run in parallel.
-- claim returns only group heads; a head waiting for its backoff blocks its
-- group; a dead or cancelled head unblocks it; a member scheduled for later
-- that never started holds back no one until it is due (0.9.0).
BEGIN;
SELECT plan(53);

CREATE TEMP TABLE t (name text PRIMARY KEY, id bigint);
-- Jobs by name; claim/take results as arrays of names.
CREATE FUNCTION pg_temp.id(p_name text) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM t WHERE name = p_name $$;
CREATE TEMP TABLE held (name text PRIMARY KEY, id bigint, lease_token uuid);
CREATE FUNCTION pg_temp.claim(p_queues text[], p_n int) RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    v_names text[];
BEGIN
    WITH c AS (SELECT row_number() OVER () AS ord, c.* FROM jobq.claim(p_queues, p_n, 'w') AS c),
         ins AS (INSERT INTO held SELECT t.name, c.id, c.lease_token FROM c JOIN t USING (id) RETURNING name)
    SELECT coalesce(array_agg(t.name ORDER BY c.ord), '{}') INTO v_names FROM c JOIN t USING (id);
    RETURN v_names;
END
$$;
CREATE FUNCTION pg_temp.claim(p_queue text, p_n int) RETURNS text[]
LANGUAGE sql AS $$ SELECT pg_temp.claim(ARRAY[p_queue], p_n) $$;
CREATE FUNCTION pg_temp.done(p_name text) RETURNS boolean
LANGUAGE sql AS $$
    SELECT jobq.complete(h.id, h.lease_token) FROM held AS h WHERE h.name = p_name
$$;

-- enqueue ------------------------------------------------------------------------
-- Queue gq keeps history (opt-in since 0.3.0): the archive shows group_key.
SELECT jobq.configure_queue('gq', retention => interval '1 day') IS NOT NULL AS configured \gset
INSERT INTO t VALUES
    ('a1', jobq.enqueue('gq', '{"j": "a1"}', group_key => 'A')),
    ('b1', jobq.enqueue('gq', '{"j": "b1"}', group_key => 'B')),
    ('a2', jobq.enqueue('gq', '{"j": "a2"}', priority => -10, group_key => 'A')),
    ('u1', jobq.enqueue('gq', '{"j": "u1"}')),
    ('a3', jobq.enqueue('gq', '{"j": "a3"}', now() - interval '1 hour', group_key => 'A')),
    ('b2', jobq.enqueue('gq', '{"j": "b2"}', group_key => 'B')),
    ('u2', jobq.enqueue('gq', '{"j": "u2"}'));
SELECT is((SELECT group_key FROM jobq._job WHERE id = pg_temp.id('a2')), 'A', 'enqueue stores group_key');
SELECT is((SELECT group_key FROM jobq._job WHERE id = pg_temp.id('u1')), NULL, 'group_key defaults to NULL');
SELECT is((SELECT group_key FROM jobq.jobs WHERE id = pg_temp.id('b1')), 'B', 'jobq.jobs shows group_key');

-- only heads are claimed -------------------------------------------------------------
SELECT is(pg_temp.claim('gq', 10), ARRAY['a1', 'b1', 'u1', 'u2'],
          'claim returns only the group heads (lowest id per group) and every ungrouped job');
SELECT is((SELECT count(*)::int FROM jobq.claim('gq', 10)), 0, 'a second claim returns nothing');
SELECT is((SELECT array_agg(status ORDER BY id) FROM jobq._job WHERE id IN (pg_temp.id('a2'), pg_temp.id('a3'), pg_temp.id('b2'))),
          ARRAY['ready', 'ready', 'ready'],
          'the rest of each group waits: a2 despite its priority -10, a3 despite its older run_at');
SELECT is((SELECT group_key FROM held JOIN jobq._job AS j USING (id) WHERE held.name = 'a1'), 'A',
          'the claimed row carries group_key');
SELECT is((SELECT count(*)::int FROM jobq.claim(ARRAY['gq', 'gq'], 1)), 0, 'nor does a claim naming the queue twice');

-- in order, one at a time ------------------------------------------------------------------
SELECT ok(pg_temp.done('a1'), 'complete a1');
SELECT is(pg_temp.claim('gq', 10), ARRAY['a2'], 'completing a1 makes a2 the head of group A: it is claimed next');
SELECT is(pg_temp.claim('gq', 10), '{}'::text[], 'a3 waits for a2');
SELECT ok(pg_temp.done('a2'), 'complete a2');
SELECT is(pg_temp.claim('gq', 10), ARRAY['a3'], 'then a3');
SELECT ok(pg_temp.done('a3'), 'complete a3');
SELECT is((SELECT array_agg(status ORDER BY id) FROM jobq._job_archive WHERE group_key = 'A'),
          ARRAY['completed', 'completed', 'completed'], 'all of group A completed, each with its group_key archived');
SELECT is((SELECT array_agg(DISTINCT group_key) FROM jobq.jobs WHERE id IN (pg_temp.id('a1'), pg_temp.id('a3'))), ARRAY['A'],
          'the archive keeps group_key');

-- a head waiting for its backoff blocks its group ------------------------------------------------
SELECT ok(jobq.fail(h.id, 'not yet', h.lease_token), 'b1 fails and backs off') FROM held AS h WHERE h.name = 'b1';
SELECT ok((SELECT run_at FROM jobq._job WHERE id = pg_temp.id('b1')) > now(), 'setup: b1 waits for its retry');
SELECT is(pg_temp.claim('gq', 10), '{}'::text[], 'b2 is not claimed while b1 (the head) waits for its backoff');
UPDATE jobq._job SET run_at = now() WHERE id = pg_temp.id('b1');
DELETE FROM held WHERE name = 'b1';
SELECT is(pg_temp.claim('gq', 10), ARRAY['b1'], 'once its backoff is over, b1 runs again before b2');

-- a dead head unblocks its group ------------------------------------------------------------------
INSERT INTO t VALUES
    ('d1', jobq.enqueue('gq', '{}', max_attempts => 1, group_key => 'D')),
    ('d2', jobq.enqueue('gq', '{}', group_key => 'D'));
SELECT is(pg_temp.claim('gq', 10), ARRAY['d1'], 'setup: d1 heads group D');
SELECT ok(jobq.fail(h.id, 'fatal', h.lease_token), 'd1 fails for good') FROM held AS h WHERE h.name = 'd1';
SELECT is((SELECT status FROM jobq._job_archive WHERE id = pg_temp.id('d1')), 'dead', 'setup: d1 is dead');
SELECT is(pg_temp.claim('gq', 10), ARRAY['d2'], 'a dead head unblocks its group: d2 is claimed');
SELECT ok(jobq.retry(pg_temp.id('d1')), 'retry the dead d1 while d2 runs');
SELECT is((SELECT group_key FROM jobq._job WHERE id = pg_temp.id('d1')), 'D', 'the retried job is back in its group');
SELECT is(pg_temp.claim('gq', 10), '{}'::text[], 'the retried d1 does not run while d2 (same group) runs');
SELECT ok(pg_temp.done('d2'), 'complete d2');
DELETE FROM held WHERE name = 'd1';
SELECT is(pg_temp.claim('gq', 10), ARRAY['d1'], 'then the retried d1 runs');

-- a member scheduled for later that never started does not hold its group (0.9.0) --------------------
INSERT INTO t VALUES
    ('s1', jobq.enqueue('gq', '{}', now() + interval '9 years', group_key => 'S')),
    ('s2', jobq.enqueue('gq', '{}', group_key => 'S')),
    ('s3', jobq.enqueue('gq', '{}', group_key => 'S'));
SELECT is(pg_temp.claim('gq', 10), ARRAY['s2'],
          'a member scheduled for later that never started does not hold back the due ones after it: s2 runs');
SELECT is(pg_temp.claim('gq', 10), '{}'::text[], 's3 waits for s2: the order holds among the due members');
UPDATE jobq._job SET run_at = now() WHERE id = pg_temp.id('s1');
SELECT is(pg_temp.claim('gq', 10), '{}'::text[], 's1, due now, does not run beside s2: never two of a group at once');
SELECT ok(pg_temp.done('s2'), 'complete s2');
SELECT is(pg_temp.claim('gq', 10), ARRAY['s1'], 'then s1, due and the oldest, runs before s3');
SELECT ok(pg_temp.done('s1'), 'complete s1');
SELECT is(pg_temp.claim('gq', 10), ARRAY['s3'], 'then s3');

-- a cancelled head unblocks its group -----------------------------------------------------------------
INSERT INTO t VALUES
    ('c1', jobq.enqueue('gq', '{}', max_attempts => 3, group_key => 'C')),
    ('c2', jobq.enqueue('gq', '{}', group_key => 'C'));
SELECT is(pg_temp.claim('gq', 10), ARRAY['c1'], 'setup: c1 heads group C');
SELECT ok(jobq.fail(h.id, 'later', h.lease_token), 'c1 fails and waits for its retry') FROM held AS h WHERE h.name = 'c1';
SELECT is(pg_temp.claim('gq', 10), '{}'::text[], 'a head that started and waits for its retry blocks the rest of its group');
SELECT ok(jobq.cancel(pg_temp.id('c1')), 'cancel the waiting head c1');
SELECT is(pg_temp.claim('gq', 10), ARRAY['c2'], 'a cancelled head unblocks its group: c2 is claimed');

-- release and reap put the head back first ---------------------------------------------------------------
INSERT INTO t VALUES
    ('e1', jobq.enqueue('gq', '{}', group_key => 'E')),
    ('e2', jobq.enqueue('gq', '{}', group_key => 'E'));
SELECT is(pg_temp.claim('gq', 10), ARRAY['e1'], 'setup: e1 heads group E');
SELECT ok(jobq.release(h.id, h.lease_token), 'release e1') FROM held AS h WHERE h.name = 'e1';
DELETE FROM held WHERE name = 'e1';
SELECT is(pg_temp.claim('gq', 10), ARRAY['e1'], 'a released head is claimed again, not the next job of its group');
UPDATE jobq._job SET lease_expires_at = now() - interval '1 second' WHERE id = pg_temp.id('e1');
SELECT is(jobq.reap(), 1, 'e1''s lease expired and it is reaped');
DELETE FROM held WHERE name = 'e1';
SELECT is(pg_temp.claim('gq', 10), ARRAY['e1'], 'a reaped head is claimed again, not the next job of its group');

-- groups of different queues are independent; multi-queue claim ------------------------------------
INSERT INTO t VALUES
    ('x1', jobq.enqueue('gq2', '{}', group_key => 'E')),
    ('x2', jobq.enqueue('gq2', '{}', group_key => 'E'));
SELECT is(pg_temp.claim(ARRAY['gq', 'gq2'], 10), ARRAY['x1'],
          'group E of queue gq2 runs while group E of queue gq is busy; one job per group in a multi-queue claim');

-- enqueue_many with group_key -----------------------------------------------------------------------------
INSERT INTO t SELECT 'm' || ord, id
FROM jobq.enqueue_many('gm', ARRAY['{"m": 1}', '{"m": 2}', '{"m": 3}']::jsonb[], group_key => 'M') WITH ORDINALITY AS e(id, ord);
INSERT INTO t SELECT 'k' || ord, id
FROM jobq.enqueue_many('gm', ARRAY['{"k": 1}', '{"k": 2}']::jsonb[], job_keys => ARRAY['k1', 'k2'], group_key => 'K')
     WITH ORDINALITY AS e(id, ord);
SELECT is((SELECT array_agg(DISTINCT group_key) FROM jobq._job WHERE queue = 'gm'), ARRAY['K', 'M'],
          'enqueue_many puts every job in the given group');
SELECT is(pg_temp.claim('gm', 10), ARRAY['m1', 'k1'], 'enqueue_many jobs join their group in payload order (with and without job_keys)');
SELECT ok(pg_temp.done('m1') AND pg_temp.done('k1'), 'complete m1 and k1');
SELECT is(pg_temp.claim('gm', 10), ARRAY['m2', 'k2'], 'then m2 and k2');
SELECT ok(pg_temp.done('m2'), 'complete m2');
SELECT is(pg_temp.claim('gm', 10), ARRAY['m3'], 'then m3');

SELECT * FROM finish();
ROLLBACK;

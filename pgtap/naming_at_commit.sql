-- Naming a job at commit (since 0.9.0): naming a job (depends_on,
-- enqueue_callback's members, watch) locks and writes nothing of it before the naming transaction commits. The
-- call leaves a row in jobq._at_commit; a deferred constraint trigger runs
-- jobq._settle_at_commit at COMMIT, which flags the named jobs and counts the
-- waiting children's gates again. This file is one transaction that never
-- commits, so it sees the call's side, the same transaction finishing what it
-- named, and the trigger's work run early by SET CONSTRAINTS … IMMEDIATE.
-- (Across transactions: tests/test_open_producer.py and
-- tests/test_workflow_concurrency.py.)
BEGIN;
SELECT plan(42);

SET LOCAL client_min_messages = warning;
-- A row this transaction locked or updated carries its xid in xmax; an untouched one 0.
CREATE FUNCTION pg_temp.untouched(p_id bigint) RETURNS boolean LANGUAGE sql AS $$
    SELECT j.xmax::text = '0' FROM jobq._job AS j WHERE j.id = p_id
$$;
CREATE FUNCTION pg_temp.pending(p_column text) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE v bigint[];
BEGIN
    EXECUTE format('SELECT coalesce(array_agg(DISTINCT u ORDER BY u), ''{}'') FROM jobq._at_commit AS c, unnest(c.%I) AS u '
                   'WHERE c.xact = pg_current_xact_id()', p_column) INTO v;
    RETURN v;
END $$;

-- the catalog ---------------------------------------------------------------------------------------
SELECT has_table('jobq', '_at_commit', 'jobq._at_commit exists');
SELECT is((SELECT relpersistence FROM pg_catalog.pg_class WHERE oid = 'jobq._at_commit'::regclass), 'u',
          'it is unlogged: no row of it outlives its transaction');
SELECT ok((SELECT t.tgdeferrable AND t.tginitdeferred AND t.tgconstraint <> 0
           FROM pg_catalog.pg_trigger AS t
           WHERE t.tgrelid = 'jobq._at_commit'::regclass AND t.tgname = '_500_settle_at_commit'),
          'a deferrable, initially deferred constraint trigger runs at commit');
SELECT is((SELECT t.tgfoid::regprocedure::text FROM pg_catalog.pg_trigger AS t
           WHERE t.tgname = '_500_settle_at_commit'), 'jobq._settle_at_commit()', 'it runs jobq._settle_at_commit()');
SELECT is_definer('jobq', '_settle_at_commit', ARRAY[]::name[],
                  'jobq._settle_at_commit is SECURITY DEFINER (it runs as whoever commits)');
SELECT hasnt_function('jobq', '_lock_parents', ARRAY['bigint[]', 'text'], 'jobq._lock_parents is gone');
SELECT function_privs_are('jobq', '_check_parents_issued', ARRAY['bigint[]', 'text'], 'jobq_producer', ARRAY[]::text[],
                          'jobq._check_parents_issued is private');

-- depends_on: the parent is neither locked nor written -------------------------------------------
SELECT jobq.enqueue('p', '{"n": 1}') AS p1 \gset
SELECT jobq.enqueue('p', '{"n": 2}') AS p2 \gset
SELECT jobq.enqueue('c', '{}', depends_on => ARRAY[:p1, :p2]::bigint[]) AS c1 \gset
SELECT ok(pg_temp.untouched(:p1) AND pg_temp.untouched(:p2), 'enqueue with depends_on neither locks nor writes the parents');
SELECT ok(NOT (SELECT bool_or(has_children) FROM jobq._job WHERE id IN (:p1, :p2)),
          'their has_children flag waits for the commit');
SELECT is(pg_temp.pending('parents'), ARRAY[:p1, :p2]::bigint[], 'the parents wait in jobq._at_commit');
SELECT is(pg_temp.pending('children'), ARRAY[:c1]::bigint[], 'and so does the waiting child');
SELECT is(jobq.status(:c1), 'waiting', 'the child waits');
SELECT throws_ok($$SELECT jobq.enqueue('c', '{}', depends_on => ARRAY[1000000000]::bigint[])$$, 'JQ019',
                 'jobq: depends_on names job 1000000000, which does not exist',
                 'an id never issued is still JQ019');

-- a child released or cancelled at once leaves nothing for the commit ------------------------------
SELECT jobq.enqueue('p', '{"n": 3}') AS p3 \gset
SELECT ok(jobq.cancel(:p3), 'a third parent is cancelled');
SELECT jobq.enqueue('c', '{}', depends_on => ARRAY[:p3]::bigint[]) AS c_gone \gset
SELECT is(jobq.status(:c_gone), 'cancelled', 'a child of a cancelled parent is cancelled at once');
SELECT ok(NOT (:c_gone = ANY (pg_temp.pending('children'))), 'and is not left for the commit');

-- the same transaction finishing a parent it named acts on the name at once --------------------------
CREATE TEMP TABLE held AS SELECT id, lease_token FROM jobq.claim('p', 10);
SELECT is((SELECT array_agg(id ORDER BY id) FROM held), ARRAY[:p1, :p2]::bigint[], 'the named parents are claimable');
SELECT ok(jobq.complete(:p1, (SELECT lease_token FROM held WHERE id = :p1)), 'one completes');
SELECT is((SELECT parents_left FROM jobq._job_wait WHERE job_id = :c1), 1,
          'its completion counts in the child''s gate (the name is known to this transaction)');
SELECT ok(jobq.complete(:p2, (SELECT lease_token FROM held WHERE id = :p2)), 'the other completes');
SELECT is(jobq.status(:c1), 'ready', 'the child is released by that completion, before any commit');

-- the commit's work, run early: flags, recount, watch -------------------------------------------
SELECT jobq.enqueue('p', '{"n": 4}') AS p4 \gset
SELECT jobq.enqueue('c', '{}', depends_on => ARRAY[:p4]::bigint[]) AS c4 \gset
SELECT is(jobq.watch(:p4), 'ready', 'watch returns the state');
SELECT is(pg_temp.pending('watched'), ARRAY[:p4]::bigint[], 'the watch waits in jobq._at_commit');
-- The parent finishes behind the name's back, as another transaction's
-- completion that saw no flag would: gone from the live table, completed.
DELETE FROM jobq._job WHERE id = :p4;
SET CONSTRAINTS jobq._500_settle_at_commit IMMEDIATE;
SELECT jobq.enqueue('p', '{"n": 5}') AS p5 \gset
SELECT jobq.enqueue('c', '{}', depends_on => ARRAY[:p5]::bigint[]) AS c5 \gset
SELECT is(jobq.status(:c4), 'ready',
          'at the commit, a parent that finished unseen since the enqueue is counted: the child is released');
SELECT ok((SELECT has_children FROM jobq._job WHERE id = :p5) AND NOT pg_temp.untouched(:p5),
          'a live named parent is flagged has_children (and locked) at the commit');
SELECT is(jobq.status(:c5), 'waiting', 'and its child waits for it');
SELECT is((SELECT count(*)::int FROM jobq._at_commit WHERE xact = pg_current_xact_id()), 0,
          'the commit''s work takes every row of the transaction');

-- a retry that brings members back takes back their unclaimed callback -------------------------------
SET CONSTRAINTS jobq._500_settle_at_commit DEFERRED;
SELECT jobq.enqueue('rp', '{}') AS rp \gset
SELECT jobq.enqueue('rm', '{"m": 1}', depends_on => ARRAY[:rp]::bigint[]) AS m1 \gset
SELECT jobq.enqueue('rm', '{"m": 2}', depends_on => ARRAY[:rp]::bigint[]) AS m2 \gset
SELECT jobq.enqueue_callback('rcb', '{"cb": 1}', ARRAY[:m1, :m2]::bigint[]) AS cb \gset
SELECT jobq.enqueue('rrun', '{}', depends_on => ARRAY[:rp]::bigint[], on_parent_failure => 'run') AS runner \gset
SELECT ok(jobq.cancel(:rp), 'cancel the root');
SELECT is(ARRAY[jobq.status(:m1), jobq.status(:m2), jobq.status(:cb), jobq.status(:runner)],
          ARRAY['cancelled', 'cancelled', 'ready', 'ready'],
          'the cascade cancels the members and releases their callback and the root''s ''run'' child');
SELECT is((SELECT payload -> 'batch' FROM jobq._job WHERE id = :cb),
          '{"members": 2, "completed": 0, "dead": 0, "cancelled": 2}'::jsonb, 'with the counts of then');
SELECT ok(jobq.retry(:rp), 'retry the root');
SELECT is(ARRAY[jobq.status(:m1), jobq.status(:m2), jobq.status(:cb), jobq.status(:runner)],
          ARRAY['waiting', 'waiting', 'waiting', 'waiting'],
          'the members wait again, and so do the unclaimed callback and ''run'' child');
SELECT is((SELECT parents_left FROM jobq._job_wait WHERE job_id = :cb), 2, 'the callback''s gate is recounted');
SELECT is_empty(format($$SELECT id FROM jobq.claim(ARRAY['rcb', 'rrun'], 10) WHERE id IN (%s, %s)$$, :cb, :runner),
                'neither can be claimed while its parents are live');
-- Run the root and the members: the callback is released once more, with the new counts.
CREATE TEMP TABLE took AS SELECT id, lease_token FROM jobq.claim('rp', 1);
SELECT ok(jobq.complete(:rp, (SELECT lease_token FROM took)), 'the root completes');
TRUNCATE took;
INSERT INTO took SELECT id, lease_token FROM jobq.claim('rm', 2);
SELECT is(jobq.complete_many(ARRAY(SELECT id FROM took ORDER BY id), ARRAY(SELECT lease_token FROM took ORDER BY id)),
          2, 'both members complete');
SELECT is((SELECT payload FROM jobq._job WHERE id = :cb AND status = 'ready'),
          '{"cb": 1, "batch": {"members": 2, "completed": 2, "dead": 0, "cancelled": 0}}'::jsonb,
          'the callback is released again with the counts of this run');
SELECT is(jobq.status(:runner), 'ready', 'and the ''run'' child once its parent completed');

-- a callback a worker claimed stays with the run it had --------------------------------------------
SELECT jobq.enqueue('rp2', '{}', max_attempts => 1) AS rp2 \gset
SELECT jobq.enqueue_callback('rcb2', '{}', ARRAY[:rp2]::bigint[]) AS cb2 \gset
TRUNCATE took;
INSERT INTO took SELECT id, lease_token FROM jobq.claim('rp2', 1);
SELECT ok(jobq.fail(:rp2, 'fatal', (SELECT lease_token FROM took)), 'the member dies');
TRUNCATE took;
INSERT INTO took SELECT id, lease_token FROM jobq.claim('rcb2', 1);
SELECT is((SELECT array_agg(id) FROM took), ARRAY[:cb2]::bigint[], 'a worker claims the released callback');
SELECT ok(jobq.retry(:rp2), 'the member is retried');
SELECT is(jobq.status(:cb2), 'running', 'the claimed callback runs on, with the counts it was released with');

SELECT * FROM finish();
ROLLBACK;

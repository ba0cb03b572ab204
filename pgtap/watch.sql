-- jobq.watch (0.6.0): finishing a watched job sends NOTIFY jobq_finished
-- with its id; unwatched jobs notify nothing when they finish. Pending
-- notifications are invisible before commit, so jobq._finish (the only
-- sender) is pointed at a spy pg_notify() for this rolled-back transaction.
BEGIN;
SELECT plan(25);

CREATE SCHEMA jobq_spy;
CREATE TABLE jobq_spy.calls (n serial PRIMARY KEY, channel text, payload text);
CREATE FUNCTION jobq_spy.pg_notify(channel text, payload text) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO jobq_spy.calls (channel, payload) VALUES (channel, payload);
$$;
ALTER FUNCTION jobq._finish(bigint[], uuid[], text, text, boolean, jsonb[], bigint)
    SET search_path = jobq_spy, pg_catalog, pg_temp;
CREATE TEMP VIEW finished AS
    SELECT payload::bigint AS id FROM jobq_spy.calls WHERE channel = 'jobq_finished';

SELECT ok((SELECT p.prosrc ~ 'pg_notify\(''jobq_finished''' FROM pg_catalog.pg_proc AS p
           WHERE p.oid = 'jobq._finish(bigint[], uuid[], text, text, boolean, jsonb[], bigint)'::regprocedure),
          'jobq._finish is where jobq_finished is sent');
SELECT set_eq($$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
                WHERE p.pronamespace = 'jobq'::regnamespace AND p.prosrc ~ 'pg_notify\(''jobq_finished'''$$,
              ARRAY['jobq._finish(bigint[],uuid[],text,text,boolean,jsonb[],bigint)', 'jobq._settle_at_commit()'],
              'and, besides it, only the commit of a watcher whose job finished after its watch() call sends it');

-- bad input
SELECT throws_ok($$SELECT jobq.watch(NULL)$$, 'JQ010', NULL, 'watch(NULL) is JQ010');
SELECT throws_ok($$SELECT jobq.watch(1000000000)$$, 'JQ019', NULL, 'watch of an id never issued is JQ019');

-- watched: completed
SELECT jobq.enqueue('w', '{"n": 1}') AS a \gset
SELECT jobq.enqueue('w', '{"n": 2}') AS b \gset
SELECT is(jobq.watch(:a), 'ready', 'watch returns the state of the job (ready)');
SELECT ok(NOT (SELECT watched FROM jobq._job WHERE id = :a),
          'and writes nothing to the job before this transaction commits (no row lock held until then)');
SELECT is((SELECT array_agg(w ORDER BY w) FROM jobq._at_commit AS c, unnest(c.watched) AS w
           WHERE c.xact = pg_current_xact_id()), ARRAY[:a::bigint],
          'the mark waits in jobq._at_commit for the commit');
SELECT ok(NOT (SELECT watched FROM jobq._job WHERE id = :b), 'an unwatched job is not marked');
SELECT is(jobq.watch(:a), 'ready', 'watching twice is harmless');
CREATE TEMP TABLE held AS SELECT id, lease_token FROM jobq.claim('w', 2);
SELECT is(jobq.watch(:a), 'running', 'a watched running job reports running');
SELECT is((SELECT count(*)::int FROM finished), 0, 'nothing is sent before a job finishes');
SELECT ok(jobq.complete(:b, (SELECT lease_token FROM held WHERE id = :b)), 'the unwatched job completes');
SELECT is((SELECT count(*)::int FROM finished), 0, 'finishing an unwatched job sends nothing');
SELECT ok(jobq.complete(:a, (SELECT lease_token FROM held WHERE id = :a), '"done"'), 'the watched job completes');
SELECT results_eq($$SELECT id FROM finished$$, ARRAY[:a::bigint], 'finishing a watched job sends its id on jobq_finished');
SELECT throws_ok(format('SELECT jobq.watch(%s)', :b), 'JQ019', NULL,
                 'watch of a job completed without history is JQ019 (jobq no longer knows it)');
SELECT is(jobq.watch(:a), 'completed', 'watch of a finished job with a result returns completed');

-- watched: a failed attempt is not the end; dead is
TRUNCATE jobq_spy.calls;
SELECT jobq.enqueue('w', '{"n": 3}', max_attempts => 2) AS c \gset
SELECT jobq.watch(:c);
TRUNCATE held;
INSERT INTO held SELECT id, lease_token FROM jobq.claim('w', 1);
SELECT ok(jobq.fail(:c, 'first', (SELECT lease_token FROM held)), 'a first failure (retry later)');
SELECT is((SELECT count(*)::int FROM finished), 0, 'a failed attempt that will retry sends nothing');
UPDATE jobq._job SET run_at = now() WHERE id = :c;
TRUNCATE held;
INSERT INTO held SELECT id, lease_token FROM jobq.claim('w', 1);
SELECT ok(jobq.fail(:c, 'second', (SELECT lease_token FROM held)), 'the last attempt fails');
SELECT results_eq($$SELECT id FROM finished$$, ARRAY[:c::bigint], 'going dead sends the id');

-- watched: cancelled, directly and by a parent's death
TRUNCATE jobq_spy.calls;
SELECT jobq.enqueue('w', '{"n": 4}', max_attempts => 1) AS parent \gset
SELECT jobq.enqueue('w', '{"n": 5}', depends_on => ARRAY[:parent]::bigint[]) AS child \gset
SELECT is(jobq.watch(:child), 'waiting', 'a waiting job can be watched');
TRUNCATE held;
INSERT INTO held SELECT id, lease_token FROM jobq.claim('w', 1);
SELECT ok(jobq.fail(:parent, 'fatal', (SELECT lease_token FROM held)), 'its parent goes dead (unwatched)');
SELECT results_eq($$SELECT id FROM finished$$, ARRAY[:child::bigint],
                  'the watched child cancelled by the cascade sends its id, the unwatched parent nothing');

-- privileges
SELECT ok(has_function_privilege('jobq_producer', 'jobq.watch(bigint)', 'EXECUTE')
          AND has_function_privilege('jobq_worker', 'jobq.watch(bigint)', 'EXECUTE')
          AND NOT has_function_privilege('jobq_viewer', 'jobq.watch(bigint)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'jobq.watch(bigint)', 'EXECUTE'),
          'producers and workers may watch; viewers and PUBLIC may not');

SELECT * FROM finish();
ROLLBACK;

-- The history of finished jobs (since 0.7.0), partitioned by expiry day.
-- jobq._job_archive is partitioned by range of prune_after, with the default
-- partition jobq._job_archive_kept; jobq.prune() creates the day partitions
-- ahead, drops a partition whole once its day has passed (with its jobs'
-- error history, edges and gates; parents a child needs move ahead), and
-- still deletes expired rows of the default partition one by one.
-- jobq.archive_partitions shows them. The whole file is one transaction, so
-- now() is one instant throughout; a past day's partition is made with
-- jobq._archive_add (prune only makes today's and later ones).
BEGIN;
SELECT plan(62);

SET LOCAL client_min_messages = warning;
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
-- The UTC day n days from now (the bounds of day partitions).
CREATE FUNCTION pg_temp.day(p_days integer) RETURNS date
LANGUAGE sql STABLE AS $$ SELECT ((now() AT TIME ZONE 'UTC')::date + p_days) $$;
CREATE FUNCTION pg_temp.part(p_day date) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT '_job_archive_p' || to_char(p_day, 'YYYYMMDD') $$;
-- Where a job's archive row is.
CREATE FUNCTION pg_temp.home(p_id bigint) RETURNS text
LANGUAGE sql STABLE AS $$ SELECT a.tableoid::regclass::text FROM jobq._job_archive AS a WHERE a.id = p_id $$;
-- Claim the one ready job of a queue and complete it.
CREATE FUNCTION pg_temp.done(p_queue text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_job record;
BEGIN
    SELECT c.id, c.lease_token INTO STRICT v_job FROM jobq.claim(p_queue, 1, 'w') AS c;
    RETURN jobq.complete(v_job.id, v_job.lease_token);
END
$$;
-- An archive row of queue p_queue expiring at p_prune_after (NULL: kept).
CREATE FUNCTION pg_temp.archived(p_name text, p_queue text, p_status text, p_prune_after timestamptz,
                                 p_error text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint := nextval('jobq._job_id_seq');
BEGIN
    INSERT INTO jobq._job_archive (id, queue, payload, status, priority, run_at, attempts, max_attempts,
                                   last_error, created_at, finished_at, prune_after)
    VALUES (v_id, p_queue, jsonb_build_object('name', p_name), p_status, 0, now(), 1, 1, p_error, now(), now(),
            p_prune_after);
    INSERT INTO ids VALUES (p_name, v_id);
    RETURN v_id;
END
$$;

-- the table -------------------------------------------------------------------------------
SELECT is((SELECT c.relkind::text FROM pg_catalog.pg_class AS c WHERE c.oid = 'jobq._job_archive'::regclass), 'p',
          'jobq._job_archive is a partitioned table');
SELECT is((SELECT pg_catalog.pg_get_partkeydef('jobq._job_archive'::regclass)), 'RANGE (prune_after)',
          'partitioned by range of prune_after (expiry), not of finish time');
SELECT is((SELECT pg_catalog.pg_get_expr(c.relpartbound, c.oid) FROM pg_catalog.pg_class AS c
           WHERE c.oid = 'jobq._job_archive_kept'::regclass), 'DEFAULT',
          'jobq._job_archive_kept is its default partition');
SELECT hasnt_pk('jobq', '_job_archive', 'no primary key (it would have to include prune_after, which may be NULL)');
SELECT is_empty($$SELECT FROM pg_catalog.pg_index WHERE indrelid = 'jobq._job_archive'::regclass$$,
                'the parent has no index (a partitioned index would make pg_restore build day partitions'' indexes twice)');
SELECT has_index('jobq', '_job_archive_kept', '_job_archive_kept_id_idx', ARRAY['id'],
                 'the default partition has an index on id (lookups of one job)');
SELECT has_index('jobq', '_job_archive_kept', '_job_archive_kept_queue_idx', ARRAY['queue', 'id'],
                 'and on (queue, id) (a queue''s history newest first)');
SELECT has_index('jobq', '_job_archive_kept', '_job_archive_kept_prune_idx', ARRAY['prune_after'],
                 'and on prune_after (its expired rows are deleted one by one)');
SELECT results_eq($$SELECT partition, from_time, to_time, expired FROM jobq.archive_partitions$$,
                  $$VALUES ('_job_archive_kept'::text, NULL::timestamptz, NULL::timestamptz, false)$$,
                  'before any prune, the default partition is the only one');

-- prune creates the days ahead --------------------------------------------------------------
SELECT is(jobq._archive_horizon(), interval '1 day', 'the horizon is the longest retention: the default result_retention, 1 day');
SELECT is(jobq.prune(), 0, 'prune with an empty archive removes nothing');
SELECT results_eq($$SELECT partition, from_time, to_time, expired FROM jobq.archive_partitions$$,
                  $$SELECT pg_temp.part(pg_temp.day(d)), pg_temp.day(d)::timestamp AT TIME ZONE 'UTC',
                           pg_temp.day(d + 1)::timestamp AT TIME ZONE 'UTC', false
                    FROM generate_series(0, 2) AS d
                    UNION ALL SELECT '_job_archive_kept', NULL, NULL, false$$,
                  'it creates one partition per UTC day from today through the horizon plus a day');
SELECT is((SELECT count(*)::int FROM jobq.archive_partitions WHERE partition LIKE '\_job\_archive\_p%'), 3,
          'three day partitions');
SELECT set_eq(format($$SELECT replace(indexdef, %L, 'P') FROM pg_catalog.pg_indexes WHERE tablename = %L$$,
                     pg_temp.part(pg_temp.day(1)), pg_temp.part(pg_temp.day(1))),
              $$SELECT replace(indexdef, '_job_archive_kept', 'P') FROM pg_catalog.pg_indexes
                WHERE tablename = '_job_archive_kept' AND indexname <> '_job_archive_kept_prune_idx'$$,
              'a day partition has the default partition''s indexes but prune_after''s');
SELECT is(jobq.prune(), 0, 'a second prune ...');
SELECT is((SELECT count(*)::int FROM jobq.archive_partitions), 4, '... creates nothing twice');
SELECT is((SELECT count(*)::int FROM pg_catalog.pg_depend AS d
           WHERE d.deptype = 'e' AND d.classid = 'pg_class'::regclass
             AND d.objid IN (SELECT format('jobq.%I', p.partition)::regclass FROM jobq.archive_partitions AS p
                             WHERE p.partition <> '_job_archive_kept')), 0,
          'day partitions are no extension members (a later DROP may remove them, a restore does not make them twice)');

SELECT lives_ok($$SELECT jobq.configure_queue('v7_long', retention => interval '10 days')$$, 'setup: a queue keeps 10 days');
SELECT is(jobq._archive_horizon(), interval '10 days', 'the horizon follows the longest retention');
SELECT is(jobq.prune(), 0, 'prune ...');
SELECT is((SELECT max(to_time) FROM jobq.archive_partitions), pg_temp.day(12)::timestamp AT TIME ZONE 'UTC',
          '... creates the days through 10 days ahead plus one');
SELECT lives_ok($$SELECT jobq.configure_queue('v7_dead', dead_retention => interval '400 days')$$,
                'setup: a queue keeps its dead jobs 400 days');
SELECT is(jobq._archive_horizon(), interval '31 days', 'the horizon is capped at 31 days');

-- where finished jobs go ---------------------------------------------------------------------
INSERT INTO ids VALUES ('long', jobq.enqueue('v7_long', '{}'));
SELECT ok(pg_temp.done('v7_long'), 'setup: a job of the 10-day queue completes');
SELECT is(pg_temp.home(pg_temp.id('long')), 'jobq.' || pg_temp.part(pg_temp.day(10)),
          'it lands in the partition of the day it expires (10 days from now)');
SELECT is((SELECT status FROM jobq.jobs WHERE id = pg_temp.id('long')), 'completed', 'jobq.jobs shows it');
SELECT is(jobq.status(pg_temp.id('long')), 'completed', 'jobq.status finds it');
SELECT ok(pg_temp.archived('kept', 'v7_q', 'dead', NULL) > 0, 'setup: archived job kept');
SELECT is(pg_temp.home(pg_temp.id('kept')), 'jobq._job_archive_kept', 'a job kept until retried (NULL prune_after) is in the default partition');
SELECT ok(pg_temp.archived('far', 'v7_q', 'completed', now() + interval '40 days') > 0, 'setup: archived job far');
SELECT is(pg_temp.home(pg_temp.id('far')), 'jobq._job_archive_kept', 'a job expiring beyond the days created is in the default partition');
SELECT lives_ok($$SELECT jobq.configure_queue('v7_long', retention => interval '45 days')$$, 'setup: a longer retention');
SELECT is(jobq._archive_horizon(), interval '31 days', 'still capped');
SELECT is(jobq.prune(), 0, 'prune creates the days through the capped horizon');
SELECT is((SELECT max(to_time) FROM jobq.archive_partitions), pg_temp.day(33)::timestamp AT TIME ZONE 'UTC',
          '... 31 days ahead plus one');
SELECT ok(pg_temp.archived('soon', 'v7_q', 'completed', now() + interval '20 days') > 0, 'setup: archived job soon');
SELECT is(pg_temp.home(pg_temp.id('soon')), 'jobq.' || pg_temp.part(pg_temp.day(20)),
          'a day created already takes its rows at once');
SELECT lives_ok($$SELECT jobq._archive_add(pg_temp.day(40), pg_temp.day(41))$$,
                'creating the far day (as prune does once it enters the horizon) ...');
SELECT is(pg_temp.home(pg_temp.id('far')), 'jobq.' || pg_temp.part(pg_temp.day(40)),
          '... moves its rows out of the default partition');
SELECT is(jobq._archive_add(pg_temp.day(40), pg_temp.day(41)), false, 'a day is never created twice');

-- an expired day goes whole -------------------------------------------------------------------
SELECT ok(jobq._archive_add(pg_temp.day(-3), pg_temp.day(-2)), 'setup: a partition of a day three days ago');
SELECT ok(pg_temp.archived('old1', 'v7_old', 'completed', pg_temp.day(-3) + interval '1 hour') > 0, 'setup: archived job old1');
SELECT ok(pg_temp.archived('old2', 'v7_old', 'completed', pg_temp.day(-3) + interval '2 hours', 'boom') > 0, 'setup: archived job old2');
SELECT ok(pg_temp.archived('oldc', 'v7_old', 'completed', pg_temp.day(-3) + interval '3 hours') > 0, 'setup: archived job oldc');
SELECT ok(pg_temp.archived('olddead', 'v7_old', 'dead', pg_temp.day(-3) + interval '4 hours', 'boom') > 0, 'setup: archived job olddead');
INSERT INTO jobq._job_error (job_id, attempt, error, failed_at, worker)
VALUES (pg_temp.id('old2'), 1, 'boom', now(), 'w'), (pg_temp.id('olddead'), 1, 'boom', now(), 'w');
-- oldc was a child of old1 (an edge kept in its history); olddead is the
-- dead parent of a job that is still known (it waits for nothing now, but a
-- forgotten dead parent would count as completed).
INSERT INTO ids VALUES ('live', jobq.enqueue('v7_live', '{}'));
INSERT INTO jobq._job_dep (parent_id, child_id) VALUES (pg_temp.id('old1'), pg_temp.id('oldc')),
                                                      (pg_temp.id('olddead'), pg_temp.id('live'));
SELECT is((SELECT expired FROM jobq.archive_partitions WHERE partition = pg_temp.part(pg_temp.day(-3))), true,
          'the past day shows as expired');
SELECT is(jobq.prune(), 3, 'prune removes the expired day''s jobs but the dead parent of a known child');
SELECT is_empty(format('SELECT FROM jobq.archive_partitions WHERE partition = %L', pg_temp.part(pg_temp.day(-3))),
                'the partition is dropped');
SELECT is((SELECT count(*)::int FROM jobq._job_archive WHERE id IN (pg_temp.id('old1'), pg_temp.id('old2'), pg_temp.id('oldc'))), 0,
          'with its jobs');
SELECT is_empty(format('SELECT FROM jobq._job_error WHERE job_id = %s', pg_temp.id('old2')), 'and their error history');
SELECT is_empty(format('SELECT FROM jobq._job_dep WHERE child_id = %s', pg_temp.id('oldc')), 'and their edges to parents');
SELECT throws_ok(format('SELECT jobq.status(%s)', pg_temp.id('old1')), 'JQ019', NULL, 'a dropped job is forgotten');
SELECT is((SELECT prune_after FROM jobq._job_archive WHERE id = pg_temp.id('olddead')), now() + interval '1 hour',
          'the dead parent of a known child moved an hour ahead instead');
SELECT is((SELECT count(*)::int FROM jobq._job_error WHERE job_id = pg_temp.id('olddead')), 1, 'with its error history');
SELECT is(jobq.status(pg_temp.id('olddead')), 'dead', 'and is still known');

-- query plans stay index-backed -------------------------------------------------------------------
CREATE FUNCTION pg_temp.plan_of(p_query text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_line text;
    v_plan text := '';
BEGIN
    FOR v_line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || p_query LOOP
        v_plan := v_plan || v_line || E'\n';
    END LOOP;
    RETURN v_plan;
END
$$;
SET LOCAL enable_seqscan = off;   -- tiny tables: ask whether an index serves, not whether it is cheaper
SELECT doesnt_match(pg_temp.plan_of(format('SELECT * FROM jobq.jobs WHERE id = %s', pg_temp.id('long'))),
                    'Seq Scan on _job_archive', 'jobq.jobs by id probes an index of every archive partition');
SELECT matches(pg_temp.plan_of(format('SELECT * FROM jobq.jobs WHERE id = %s', pg_temp.id('long'))),
               'Index Scan using _job_archive_p\d{8}_id_idx', '... the id index of a day partition');
SELECT doesnt_match(pg_temp.plan_of($$SELECT id FROM jobq.jobs WHERE queue = 'v7_long' ORDER BY id DESC LIMIT 50$$),
                    'Seq Scan on _job_archive', 'a queue''s history page (the dashboard''s list) scans no archive partition');
SELECT doesnt_match(pg_temp.plan_of(format('SELECT jobq.status(%s)', pg_temp.id('long'))),
                    'Seq Scan', 'jobq.status plans no scan');

-- how long prune waits for a partition's lock: past deadlock_timeout, when a blocking autovacuum yields ---------
SET LOCAL deadlock_timeout = '1s';
SELECT is(jobq._autovacuum_yield_timeout(), '2000', 'prune waits deadlock_timeout plus a second for a partition');
SET LOCAL deadlock_timeout = '250ms';
SELECT is(jobq._autovacuum_yield_timeout(), '1250', '... in milliseconds, whatever the unit of deadlock_timeout');
SET LOCAL deadlock_timeout = '1min';
SELECT is(jobq._autovacuum_yield_timeout(), '10000', '... at most 10 s (a waiting lock holds up archiving)');
RESET deadlock_timeout;

SELECT * FROM finish();
ROLLBACK;

-- jobq 0.6.0 → 0.7.0: history that never bloats. One line per change:
--   * jobq._job_archive is partitioned by expiry (prune_after), one partition per UTC day
--     (jobq._job_archive_pYYYYMMDD), and a default partition jobq._job_archive_kept for jobs kept until
--     retried and those expiring on a day without a partition; no primary key (ids stay unique by
--     construction), an index on id instead
--   * jobq.prune() creates the day partitions ahead (through the longest configured retention, at most
--     31 days, plus one) and drops a day's partition whole once the day has passed, with its jobs' error
--     history, edges and gates (parents a live child needs move an hour ahead); n bounds the rows it
--     deletes from the default partition
--   * new view jobq.archive_partitions (partition, from_time, to_time, rows, bytes, expired), readable by
--     jobq_viewer
--   * jobq.reap() picks the leases to park in a materialized CTE joined by id (a cached plan of the
--     former "id IN (SELECT ... FOR UPDATE SKIP LOCKED)" could rescan the live table per row once a
--     large backlog had built up)
--   * this script converts a populated archive: rows already expired go to one partition
--     (jobq._job_archive_untilYYYYMMDD) that the next prune drops, rows expiring within the horizon to
--     their days, the others to the default partition
--
-- Applied by ALTER EXTENSION jobq UPDATE TO '0.7.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.6.0 is installed.

DO $path$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    ELSE
        PERFORM pg_catalog.set_config('jobq.caller_search_path', pg_catalog.current_setting('search_path'), false);
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false);
    END IF;
END
$path$;

DO $guard$
BEGIN
    IF jobq.version() <> '0.6.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.6.0 to 0.7.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.7.0');

---------------------------------------------------------------------------
-- tables
---------------------------------------------------------------------------

-- The 0.6.0 archive steps aside (its indexes and primary key go: their
-- names are the new table's) until its rows are copied below.
ALTER TABLE jobq._job_archive RENAME TO _job_archive_060;
ALTER TABLE jobq._job_archive_060 DROP CONSTRAINT _job_archive_pkey;
DROP INDEX jobq._job_archive_prune_idx, jobq._job_archive_dead_idx, jobq._job_archive_queue_idx,
    jobq._job_archive_key_idx, jobq._job_archive_cancelled_by_idx;

CREATE TABLE jobq._job_archive (
    id            bigint NOT NULL,
    queue         text NOT NULL,
    payload       jsonb NOT NULL,
    status        text NOT NULL,
    priority      smallint NOT NULL,
    run_at        timestamptz NOT NULL,
    attempts      integer NOT NULL,
    max_attempts  integer NOT NULL,
    job_key       text,
    worker        text,
    last_error    text,
    created_at    timestamptz NOT NULL,
    started_at    timestamptz,
    finished_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    prune_after   timestamptz,
    group_key     text,
    timeout       interval,
    result        jsonb,
    cancelled_by  bigint,
    CONSTRAINT job_archive_status_valid CHECK (status IN ('completed', 'dead', 'cancelled'))
) PARTITION BY RANGE (prune_after);
COMMENT ON TABLE jobq._job_archive IS
    'Finished jobs (completed, dead, cancelled) kept for their retention, partitioned by expiry day. Private.';
COMMENT ON COLUMN jobq._job_archive.prune_after IS
    'Not pruned before this time: jobq.prune() drops the row''s day partition once the whole day has passed; NULL keeps it until retried.';
COMMENT ON COLUMN jobq._job_archive.result IS 'What the job''s complete() reported (any JSON value); NULL when none.';
COMMENT ON COLUMN jobq._job_archive.cancelled_by IS
    'The ancestor whose death or cancellation cancelled this job (the root of the cascade); jobq.retry of it restores this job.';

-- The default partition: rows kept until retried (NULL prune_after: dead
-- and cancelled jobs of queues without dead_retention, the default), and
-- rows expiring on a day that has no partition yet (beyond the days created
-- ahead, or before maintenance first ran). jobq.prune() deletes its expired
-- rows one by one, and moves a day's rows out when it creates that day.
CREATE TABLE jobq._job_archive_kept PARTITION OF jobq._job_archive DEFAULT WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE jobq._job_archive_kept IS
    'The archive''s default partition: jobs kept until retried, and those expiring on a day without a partition. Private.';
-- Its indexes, and those of every day partition, are made by
-- jobq._archive_index (sql/src/archive.sql), after the functions. Partitions
-- have indexes of their own and the parent has none: a partitioned index of
-- an extension's table would make pg_restore create every day partition's
-- indexes twice (once by ATTACH, once from the dump).

DO $dump$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'jobq') THEN
        PERFORM pg_catalog.pg_extension_config_dump('jobq._job_archive_kept', '');
    END IF;
END
$dump$;

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '0.7.0'::text
$$;
COMMENT ON FUNCTION jobq.version() IS 'Installed jobq version (semver text).';

CREATE FUNCTION jobq._archive_index(p_partition text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Create the indexes of one partition of jobq._job_archive, named after
    -- it: by id (jobq.status, result, retry, a job's page: one probe per
    -- partition), by (queue, id) (a queue's history newest first: a merge of
    -- the partitions' scans), dead jobs by (queue, id) (retry_dead,
    -- discard_dead), keyed jobs by (queue, job_key, id), cancelled
    -- descendants by their root (a retry restores them); and for the default
    -- partition, whose expired rows prune deletes one by one, by prune_after.
    EXECUTE format('CREATE INDEX %I ON jobq.%I (id)', p_partition || '_id_idx', p_partition);
    EXECUTE format('CREATE INDEX %I ON jobq.%I (queue, id)', p_partition || '_queue_idx', p_partition);
    EXECUTE format('CREATE INDEX %I ON jobq.%I (queue, id) WHERE status = %L',
                   p_partition || '_dead_idx', p_partition, 'dead');
    EXECUTE format('CREATE INDEX %I ON jobq.%I (queue, job_key, id) WHERE job_key IS NOT NULL',
                   p_partition || '_key_idx', p_partition);
    EXECUTE format('CREATE INDEX %I ON jobq.%I (cancelled_by) WHERE cancelled_by IS NOT NULL',
                   p_partition || '_cancelled_by_idx', p_partition);
    IF p_partition = '_job_archive_kept' THEN
        EXECUTE format('CREATE INDEX %I ON jobq.%I (prune_after) WHERE prune_after IS NOT NULL',
                       p_partition || '_prune_idx', p_partition);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._archive_index(text) IS
    'Creates the indexes of one partition of the archive (id, queue history, dead, keys, cancelled_by).';

SELECT jobq._archive_index('_job_archive_kept');

CREATE FUNCTION jobq._archive_horizon() RETURNS interval
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    -- How far ahead jobq.prune() creates the archive's day partitions: the longest retention configured anywhere, at most 31 days.
    SELECT least(greatest(d.retention, d.result_retention,
                          max(q.retention), max(q.result_retention), max(q.dead_retention)),
                 interval '31 days')
    FROM jobq._queue_defaults AS d
    LEFT JOIN jobq._queue AS q ON true
    GROUP BY d.retention, d.result_retention;
$$;
COMMENT ON FUNCTION jobq._archive_horizon() IS
    'How far ahead the archive''s day partitions are created: the longest configured retention, at most 31 days.';

CREATE FUNCTION jobq._archive_add(p_from date, p_to date) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '1s'
AS $$
DECLARE
    v_from timestamptz := p_from::timestamp AT TIME ZONE 'UTC';
    v_to timestamptz := p_to::timestamp AT TIME ZONE 'UTC';
    v_name text := CASE WHEN p_from IS NULL THEN '_job_archive_until' || to_char(p_to, 'YYYYMMDD')
                        ELSE '_job_archive_p' || to_char(p_from, 'YYYYMMDD') END;
BEGIN
    -- Create the archive's partition of the UTC days [p_from, p_to) of
    -- prune_after (one day, as jobq.prune makes them; p_from NULL: all
    -- before p_to, as the upgrade to 0.7.0 makes for rows already expired),
    -- with the rows of those days moved out of the default partition (rows
    -- that arrived before the day had a partition); false when a partition
    -- covers part of it already. Built as a table and then attached: ATTACH
    -- takes only a SHARE UPDATE EXCLUSIVE lock on jobq._job_archive
    -- (finishing jobs go on archiving meanwhile), where CREATE TABLE ...
    -- PARTITION OF would take an ACCESS EXCLUSIVE one. Attaching scans the
    -- default partition (under an ACCESS EXCLUSIVE lock of it alone) to prove
    -- it holds no row of the range; the CHECK constraint spares the scan of
    -- the new table. A lock not granted within lock_timeout raises
    -- lock_not_available.
    IF EXISTS (SELECT FROM jobq.archive_partitions AS p
               WHERE coalesce(p.from_time, '-infinity') < v_to AND p.to_time > coalesce(v_from, '-infinity')) THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE jobq.%I (LIKE jobq._job_archive INCLUDING DEFAULTS INCLUDING CONSTRAINTS, '
                   'CONSTRAINT %I CHECK (prune_after IS NOT NULL AND prune_after >= %L AND prune_after < %L)) '
                   'WITH (autovacuum_vacuum_cost_delay = 0)',
                   v_name, v_name || '_range', coalesce(v_from, '-infinity'), v_to);
    EXECUTE format('WITH moved AS (DELETE FROM jobq._job_archive_kept AS k '
                   'WHERE k.prune_after >= $1 AND k.prune_after < $2 RETURNING k.*) '
                   'INSERT INTO jobq.%I SELECT m.* FROM moved AS m', v_name)
        USING coalesce(v_from, '-infinity'), v_to;
    PERFORM jobq._archive_index(v_name);
    EXECUTE format('ALTER TABLE jobq._job_archive ATTACH PARTITION jobq.%I FOR VALUES FROM (%s) TO (%L)',
                   v_name, coalesce(quote_literal(v_from), 'MINVALUE'), v_to);
    -- Created by an extension script (the upgrade to 0.7.0 places the rows
    -- it converts), the table is a member of the extension, which no later
    -- DROP TABLE could remove, and which CREATE EXTENSION would create again
    -- when a dump is restored. A day partition belongs to the data.
    IF EXISTS (SELECT FROM pg_catalog.pg_depend AS d
               WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                 AND d.objid = format('jobq.%I', v_name)::pg_catalog.regclass
                 AND d.deptype = 'e') THEN
        EXECUTE format('ALTER EXTENSION jobq DROP TABLE jobq.%I', v_name);
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq._archive_add(date, date) IS
    'Creates the archive''s partition of the UTC days [p_from, p_to) of prune_after, moving their rows out of the default partition.';

CREATE FUNCTION jobq._archive_drop(p_partition text, p_from timestamptz, p_to timestamptz) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '1s'
AS $$
DECLARE
    v_count bigint;
BEGIN
    -- Drop one expired partition of the archive (every row in it is past
    -- its prune_after) with its jobs' error history, edges and gates, after
    -- moving out the jobs jobq.prune keeps: a completed parent with a live
    -- child, a dead or cancelled one with any known child (a forgotten
    -- parent counts as completed). They move an hour ahead, to be checked
    -- again then. Returns how many jobs went, or NULL when a lock was not
    -- granted within lock_timeout (nothing changed: the next prune tries
    -- again). The partition is locked first (EXCLUSIVE: readers go on, a
    -- concurrent retry waits and then finds its job gone), then DROP TABLE
    -- takes an ACCESS EXCLUSIVE lock of jobq._job_archive for the moment
    -- until commit: archiving completions wait that long.
    BEGIN
        EXECUTE format('LOCK TABLE jobq.%I IN EXCLUSIVE MODE', p_partition);
        IF EXISTS (SELECT FROM jobq._job_dep) THEN
            UPDATE jobq._job_archive AS a SET prune_after = now() + interval '1 hour'
            WHERE a.prune_after >= coalesce(p_from, '-infinity') AND a.prune_after < p_to
              AND EXISTS (SELECT FROM jobq._job_dep AS d
                          WHERE d.parent_id = a.id
                            AND (a.status <> 'completed' OR EXISTS (SELECT FROM jobq._job AS c WHERE c.id = d.child_id)));
        END IF;
        SELECT count(*) INTO v_count FROM jobq._job_archive AS a
        WHERE a.prune_after >= coalesce(p_from, '-infinity') AND a.prune_after < p_to;
        IF EXISTS (SELECT FROM jobq._job_error) THEN
            DELETE FROM jobq._job_error AS e
            USING jobq._job_archive AS a
            WHERE a.prune_after >= coalesce(p_from, '-infinity') AND a.prune_after < p_to
              AND a.last_error IS NOT NULL AND e.job_id = a.id;
        END IF;
        IF EXISTS (SELECT FROM jobq._job_dep) THEN
            DELETE FROM jobq._job_dep AS d
            USING jobq._job_archive AS a
            WHERE a.prune_after >= coalesce(p_from, '-infinity') AND a.prune_after < p_to AND d.child_id = a.id;
            DELETE FROM jobq._job_wait AS w
            USING jobq._job_archive AS a
            WHERE a.prune_after >= coalesce(p_from, '-infinity') AND a.prune_after < p_to AND w.job_id = a.id;
        END IF;
        EXECUTE format('DROP TABLE jobq.%I', p_partition);
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        RAISE NOTICE 'jobq: archive partition % is busy; the next prune drops it', p_partition;
        RETURN NULL;
    END;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION jobq._archive_drop(text, timestamptz, timestamptz) IS
    'Drops one expired archive partition with its jobs'' side rows (moving kept parents ahead); NULL when busy.';

CREATE FUNCTION jobq._archive_maintain() RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_day date;
    v_part record;
    v_dropped bigint := 0;
    v_count bigint;
BEGIN
    -- The archive's partitions: create the day partitions from today
    -- through the horizon (jobq._archive_horizon, plus a day), then drop
    -- those whose whole day has passed. Returns how many jobs the drops
    -- took. One session at a time: the SHARE UPDATE EXCLUSIVE lock of
    -- jobq._job_archive (which only roles that may change jobq tables can
    -- take) lets reads and writes of jobs go on; a concurrent prune skips.
    BEGIN
        LOCK TABLE jobq._job_archive IN SHARE UPDATE EXCLUSIVE MODE NOWAIT;
    EXCEPTION WHEN lock_not_available THEN
        RETURN 0;
    END;
    FOR v_day IN
        SELECT d::date FROM generate_series((now() AT TIME ZONE 'UTC')::date,
                                            ((now() + jobq._archive_horizon()) AT TIME ZONE 'UTC')::date + 1,
                                            interval '1 day') AS d
    LOOP
        BEGIN
            PERFORM jobq._archive_add(v_day, v_day + 1);
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            RAISE NOTICE 'jobq: the archive''s default partition is busy; the next prune creates day %', v_day;
            EXIT;
        END;
    END LOOP;
    FOR v_part IN
        SELECT p.partition, p.from_time, p.to_time FROM jobq.archive_partitions AS p
        WHERE p.to_time <= now()
        ORDER BY p.to_time
    LOOP
        v_count := jobq._archive_drop(v_part.partition, v_part.from_time, v_part.to_time);
        v_dropped := v_dropped + coalesce(v_count, 0);
    END LOOP;
    RETURN v_dropped;
END
$$;
COMMENT ON FUNCTION jobq._archive_maintain() IS
    'Creates the archive''s day partitions ahead and drops the expired ones; returns how many jobs the drops took.';

CREATE OR REPLACE FUNCTION jobq.prune(n integer DEFAULT 100000) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_pruned integer;
BEGIN
    -- Remove the finished jobs whose retention has passed (with their error
    -- history, the edges to their parents and the gate of one cancelled
    -- while waiting), except a completed job with a live child (its result
    -- stays readable until the child finishes) and a dead or cancelled job
    -- with any child jobq still knows (it must not pass for completed: a
    -- parent jobq forgot counts as completed). The archive's day partitions
    -- go whole once their day has passed (jobq._archive_maintain, which also
    -- creates the days ahead); up to n expired rows of its default partition
    -- are deleted one by one. Then the rate-limit bookkeeping older than any
    -- rate window (1 day) and key completions older than any unique_for (366
    -- days) go, and the counters are folded. Returns how many jobs went.
    PERFORM jobq._check_batch(prune.n, 'n', 10000000);
    WITH old AS (
        SELECT a.id FROM jobq._job_archive_kept AS a
        WHERE a.prune_after < now()
          AND NOT EXISTS (SELECT FROM jobq._job_dep AS d
                          WHERE d.parent_id = a.id
                            AND (a.status <> 'completed' OR EXISTS (SELECT FROM jobq._job AS c WHERE c.id = d.child_id)))
        ORDER BY a.prune_after
        LIMIT prune.n
        FOR UPDATE OF a SKIP LOCKED
    ), gone AS (
        DELETE FROM jobq._job_archive_kept AS a USING old AS o WHERE a.id = o.id
        RETURNING a.id, a.last_error IS NOT NULL AS erred
    ), forgotten AS (
        DELETE FROM jobq._job_error AS e USING gone AS g WHERE e.job_id = g.id AND g.erred
    ), unlinked AS (
        DELETE FROM jobq._job_dep AS d USING gone AS g WHERE d.child_id = g.id
    ), ungated AS (
        DELETE FROM jobq._job_wait AS w USING gone AS g WHERE w.job_id = g.id
    )
    SELECT count(*) INTO v_pruned FROM gone;
    DELETE FROM jobq._rate_start AS r WHERE r.started_at < now() - interval '1 day';
    DELETE FROM jobq._key_done AS k WHERE k.finished_at < now() - interval '366 days';
    PERFORM jobq._fold_counters();
    PERFORM jobq._forget_taken();
    -- Last: dropping a partition holds a lock of the archive until commit.
    RETURN v_pruned + least(jobq._archive_maintain(), 2147483647 - v_pruned);
END
$$;
COMMENT ON FUNCTION jobq.prune(integer) IS
    'Drops the archive''s expired day partitions (creating the days ahead) and deletes up to n expired rows of its default partition; returns how many jobs.';

CREATE OR REPLACE FUNCTION jobq.reap(n integer DEFAULT 10000) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_retry bigint[];
    v_dead bigint[];
    v_queues text[];
BEGIN
    -- Return up to n jobs whose lease expired to the queue (ready now), or
    -- dead-letter those whose attempts are used up; each counts as a failed
    -- attempt. Concurrent reapers skip each other's rows, so they never
    -- block or deadlock. The job's previous error is kept after the
    -- lease-expiry note in last_error; the note alone joins its error
    -- history. No index covers the lease (claims stay HOT): this
    -- scans the live table, which holds only live jobs. Leases held for
    -- over 10 seconds are parked (out of the claim index). Also folds the
    -- counters and forgets the take bookkeeping of finished transactions, so
    -- they stay small where pg_cron does not run prune().
    PERFORM jobq._check_batch(reap.n, 'n', 1000000);
    SELECT coalesce(array_agg(e.id) FILTER (WHERE e.attempts < e.max_attempts), '{}'),
           coalesce(array_agg(e.id) FILTER (WHERE e.attempts >= e.max_attempts), '{}')
    INTO v_retry, v_dead
    FROM (
        SELECT j.id, j.attempts, j.max_attempts
        FROM jobq._job AS j
        WHERE j.status = 'running' AND j.lease_expires_at < now()
        ORDER BY j.lease_expires_at
        LIMIT reap.n
        FOR UPDATE SKIP LOCKED
    ) AS e;

    INSERT INTO jobq._counter (queue, bucket, failed)
    SELECT j.queue, date_trunc('minute', now()), count(*)
    FROM jobq._job AS j
    WHERE j.id = ANY (v_retry || v_dead)
    GROUP BY j.queue;
    -- Each expired lease is a failed attempt in the job's error history.
    IF cardinality(v_retry) + cardinality(v_dead) > 0 THEN
        PERFORM jobq._record_errors(array_agg(j.id), array_agg(j.attempts),
                                    array_agg(jobq._reap_note(j.lease_expires_at, j.worker, NULL)
                                              || CASE WHEN j.id = ANY (v_dead) THEN E'\nno attempts left' ELSE '' END),
                                    array_agg(j.worker))
        FROM jobq._job AS j
        WHERE j.id = ANY (v_retry || v_dead);
    END IF;

    WITH requeued AS (
        UPDATE jobq._job AS j
        SET status = 'ready',
            parked = false,
            run_at = now(),
            lease_token = NULL,
            lease_expires_at = NULL,
            heartbeat_at = NULL,
            last_error = jobq._reap_note(j.lease_expires_at, j.worker, j.last_error)
        WHERE j.id = ANY (v_retry)
        RETURNING j.queue
    )
    SELECT array_agg(DISTINCT r.queue) INTO v_queues FROM requeued AS r;
    -- Wake the workers of the queues that got jobs back.
    PERFORM pg_notify('jobq', q.queue) FROM unnest(v_queues) AS q(queue);

    UPDATE jobq._job AS j
    SET last_error = jobq._reap_note(j.lease_expires_at, j.worker, j.last_error) || E'\nno attempts left'
    WHERE j.id = ANY (v_dead);
    PERFORM jobq._finish(v_dead, NULL, 'dead', NULL);
    -- Leases held for over 10 seconds (a worker that never heart-beats)
    -- leave the claim index too, so claims do not step over them.
    -- Rows busy elsewhere are skipped, never waited for. The rows are
    -- picked once (a materialized CTE) and joined by id: as "id IN (SELECT
    -- ... FOR UPDATE)" the locking scan could become the inner side of a
    -- nested loop, run again for every live job, and a cached plan made on
    -- a small table did so once a backlog of 100,000 jobs had built up
    -- (every worker's reap then ran for minutes; found by the soak).
    WITH stale AS MATERIALIZED (
        SELECT l.id FROM jobq._job AS l
        WHERE l.status = 'running' AND NOT l.parked AND l.started_at < now() - interval '10 seconds'
        FOR UPDATE SKIP LOCKED
    )
    UPDATE jobq._job AS j SET parked = true
    FROM stale AS s
    WHERE j.id = s.id;
    PERFORM jobq._fold_counters();
    PERFORM jobq._forget_taken();
    RETURN cardinality(v_retry) + cardinality(v_dead);
END
$$;
COMMENT ON FUNCTION jobq.reap(integer) IS
    'Returns up to n jobs with an expired lease to the queue (or to dead letter when out of attempts); returns how many.';

---------------------------------------------------------------------------
-- views
---------------------------------------------------------------------------

-- Views that read the archive, pointed at the new table.
CREATE OR REPLACE VIEW jobq.stats AS
    -- Per queue: jobs ready now, scheduled for later, running, dead, the
    -- age of the oldest ready job (how far behind the workers are; NULL when
    -- none is ready), whether the queue is paused, the totals of completed
    -- jobs, failed attempts and dead-lettered jobs (from the counters:
    -- history is never scanned), and jobs waiting for their parents.
    WITH live AS (
        SELECT j.queue,
               count(*) FILTER (WHERE j.status = 'ready' AND j.run_at <= now()) AS ready,
               count(*) FILTER (WHERE j.status = 'ready' AND j.run_at > now()) AS scheduled,
               count(*) FILTER (WHERE j.status = 'running') AS running,
               count(*) FILTER (WHERE j.status = 'waiting') AS waiting,
               now() - min(j.run_at) FILTER (WHERE j.status = 'ready' AND j.run_at <= now()) AS oldest_ready_age
        FROM jobq._job AS j
        GROUP BY j.queue
    ), dead AS (
        SELECT a.queue, count(*) AS dead
        FROM jobq._job_archive AS a
        WHERE a.status = 'dead'
        GROUP BY a.queue
    ), totals AS (
        SELECT c.queue, sum(c.completed)::bigint AS completed, sum(c.failed)::bigint AS failed,
               sum(c.dead)::bigint AS dead
        FROM jobq._counter AS c
        GROUP BY c.queue
    ), names AS (
        SELECT l.queue FROM live AS l
        UNION SELECT d.queue FROM dead AS d
        UNION SELECT q.queue FROM jobq._queue AS q
        UNION SELECT t.queue FROM totals AS t
    )
    SELECT n.queue,
           coalesce(l.ready, 0) AS ready,
           coalesce(l.scheduled, 0) AS scheduled,
           coalesce(l.running, 0) AS running,
           coalesce(d.dead, 0) AS dead,
           l.oldest_ready_age,
           coalesce(q.paused, false) AS paused,
           coalesce(t.completed, 0) AS completed_total,
           coalesce(t.failed, 0) AS failed_total,
           coalesce(t.dead, 0) AS dead_total,
           coalesce(l.waiting, 0) AS waiting
    FROM names AS n
    LEFT JOIN live AS l ON l.queue = n.queue
    LEFT JOIN dead AS d ON d.queue = n.queue
    LEFT JOIN jobq._queue AS q ON q.queue = n.queue
    LEFT JOIN totals AS t ON t.queue = n.queue;
COMMENT ON VIEW jobq.stats IS
    'Per queue: ready, scheduled, running and dead job counts, the age of the oldest ready job, paused, completed/failed/dead totals, and waiting jobs.';

CREATE OR REPLACE VIEW jobq.jobs AS
    -- Every job jobq still knows, live or finished, with one status column:
    -- waiting (for parents), ready, scheduled, running, completed, dead or
    -- cancelled. heartbeat_at: the last heartbeat of a running job's lease
    -- (NULL before its first, and for jobs not running). result: what a
    -- completed job reported; cancelled_by: the ancestor whose failure
    -- cancelled it. Paged newest first by id within a queue, both halves
    -- read an index (the primary key, and (queue, id) of the archive).
    SELECT j.id, j.queue, j.payload,
           CASE WHEN j.status = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.status END AS status,
           j.priority::integer AS priority, j.run_at, j.attempts, j.max_attempts, j.job_key, j.worker,
           j.lease_expires_at, j.last_error, j.created_at, j.started_at, NULL::timestamptz AS finished_at,
           j.group_key, j.timeout, j.heartbeat_at, NULL::jsonb AS result, NULL::bigint AS cancelled_by
    FROM jobq._job AS j
    UNION ALL
    SELECT a.id, a.queue, a.payload, a.status, a.priority::integer, a.run_at, a.attempts, a.max_attempts,
           a.job_key, a.worker, NULL::timestamptz, a.last_error, a.created_at, a.started_at, a.finished_at,
           a.group_key, a.timeout, NULL::timestamptz, a.result, a.cancelled_by
    FROM jobq._job_archive AS a;
COMMENT ON VIEW jobq.jobs IS 'All live and finished jobs with a single status column (for operators).';

CREATE OR REPLACE VIEW jobq.queues AS
    -- Effective settings of every configured queue and every queue with jobs:
    -- its overrides over jobq._queue_defaults, as jobq._settings() applies
    -- them (no function call, so a reader needs no EXECUTE on a private one).
    -- No limit shows as 0 (what configure_queue takes to remove one);
    -- updated_at is NULL for a queue never configured.
    SELECT n.queue,
           coalesce(q.max_attempts, d.max_attempts) AS max_attempts,
           coalesce(q.backoff_base, d.backoff_base) AS backoff_base,
           coalesce(q.backoff_cap, d.backoff_cap) AS backoff_cap,
           coalesce(q.backoff_jitter, d.backoff_jitter) AS backoff_jitter,
           coalesce(q.lease, d.lease) AS lease,
           coalesce(q.retention, d.retention) AS retention,
           q.dead_retention,
           coalesce(q.max_payload_bytes, d.max_payload_bytes) AS max_payload_bytes,
           q.updated_at,
           coalesce(q.concurrency, 0) AS concurrency,
           coalesce(q.rate_limit, 0) AS rate_limit,
           CASE WHEN q.rate_limit IS NOT NULL THEN coalesce(q.rate_interval, d.rate_interval) END AS rate_interval,
           coalesce(q.paused, d.paused) AS paused,
           q.timeout,
           coalesce(q.result_retention, d.result_retention) AS result_retention
    FROM (SELECT c.queue FROM jobq._queue AS c
          UNION SELECT j.queue FROM jobq._job AS j
          UNION SELECT a.queue FROM jobq._job_archive AS a WHERE a.status = 'dead') AS n
    CROSS JOIN jobq._queue_defaults AS d
    LEFT JOIN jobq._queue AS q ON q.queue = n.queue;
COMMENT ON VIEW jobq.queues IS 'Effective settings (overrides over defaults) of every known queue; 0 concurrency or rate_limit: no limit.';

CREATE VIEW jobq.archive_partitions AS
    -- The partitions of the history of finished jobs: one per UTC day of
    -- expiry (prune_after, from_time inclusive to to_time exclusive; from_time
    -- NULL for one holding everything before to_time), and the default
    -- partition (jobq._job_archive_kept, both bounds NULL) for jobs kept until
    -- retried and those expiring on a day without a partition yet. rows is
    -- the planner's estimate (NULL before the partition was first vacuumed
    -- or analyzed), never a count; expired: jobq.prune drops it whole.
    SELECT c.relname::text COLLATE "default" AS partition,
           CASE WHEN b.bound LIKE 'FOR VALUES FROM (''%'
                THEN substring(b.bound FROM 'FROM \(''([^'']*)''\)')::timestamptz END AS from_time,
           CASE WHEN b.bound LIKE '% TO (''%'
                THEN substring(b.bound FROM 'TO \(''([^'']*)''\)')::timestamptz END AS to_time,
           CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint END AS rows,
           pg_catalog.pg_total_relation_size(c.oid) AS bytes,
           coalesce(substring(b.bound FROM 'TO \(''([^'']*)''\)')::timestamptz <= now(), false) AS expired
    FROM pg_catalog.pg_inherits AS i
    JOIN pg_catalog.pg_class AS c ON c.oid = i.inhrelid
    CROSS JOIN LATERAL (SELECT pg_catalog.pg_get_expr(c.relpartbound, c.oid) AS bound) AS b
    WHERE i.inhparent = 'jobq._job_archive'::pg_catalog.regclass
    ORDER BY 3 NULLS LAST;
COMMENT ON VIEW jobq.archive_partitions IS
    'The partitions of the finished jobs'' history (one per UTC day of expiry, and the default one), with size and estimated rows.';

---------------------------------------------------------------------------
-- the rows of the 0.6.0 archive
---------------------------------------------------------------------------

-- Rows already expired go to one partition of everything before today (the
-- next jobq.prune() drops it, keeping parents a live child needs), rows
-- expiring from today through the horizon to their day's partition, the
-- others (kept until retried, or expiring later) to the default partition.
-- Only days that have rows get a partition here (jobq.prune() creates the
-- rest): a converted empty archive is the one a fresh install has.
DO $convert$
DECLARE
    v_today date := (now() AT TIME ZONE 'UTC')::date;
    v_last date := ((now() + jobq._archive_horizon()) AT TIME ZONE 'UTC')::date + 1;
    v_day date;
BEGIN
    IF EXISTS (SELECT FROM jobq._job_archive_060 AS a WHERE a.prune_after < v_today::timestamp AT TIME ZONE 'UTC') THEN
        PERFORM jobq._archive_add(NULL, v_today);
    END IF;
    FOR v_day IN
        SELECT DISTINCT (a.prune_after AT TIME ZONE 'UTC')::date AS day
        FROM jobq._job_archive_060 AS a
        WHERE a.prune_after >= v_today::timestamp AT TIME ZONE 'UTC'
          AND a.prune_after < (v_last + 1)::timestamp AT TIME ZONE 'UTC'
        ORDER BY 1
    LOOP
        PERFORM jobq._archive_add(v_day, v_day + 1);
    END LOOP;
END
$convert$;
INSERT INTO jobq._job_archive
    (id, queue, payload, status, priority, run_at, attempts, max_attempts, job_key, worker, last_error,
     created_at, started_at, finished_at, prune_after, group_key, timeout, result, cancelled_by)
SELECT a.id, a.queue, a.payload, a.status, a.priority, a.run_at, a.attempts, a.max_attempts, a.job_key,
       a.worker, a.last_error, a.created_at, a.started_at, a.finished_at, a.prune_after, a.group_key,
       a.timeout, a.result, a.cancelled_by
FROM jobq._job_archive_060 AS a;
-- Out of the extension first: that also takes it off pg_dump's list of
-- tables whose data it keeps.
DO $retire$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'jobq') THEN
        ALTER EXTENSION jobq DROP TABLE jobq._job_archive_060;
    END IF;
END
$retire$;
DROP TABLE jobq._job_archive_060;

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA jobq FROM PUBLIC;

GRANT SELECT ON jobq._job_archive TO jobq_admin;
GRANT SELECT ON jobq.archive_partitions TO jobq_viewer;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

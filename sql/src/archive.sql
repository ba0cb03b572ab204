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

-- The default partition's indexes (made here: jobq._archive_index is the one
-- place that lists them).
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

CREATE FUNCTION jobq._autovacuum_yield_timeout() RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    -- A lock_timeout (in ms) that outlasts deadlock_timeout by a second. A
    -- lock request that has waited deadlock_timeout cancels an autovacuum
    -- that holds the lock (unless it prevents wraparound), so a prune waiting
    -- this long gets the partition autovacuum was working on instead of
    -- leaving it for the next run. At most 10 s: a waiting lock of the
    -- default partition holds up the jobs archived into it.
    SELECT least((extract(epoch FROM current_setting('deadlock_timeout')::interval) * 1000)::bigint + 1000,
                 10000)::text;
$$;
COMMENT ON FUNCTION jobq._autovacuum_yield_timeout() IS
    'A lock_timeout that outlasts deadlock_timeout by 1 s (at most 10 s), so that a blocking autovacuum is cancelled before the wait gives up.';

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
    -- the new table. A lock not granted within lock_timeout (past
    -- deadlock_timeout: an autovacuum of the default partition yields)
    -- raises lock_not_available.
    PERFORM pg_catalog.set_config('lock_timeout', jobq._autovacuum_yield_timeout(), true);
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
    -- until commit: archiving completions wait that long. lock_timeout
    -- outlasts deadlock_timeout: an autovacuum of the partition yields.
    PERFORM pg_catalog.set_config('lock_timeout', jobq._autovacuum_yield_timeout(), true);
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
    -- The archive ONLY, not its partitions: (auto)vacuum holds that same
    -- lock of each partition it works on, and must not make prune skip.
    BEGIN
        LOCK TABLE ONLY jobq._job_archive IN SHARE UPDATE EXCLUSIVE MODE NOWAIT;
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

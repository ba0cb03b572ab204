---------------------------------------------------------------------------
-- 5. the live jobs at a glance: queue names, running jobs, counts
---------------------------------------------------------------------------
-- What jobq.reap, jobq.workers, jobq.stats and jobq.queues need to know
-- about the live table without reading every row of a backlog: each reads
-- an index, at most a bounded part of one, and the jobs it reads. Their
-- functions pin the plans (no sort, no bitmap, no sequential scan of the
-- live table), whatever the table's statistics say.

CREATE VIEW jobq._live_queues AS
    -- The queue names of the live jobs: a skip scan (one index probe per
    -- name) of the claim index and of the parked index, which between them
    -- hold every live job. Private: read jobq.queues or jobq.stats.
    WITH RECURSIVE unparked AS (
        (SELECT j.queue FROM jobq._job AS j WHERE NOT j.parked ORDER BY j.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT j.queue FROM jobq._job AS j WHERE NOT j.parked AND j.queue > u.queue ORDER BY j.queue LIMIT 1)
        FROM unparked AS u
        WHERE u.queue IS NOT NULL
    ), parked AS (
        (SELECT j.queue FROM jobq._job AS j WHERE j.parked ORDER BY j.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT j.queue FROM jobq._job AS j WHERE j.parked AND j.queue > p.queue ORDER BY j.queue LIMIT 1)
        FROM parked AS p
        WHERE p.queue IS NOT NULL
    )
    SELECT u.queue FROM unparked AS u WHERE u.queue IS NOT NULL
    UNION
    SELECT p.queue FROM parked AS p WHERE p.queue IS NOT NULL;
COMMENT ON VIEW jobq._live_queues IS 'The queue names of the live jobs (a skip scan of the claim and parked indexes). Private.';

CREATE VIEW jobq._dead_queues AS
    -- The queue names of the dead jobs in the history: a skip scan of the
    -- dead-job index of every archive partition. Private: read jobq.queues
    -- or jobq.stats.
    WITH RECURSIVE dead AS (
        (SELECT a.queue FROM jobq._job_archive AS a WHERE a.status = 'dead' ORDER BY a.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT a.queue FROM jobq._job_archive AS a
                WHERE a.status = 'dead' AND a.queue > d.queue ORDER BY a.queue LIMIT 1)
        FROM dead AS d
        WHERE d.queue IS NOT NULL
    )
    SELECT d.queue FROM dead AS d WHERE d.queue IS NOT NULL;
COMMENT ON VIEW jobq._dead_queues IS 'The queue names of the dead jobs in the history (a skip scan of its dead-job indexes). Private.';

CREATE FUNCTION jobq._leased_in_place(p_upto timestamptz)
RETURNS TABLE (id bigint, queue text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
DECLARE
    -- Jobs read per step; a queue's walk ends after this many unleased due
    -- jobs, counted from the end of the last step that found a lease.
    c_step CONSTANT integer := 1000;
    v_queue text;
    v_priority integer;
    v_after_run_at timestamptz;
    v_after_id bigint;
    v_unleased integer;
    v_step record;
BEGIN
    -- The running jobs that are not parked (fast-path claims lease in
    -- place), without reading the backlog behind them. Such a lease sits in
    -- the claim index among the due jobs (run_at <= p_upto), where claims
    -- take jobs in order: priority, run_at, id. So each queue is walked in
    -- that order, one priority at a time, c_step jobs per step, and the walk
    -- ends once c_step due jobs in a row (whole steps) were not leased: claims reach a job
    -- only after every unleased job ahead of it, so a lease behind more than
    -- c_step of them (a job enqueued with an older run_at while it ran,
    -- released, or taken by a claim still in progress) is found once claims
    -- have caught up with it. Costs one index probe per queue and priority
    -- reached, and the leases plus at most c_step jobs per queue.
    FOR v_queue IN
        WITH RECURSIVE names AS (
            (SELECT j.queue FROM jobq._job AS j WHERE NOT j.parked ORDER BY j.queue LIMIT 1)
            UNION ALL
            SELECT (SELECT j.queue FROM jobq._job AS j WHERE NOT j.parked AND j.queue > n.queue
                    ORDER BY j.queue LIMIT 1)
            FROM names AS n
            WHERE n.queue IS NOT NULL
        )
        SELECT n.queue FROM names AS n WHERE n.queue IS NOT NULL
    LOOP
        v_unleased := 0;
        v_priority := -32769;
        LOOP
            SELECT j.priority INTO v_priority
            FROM jobq._job AS j
            WHERE j.queue = v_queue AND NOT j.parked AND j.priority > v_priority
            ORDER BY j.priority
            LIMIT 1;
            EXIT WHEN NOT FOUND;
            v_after_run_at := '-infinity';
            v_after_id := 0;
            LOOP
                SELECT count(*)::integer AS n,
                       array_agg(h.id) FILTER (WHERE h.status = 'running') AS leased,
                       max(h.run_at) AS last_run_at,
                       (array_agg(h.id ORDER BY h.run_at DESC, h.id DESC))[1] AS last_id
                INTO v_step
                FROM (SELECT j.id, j.run_at, j.status
                      FROM jobq._job AS j
                      WHERE j.queue = v_queue AND j.priority = v_priority AND NOT j.parked
                        AND j.run_at <= p_upto AND (j.run_at, j.id) > (v_after_run_at, v_after_id)
                      ORDER BY j.run_at, j.id
                      LIMIT c_step) AS h;
                IF v_step.leased IS NOT NULL THEN
                    RETURN QUERY SELECT u.id, v_queue FROM unnest(v_step.leased) AS u(id);
                    v_unleased := 0;
                ELSE
                    v_unleased := v_unleased + v_step.n;
                END IF;
                EXIT WHEN v_step.n < c_step OR v_unleased >= c_step;
                v_after_run_at := v_step.last_run_at;
                v_after_id := v_step.last_id;
            END LOOP;
            EXIT WHEN v_unleased >= c_step;
        END LOOP;
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq._leased_in_place(timestamptz) IS
    'The running jobs not parked (leased in place by fast-path claims), found by walking each queue''s due jobs in claim order while leases turn up.';

CREATE FUNCTION jobq._running()
RETURNS TABLE (id bigint, queue text, worker text, started_at timestamptz, heartbeat_at timestamptz,
               lease_expires_at timestamptz, parked boolean)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
SET jit = off
AS $$
    -- Every running job, without reading the ready or waiting ones: the
    -- parked ones by their lease expiry index, those leased in place by
    -- jobq._leased_in_place. What jobq.workers shows (its readers,
    -- jobq_viewer, may call this; it reveals what jobq.jobs does).
    SELECT j.id, j.queue, j.worker, j.started_at, j.heartbeat_at, j.lease_expires_at, j.parked
    FROM jobq._job AS j
    WHERE j.parked_expires_at IS NOT NULL
    UNION ALL
    SELECT j.id, j.queue, j.worker, j.started_at, j.heartbeat_at, j.lease_expires_at, j.parked
    FROM jobq._leased_in_place(pg_catalog.clock_timestamp()) AS l
    JOIN jobq._job AS j ON j.id = l.id
    WHERE j.status = 'running' AND NOT j.parked
$$;
COMMENT ON FUNCTION jobq._running() IS
    'Every running job (parked ones by their expiry index, the others by jobq._leased_in_place), for jobq.workers.';

CREATE FUNCTION jobq._live_sample(p_now timestamptz)
RETURNS TABLE (queue text, ready double precision, scheduled double precision, waiting double precision)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    -- The sample: this many runs of c_run_pages consecutive pages, evenly spread.
    c_runs CONSTANT integer := 32;
    c_run_pages CONSTANT integer := 8;
    v_pages bigint := pg_catalog.pg_relation_size('jobq._job'::regclass)
                      / current_setting('block_size')::bigint;
    v_scale double precision;
    v_from bigint;
BEGIN
    -- Estimated ready, scheduled and waiting jobs per queue of the live
    -- table, from a fixed number of its pages whatever its size (all of them
    -- when it has no more): c_runs runs of c_run_pages pages spread evenly
    -- over it, each read by its TID range, their jobs counted and scaled up
    -- to the table's size. Rows per queue and run; the caller sums them.
    -- For jobq._queue_counts, about the queues over its exact limit.
    IF v_pages <= c_runs * c_run_pages THEN
        RETURN QUERY
        SELECT j.queue, count(*) FILTER (WHERE j.status = 'ready' AND j.run_at <= p_now)::double precision,
               count(*) FILTER (WHERE j.status = 'ready' AND j.run_at > p_now)::double precision,
               count(*) FILTER (WHERE j.status = 'waiting')::double precision
        FROM jobq._job AS j
        WHERE j.ctid >= '(0,0)'::tid AND j.ctid < format('(%s,0)', v_pages + 1)::tid
        GROUP BY j.queue;
        RETURN;
    END IF;
    v_scale := v_pages::double precision / (c_runs * c_run_pages);
    FOR i IN 0 .. c_runs - 1 LOOP
        v_from := (2 * i + 1) * v_pages / (2 * c_runs) - c_run_pages / 2;
        RETURN QUERY
        SELECT j.queue, count(*) FILTER (WHERE j.status = 'ready' AND j.run_at <= p_now) * v_scale,
               count(*) FILTER (WHERE j.status = 'ready' AND j.run_at > p_now) * v_scale,
               count(*) FILTER (WHERE j.status = 'waiting') * v_scale
        FROM jobq._job AS j
        WHERE j.ctid >= format('(%s,0)', v_from)::tid AND j.ctid < format('(%s,0)', v_from + c_run_pages)::tid
        GROUP BY j.queue;
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq._live_sample(timestamptz) IS
    'Estimated ready, scheduled and waiting jobs per queue (rows to sum), from a fixed number of pages of the live table.';

CREATE FUNCTION jobq._queue_counts()
RETURNS TABLE (queue text, ready bigint, scheduled bigint, running bigint, waiting bigint, dead bigint,
               oldest_ready_age interval, estimated boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
DECLARE
    -- Counted one by one up to this many per queue (live jobs in the claim
    -- index, parked jobs, dead jobs); above it, estimated from a sample.
    c_exact CONSTANT integer := 10000;
    -- Pages of the history read for an estimate of its dead jobs (a random sample).
    c_sample_pages CONSTANT integer := 256;
    v_now timestamptz := now();
    v_block bigint := current_setting('block_size')::bigint;
    v_dead_pct double precision;
BEGIN
    -- Per queue with live or dead jobs: jobs ready now, scheduled, running,
    -- waiting for their parents, dead in the history, and the age of the
    -- oldest ready job, at a cost that does not grow with the backlog.
    -- running and oldest_ready_age are always exact (jobq._running's
    -- sources, and one probe per queue and priority for the first ready
    -- job). The others are exact while a queue has at most c_exact jobs in
    -- each index they are counted from (index entries only: no table row is
    -- read for them); above that, ready, scheduled and waiting are estimated
    -- from a fixed sample of the live table (jobq._live_sample), dead from a
    -- random sample of about c_sample_pages pages of the history, and
    -- estimated is true. A sample is taken only when some queue needs it.
    -- The readers of jobq.stats (jobq_viewer) may call this.
    v_dead_pct := least(100, 100.0 * c_sample_pages
                             / greatest(1, (SELECT sum(pg_catalog.pg_relation_size(t.relid))
                                            FROM pg_catalog.pg_partition_tree('jobq._job_archive'::regclass) AS t)
                                           / v_block));
    RETURN QUERY
    WITH names AS (
        SELECT l.queue FROM jobq._live_queues AS l
        UNION
        SELECT d.queue FROM jobq._dead_queues AS d
    ), running AS (
        SELECT r.queue, count(*) FILTER (WHERE r.parked) AS parked, count(*) FILTER (WHERE NOT r.parked) AS unparked
        FROM (SELECT p.queue, true AS parked FROM jobq._job AS p WHERE p.parked_expires_at IS NOT NULL
              UNION ALL
              SELECT l.queue, false FROM jobq._leased_in_place(v_now) AS l) AS r
        GROUP BY r.queue
    ), pairs AS (
        -- (queue, priority) of the claim index, one probe each.
        SELECT n.queue, p.priority
        FROM names AS n,
             LATERAL (WITH RECURSIVE prio AS (
                          (SELECT j.priority FROM jobq._job AS j WHERE j.queue = n.queue AND NOT j.parked
                           ORDER BY j.priority LIMIT 1)
                          UNION ALL
                          SELECT (SELECT j.priority FROM jobq._job AS j
                                  WHERE j.queue = n.queue AND NOT j.parked AND j.priority > r.priority
                                  ORDER BY j.priority LIMIT 1)
                          FROM prio AS r
                          WHERE r.priority IS NOT NULL)
                      SELECT r.priority FROM prio AS r WHERE r.priority IS NOT NULL) AS p
    ), oldest AS (
        -- The first ready due job of each priority (stepping over the leases ahead of it).
        SELECT p.queue, min(f.run_at) AS run_at
        FROM pairs AS p,
             LATERAL (SELECT j.run_at FROM jobq._job AS j
                      WHERE j.queue = p.queue AND j.priority = p.priority AND NOT j.parked AND j.run_at <= v_now
                        AND j.status = 'ready'
                      ORDER BY j.run_at, j.id
                      LIMIT 1) AS f
        GROUP BY p.queue
    ), bounded AS (
        SELECT n.queue, e.due, e.later, e.entries, k.entries AS parked_entries, d.dead
        FROM names AS n,
             LATERAL (SELECT count(*) FILTER (WHERE x.run_at <= v_now) AS due,
                             count(*) FILTER (WHERE x.run_at > v_now) AS later, count(*) AS entries
                      FROM (SELECT j.run_at FROM jobq._job AS j WHERE j.queue = n.queue AND NOT j.parked
                            LIMIT c_exact + 1) AS x) AS e,
             LATERAL (SELECT count(*) AS entries
                      FROM (SELECT FROM jobq._job AS j WHERE j.queue = n.queue AND j.parked
                            LIMIT c_exact + 1) AS x) AS k,
             LATERAL (SELECT count(*) AS dead
                      FROM (SELECT FROM jobq._job_archive AS a WHERE a.queue = n.queue AND a.status = 'dead'
                            LIMIT c_exact + 1) AS x) AS d
    ), live_sample AS MATERIALIZED (
        SELECT s.queue, round(sum(s.ready))::bigint AS ready, round(sum(s.scheduled))::bigint AS scheduled,
               round(sum(s.waiting))::bigint AS waiting
        FROM jobq._live_sample(v_now) AS s
        GROUP BY s.queue
    ), dead_sample AS MATERIALIZED (
        SELECT a.queue, round(count(*) * 100 / v_dead_pct)::bigint AS dead
        FROM jobq._job_archive AS a TABLESAMPLE SYSTEM (v_dead_pct)
        WHERE a.status = 'dead'
        GROUP BY a.queue
    )
    SELECT b.queue,
           CASE WHEN b.entries > c_exact
                THEN coalesce((SELECT s.ready FROM live_sample AS s WHERE s.queue = b.queue), 0)
                ELSE greatest(b.due - coalesce(r.unparked, 0), 0) END,
           CASE WHEN b.entries > c_exact
                THEN coalesce((SELECT s.scheduled FROM live_sample AS s WHERE s.queue = b.queue), 0)
                ELSE b.later END,
           coalesce(r.parked + r.unparked, 0),
           CASE WHEN b.parked_entries > c_exact
                THEN coalesce((SELECT s.waiting FROM live_sample AS s WHERE s.queue = b.queue), 0)
                ELSE greatest(b.parked_entries - coalesce(r.parked, 0), 0) END,
           CASE WHEN b.dead > c_exact
                THEN greatest(coalesce((SELECT s.dead FROM dead_sample AS s WHERE s.queue = b.queue), 0), c_exact + 1)
                ELSE b.dead END,
           v_now - o.run_at,
           b.entries > c_exact OR b.parked_entries > c_exact OR b.dead > c_exact
    FROM bounded AS b
    LEFT JOIN running AS r ON r.queue = b.queue
    LEFT JOIN oldest AS o ON o.queue = b.queue;
END
$$;
COMMENT ON FUNCTION jobq._queue_counts() IS
    'Per queue with live or dead jobs: ready, scheduled, running, waiting and dead jobs and the oldest ready age; exact up to 10,000 jobs per index, estimated above (estimated true).';

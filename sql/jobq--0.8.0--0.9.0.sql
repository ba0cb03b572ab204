-- jobq 0.8.0 → 0.9.0: a producer's open transaction no longer freezes the jobs it names. One line per change:
--   workflows, watch and cascades (issue 25, items 1-3):
--   plans that do not depend on statistics, costs that do not grow with the backlog (issue 24):
--     the claim paths (_claim, _pick, _lock_ready, _plain_leases, _crowded_queues) pin their plans: no sort, no bitmap scan
--     _job.parked_expires_at (generated) and _job_parked_expiry_idx: parked leases by expiry, without the ready or waiting jobs
--     _leased_in_place: the leases in place, walked at the head of each queue's claim order; _running: every running job
--     reap reads only leases (parked by index, in place by _leased_in_place), its plans pinned
--     _queue_counts, _live_queues, _dead_queues: counts exact up to 10,000 jobs per queue, estimated above, names by skip scans
--     stats (new column estimated), queues and workers read those; jobq_viewer may call _queue_counts and _running
--   per-queue privileges (issue 25, item 4):
--   smaller fixes (issue 25, item 5):
--
-- Applied by ALTER EXTENSION jobq UPDATE TO '0.9.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.8.0 is installed.

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
    IF jobq.version() <> '0.8.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.8.0 to 0.9.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.9.0');

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '0.9.0'::text
$$;
COMMENT ON FUNCTION jobq.version() IS 'Installed jobq version (semver text).';

-- tables (new or changed), each section its own

-- plans and costs (issue 24): the lease expiry of parked jobs, by an index of its own
ALTER TABLE jobq._job ADD COLUMN parked_expires_at timestamptz
    GENERATED ALWAYS AS (CASE WHEN parked THEN lease_expires_at END) STORED;
COMMENT ON COLUMN jobq._job.parked_expires_at IS
    'The lease expiry of a parked running job (generated from parked and lease_expires_at; NULL otherwise): what jobq.reap finds expired parked leases by.';
CREATE INDEX _job_parked_expiry_idx ON jobq._job (parked_expires_at)
    WHERE parked_expires_at IS NOT NULL;

-- workflows, watch and cascades (issue 25, items 1-3)

-- plans and costs (issue 24)

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
CREATE OR REPLACE FUNCTION jobq._plain_leases(p_queues text[], p_lease interval, OUT names text[], OUT leases interval[])
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_plain boolean;
BEGIN
    -- When every queue of a claim is plain — not paused, no concurrency or
    -- rate limit, no serial-group job in it — their distinct names (first
    -- occurrence order) and leases (p_lease, else each queue's setting), for
    -- the one-statement fast path. NULLs otherwise: the claim takes the full
    -- path (jobq._pick). The arguments are already validated.
    SELECT array_agg(u.name ORDER BY u.ord), array_agg(coalesce(p_lease, s.lease) ORDER BY u.ord),
           bool_and(NOT s.paused AND s.concurrency IS NULL AND s.rate_limit IS NULL
                    AND NOT EXISTS (SELECT FROM jobq._job AS g WHERE g.queue = u.name AND g.group_key IS NOT NULL))
    INTO names, leases, v_plain
    FROM (SELECT q.name, min(q.ord) AS ord
          FROM unnest(p_queues) WITH ORDINALITY AS q(name, ord)
          GROUP BY q.name) AS u,
         LATERAL jobq._settings(u.name) AS s;
    IF NOT v_plain THEN
        names := NULL;
        leases := NULL;
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._plain_leases(text[], interval) IS
    'Names and leases of the queues of a claim when all are plain (no pause, limits or groups); NULLs otherwise.';
CREATE OR REPLACE FUNCTION jobq._crowded_queues(p_names text[], p_now timestamptz) RETURNS text[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    -- Older than this (and than the claiming transaction), a lease at the head is no passing one.
    c_stale CONSTANT interval := interval '50 milliseconds';
BEGIN
    -- Which of the plain queues p_names are crowded with leases: the first
    -- due entry of the queue's claim index is a job leased before the
    -- claiming transaction began and over 50 ms before p_now. The fast path
    -- leases in place (a HOT update: the row stays in the claim index until
    -- it ends, heartbeats or is parked by reap after 10 s), and every claim
    -- steps over the leased rows ahead of the ready ones. That is cheap
    -- while leases are short; when they are held longer (a thousand workers
    -- queueing behind PgBouncer for their acks, slow handlers, many
    -- workers) thousands pile up at the head and every claim pays for all
    -- of them. A claim on a crowded queue parks its own leases instead (out
    -- of the claim index, an ordinary update). Costs one index probe per
    -- queue; a head that is ready, scheduled, freshly leased or leased by
    -- this transaction keeps the HOT lease.
    RETURN ARRAY(
        SELECT q.name
        FROM unnest(p_names) AS q(name)
        WHERE EXISTS (
            SELECT
            FROM (SELECT h.status, h.started_at
                  FROM jobq._job AS h
                  WHERE h.queue = q.name AND NOT h.parked AND h.run_at <= now()
                  ORDER BY h.priority, h.run_at, h.id
                  LIMIT 1) AS head
            WHERE head.status = 'running' AND head.started_at < least(now(), p_now - c_stale)));
END
$$;
COMMENT ON FUNCTION jobq._crowded_queues(text[], timestamptz) IS
    'The plain queues whose claim index starts with a lease older than 50 ms (and than the transaction): their claims park.';
CREATE OR REPLACE FUNCTION jobq._pick(p_queues text[], p_n integer, p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, lease interval)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_queue text;
    v_settings jobq._queue;
    v_now timestamptz := p_now;   -- the start time the rate limit counts (the claim's started_at)
    v_names text[] := '{}';
    v_leases interval[] := '{}';
    v_allow integer[] := '{}';
    v_rated text[] := '{}';
    v_slots integer;
    v_ids bigint[];
    v_grouped boolean;
BEGIN
    -- The full claim path. Choose (and row-lock) up to p_n ready jobs across
    -- p_queues, most urgent first, that may start now: the queue is not
    -- paused, has a free concurrency slot and rate budget, and the job heads
    -- its serial group. A limited queue's slots are counted under a row lock
    -- on its own jobq._queue row, taken with SKIP LOCKED (a busy queue
    -- yields no jobs, never a wait, and a crashed claimer's lock vanishes
    -- with its transaction; only jobq's roles can lock that row, where any
    -- role can take an advisory lock); each count runs in a statement that
    -- starts after the lock, so it sees every claim that committed before.
    -- Group heads are row-locked (SKIP LOCKED) and re-checked after the
    -- locks. The jobs this path leases are parked, so the count of a queue's
    -- running jobs is an index scan (waiting jobs are parked too, and
    -- skipped). Records the starts of rate-limited queues at p_now, which
    -- the caller also stamps on the jobs as started_at. Jobs taken earlier in
    -- this transaction (take, hold) count as running. Plans pinned as
    -- jobq._claim's (no sort, no bitmap scan of the backlog).
    PERFORM jobq._check_claim_args(p_queues, p_n, p_lease);
    FOR v_queue IN SELECT DISTINCT ON (u.name) u.name FROM unnest(p_queues) WITH ORDINALITY AS u(name, ord)
                   ORDER BY u.name, u.ord LOOP
        v_settings := jobq._settings(v_queue);
        v_slots := p_n;
        IF v_settings.paused THEN
            v_slots := 0;
        ELSIF v_settings.concurrency IS NOT NULL OR v_settings.rate_limit IS NOT NULL THEN
            PERFORM FROM jobq._queue AS q WHERE q.queue = v_queue FOR NO KEY UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                v_slots := 0;   -- another claimer is counting this queue's slots right now
            END IF;
        END IF;
        IF v_slots > 0 AND v_settings.concurrency IS NOT NULL THEN
            SELECT least(v_slots, v_settings.concurrency - count(*)
                                  - jobq._taken_in_transaction(v_queue))::integer INTO v_slots
            FROM jobq._job AS j
            WHERE j.queue = v_queue AND j.parked AND j.status = 'running';
        END IF;
        IF v_slots > 0 AND v_settings.rate_limit IS NOT NULL THEN
            DELETE FROM jobq._rate_start AS r
            WHERE r.queue = v_queue AND r.started_at <= v_now - v_settings.rate_interval;
            SELECT least(v_slots, v_settings.rate_limit - coalesce(sum(r.n), 0))::integer INTO v_slots
            FROM jobq._rate_start AS r
            WHERE r.queue = v_queue AND r.started_at > v_now - v_settings.rate_interval;
            v_rated := v_rated || v_queue;
        END IF;
        v_names := v_names || v_queue;
        v_leases := v_leases || coalesce(p_lease, v_settings.lease);
        v_allow := v_allow || greatest(v_slots, 0);
    END LOOP;

    -- Candidates: per queue, its most urgent unlocked ready rows (one index
    -- scan each); a serial-group job only when it heads its group (its row
    -- lock makes this transaction the group's only claimer of it).
    SELECT array_agg(c.id ORDER BY c.priority, c.run_at, c.id),
           array_agg(c.lease ORDER BY c.priority, c.run_at, c.id),
           array_agg(c.queue ORDER BY c.priority, c.run_at, c.id),
           coalesce(bool_or(c.grouped), false)
    INTO v_ids, v_leases, v_names, v_grouped
    FROM (
        SELECT c.id, c.priority, c.run_at, c.grouped, q.name AS queue, q.lease
        FROM unnest(v_names, v_allow, v_leases) AS q(name, slots, lease),
             LATERAL (
                 SELECT j.id, j.priority, j.run_at, j.group_key IS NOT NULL AS grouped
                 FROM jobq._job AS j
                 WHERE j.queue = q.name AND NOT j.parked AND j.status = 'ready' AND j.run_at <= now()
                   AND (j.group_key IS NULL
                        OR NOT EXISTS (SELECT FROM jobq._job AS g
                                       WHERE g.queue = j.queue AND g.group_key = j.group_key
                                         AND g.id <> j.id AND (g.id < j.id OR g.status = 'running')))
                 ORDER BY j.priority, j.run_at, j.id
                 LIMIT q.slots
                 FOR UPDATE SKIP LOCKED
             ) AS c
        WHERE q.slots > 0
        ORDER BY c.priority, c.run_at, c.id
        LIMIT p_n
    ) AS c;

    IF v_grouped THEN
        -- Re-check group heads with a snapshot taken after the row locks: a
        -- claim of the same group that committed meanwhile is now visible.
        SELECT array_agg(u.id ORDER BY u.ord), array_agg(u.lease ORDER BY u.ord), array_agg(u.queue ORDER BY u.ord)
        INTO v_ids, v_leases, v_names
        FROM unnest(v_ids, v_leases, v_names) WITH ORDINALITY AS u(id, lease, queue, ord)
        JOIN jobq._job AS j ON j.id = u.id
        WHERE j.group_key IS NULL
           OR NOT EXISTS (SELECT FROM jobq._job AS g
                          WHERE g.queue = j.queue AND g.group_key = j.group_key
                            AND g.id <> j.id AND (g.id < j.id OR g.status = 'running'));
    END IF;

    IF cardinality(v_rated) > 0 THEN
        INSERT INTO jobq._rate_start (queue, started_at, n)
        SELECT r.queue, v_now, count(*)
        FROM unnest(v_names) AS r(queue)
        WHERE r.queue = ANY (v_rated)
        GROUP BY r.queue;
    END IF;

    RETURN QUERY SELECT u.id, u.lease FROM unnest(v_ids, v_leases) AS u(id, lease);
END
$$;
COMMENT ON FUNCTION jobq._pick(text[], integer, interval, timestamptz) IS
    'Row-locks up to n ready jobs that may start now (pause, concurrency, rate limit, serial groups honoured).';
CREATE OR REPLACE FUNCTION jobq._claim(p_queues text[], p_n integer, p_worker text, p_lease interval)
RETURNS SETOF jobq.job
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_plain record;
    v_ids bigint[];
    v_leases interval[];
    v_now timestamptz;
    v_park text[];
BEGIN
    -- What both claim() overloads do once their arguments are checked:
    -- lease up to p_n ready jobs across p_queues, most urgent first
    -- (priority, run_at, id), each under its queue's lease unless given;
    -- paused queues, concurrency and rate limits and serial groups honoured.
    -- No sort and no bitmap scan (the SET clauses): whatever the table's
    -- statistics say (never analyzed, analyzed while empty), the candidates
    -- come from the claim index in its order, and reading stops after p_n.
    v_now := clock_timestamp();
    v_plain := jobq._plain_leases(p_queues, p_lease);
    IF v_plain.names IS NOT NULL THEN
        -- Plain queues: one statement picks (an index scan per queue) and
        -- leases. The lease writes no indexed column: a HOT update on the
        -- row's own page; the row stays in the claim index, and claims skip
        -- it by its status. On a queue crowded with older leases
        -- (jobq._crowded_queues) the lease parks the row instead, so that
        -- leases do not pile up ahead of every later claim.
        v_park := jobq._crowded_queues(v_plain.names, v_now);
        RETURN QUERY
        WITH leased AS (
            UPDATE jobq._job AS j
            SET status = 'running',
                parked = (j.queue = ANY (v_park)),
                attempts = j.attempts + 1,
                lease_token = gen_random_uuid(),
                lease_expires_at = v_now + v_plain.leases[array_position(v_plain.names, j.queue)],
                worker = p_worker,
                started_at = v_now
            WHERE j.id = ANY (ARRAY(
                SELECT c.id
                FROM unnest(v_plain.names) AS q(name),
                     LATERAL (SELECT p.id, p.priority, p.run_at
                              FROM jobq._job AS p
                              WHERE p.queue = q.name AND NOT p.parked AND p.status = 'ready'
                                AND p.run_at <= now() AND p.group_key IS NULL
                              ORDER BY p.priority, p.run_at, p.id
                              LIMIT p_n
                              FOR UPDATE SKIP LOCKED) AS c
                ORDER BY c.priority, c.run_at, c.id
                LIMIT p_n))
            RETURNING j.*
        )
        SELECT l.id, l.queue, l.payload, l.priority::integer, l.attempts, l.max_attempts, l.run_at,
               l.created_at, l.lease_token, l.lease_expires_at, l.worker, l.job_key, l.last_error, l.group_key,
               l.timeout
        FROM leased AS l
        ORDER BY l.priority, l.run_at, l.id;
        RETURN;
    END IF;
    -- Limits, pause or serial groups: jobq._pick counts and locks. These
    -- leases are parked at once: limited queues count their running jobs by
    -- the parked index.
    SELECT array_agg(p.id), array_agg(p.lease) INTO v_ids, v_leases
    FROM jobq._pick(p_queues, p_n, p_lease, v_now) AS p;
    RETURN QUERY
    WITH leased AS (
        UPDATE jobq._job AS j
        SET status = 'running',
            parked = true,
            attempts = j.attempts + 1,
            lease_token = gen_random_uuid(),
            lease_expires_at = v_now + p.lease,
            worker = p_worker,
            started_at = v_now
        FROM unnest(v_ids, v_leases) AS p(id, lease)
        WHERE j.id = p.id
        RETURNING j.*
    )
    SELECT l.id, l.queue, l.payload, l.priority::integer, l.attempts, l.max_attempts, l.run_at,
           l.created_at, l.lease_token, l.lease_expires_at, l.worker, l.job_key, l.last_error, l.group_key,
           l.timeout
    FROM leased AS l
    ORDER BY l.priority, l.run_at, l.id;
END
$$;
COMMENT ON FUNCTION jobq._claim(text[], integer, text, interval) IS
    'The claim itself (arguments already checked): fast path for plain queues, jobq._pick otherwise.';
CREATE OR REPLACE FUNCTION jobq._lock_ready(p_queue text, p_n integer) RETURNS SETOF jobq.job
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    -- Row-lock up to n ready jobs of one queue for work inside the caller's
    -- transaction (take, hold), most urgent first, as that transaction sees
    -- them: no lease, this attempt counted. One index scan on a plain queue
    -- (in the claim index's order, whatever the statistics: no sort, no
    -- bitmap scan), the full path (jobq._pick) otherwise; then the jobs hold
    -- their queue's concurrency slots until the transaction ends. Arguments
    -- are already validated.
    IF (jobq._plain_leases(ARRAY[p_queue], NULL)).names IS NOT NULL THEN
        RETURN QUERY
        SELECT j.id, j.queue, j.payload, j.priority::integer, j.attempts + 1, j.max_attempts, j.run_at,
               j.created_at, NULL::uuid, NULL::timestamptz, session_user::text, j.job_key, j.last_error,
               j.group_key, j.timeout
        FROM jobq._job AS j
        WHERE j.queue = p_queue AND NOT j.parked AND j.status = 'ready' AND j.run_at <= now()
          AND j.group_key IS NULL
        ORDER BY j.priority, j.run_at, j.id
        LIMIT p_n
        FOR UPDATE SKIP LOCKED;
        RETURN;
    END IF;
    SELECT array_agg(p.id) INTO v_ids FROM jobq._pick(ARRAY[p_queue], p_n, NULL, clock_timestamp()) AS p;
    IF cardinality(v_ids) > 0 THEN
        INSERT INTO jobq._taken (queue, n) VALUES (p_queue, cardinality(v_ids));
    END IF;
    RETURN QUERY
    SELECT j.id, j.queue, j.payload, j.priority::integer, j.attempts + 1, j.max_attempts, j.run_at,
           j.created_at, NULL::uuid, NULL::timestamptz, session_user::text, j.job_key, j.last_error, j.group_key,
           j.timeout
    FROM jobq._job AS j
    WHERE j.id = ANY (v_ids)
    ORDER BY j.priority, j.run_at, j.id;
END
$$;
COMMENT ON FUNCTION jobq._lock_ready(text, integer) IS
    'Row-locks up to n ready jobs of a queue for in-transaction work (take, hold); limits and groups honoured.';
CREATE OR REPLACE FUNCTION jobq.reap(n integer DEFAULT 10000) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
DECLARE
    v_leased bigint[];
    v_retry bigint[];
    v_dead bigint[];
    v_queues text[];
BEGIN
    -- Return up to n jobs whose lease expired to the queue (ready now), or
    -- dead-letter those whose attempts are used up; each counts as a failed
    -- attempt. Concurrent reapers skip each other's rows, so they never
    -- block or deadlock. The job's previous error is kept after the
    -- lease-expiry note in last_error; the note alone joins its error
    -- history. The ready and waiting jobs are never read, so a reap with
    -- nothing to do costs the same with a backlog of a million: parked
    -- leases are found by their expiry index, leases in place (no index
    -- covers them: claims stay HOT) at the head of their queue's claim order
    -- (jobq._leased_in_place). Leases held for over 10 seconds are parked
    -- (out of the claim index). Also folds the counters and forgets the
    -- take bookkeeping of finished transactions, so they stay small where
    -- pg_cron does not run prune().
    PERFORM jobq._check_batch(reap.n, 'n', 1000000);
    v_leased := ARRAY(SELECT l.id FROM jobq._leased_in_place(clock_timestamp()) AS l);
    SELECT coalesce(array_agg(e.id) FILTER (WHERE e.attempts < e.max_attempts), '{}'),
           coalesce(array_agg(e.id) FILTER (WHERE e.attempts >= e.max_attempts), '{}')
    INTO v_retry, v_dead
    FROM (
        SELECT j.id, j.attempts, j.max_attempts
        FROM jobq._job AS j
        WHERE j.id = ANY (v_leased || ARRAY(SELECT p.id FROM jobq._job AS p
                                            WHERE p.parked_expires_at < now()
                                            ORDER BY p.parked_expires_at
                                            LIMIT reap.n))
          AND j.status = 'running' AND j.lease_expires_at < now()
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

    IF cardinality(v_dead) > 0 THEN
        UPDATE jobq._job AS j
        SET last_error = jobq._reap_note(j.lease_expires_at, j.worker, j.last_error) || E'\nno attempts left'
        WHERE j.id = ANY (v_dead);
        PERFORM jobq._finish(v_dead, NULL, 'dead', NULL);
    END IF;
    -- Leases in place held for over 10 seconds (a worker that never
    -- heart-beats) leave the claim index too, so claims do not step over
    -- them. Rows busy elsewhere are skipped, never waited for. The rows are
    -- picked once (a materialized CTE) and joined by id: as "id IN (SELECT
    -- ... FOR UPDATE)" the locking scan could become the inner side of a
    -- nested loop, run again for every live job.
    WITH stale AS MATERIALIZED (
        SELECT l.id FROM jobq._job AS l
        WHERE l.id = ANY (v_leased) AND l.status = 'running' AND NOT l.parked
          AND l.started_at < now() - interval '10 seconds'
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
CREATE OR REPLACE VIEW jobq.stats AS
    -- Per queue: jobs ready now, scheduled for later, running, dead, the
    -- age of the oldest ready job (how far behind the workers are; NULL when
    -- none is ready), whether the queue is paused, the totals of completed
    -- jobs, failed attempts and dead-lettered jobs (from the counters:
    -- history is never scanned), jobs waiting for their parents, and
    -- whether some of the counts are estimates. The live and dead counts
    -- (jobq._queue_counts) cost the same with a backlog of a million: exact
    -- up to 10,000 jobs of a queue, estimated above (estimated is true);
    -- running and oldest_ready_age are always exact.
    WITH counts AS (
        SELECT c.* FROM jobq._queue_counts() AS c
    ), totals AS (
        SELECT c.queue, sum(c.completed)::bigint AS completed, sum(c.failed)::bigint AS failed,
               sum(c.dead)::bigint AS dead
        FROM jobq._counter AS c
        GROUP BY c.queue
    ), names AS (
        SELECT c.queue FROM counts AS c
        UNION SELECT q.queue FROM jobq._queue AS q
        UNION SELECT t.queue FROM totals AS t
    )
    SELECT n.queue,
           coalesce(c.ready, 0) AS ready,
           coalesce(c.scheduled, 0) AS scheduled,
           coalesce(c.running, 0) AS running,
           coalesce(c.dead, 0) AS dead,
           c.oldest_ready_age,
           coalesce(q.paused, false) AS paused,
           coalesce(t.completed, 0) AS completed_total,
           coalesce(t.failed, 0) AS failed_total,
           coalesce(t.dead, 0) AS dead_total,
           coalesce(c.waiting, 0) AS waiting,
           coalesce(c.estimated, false) AS estimated
    FROM names AS n
    LEFT JOIN counts AS c ON c.queue = n.queue
    LEFT JOIN jobq._queue AS q ON q.queue = n.queue
    LEFT JOIN totals AS t ON t.queue = n.queue;
COMMENT ON VIEW jobq.stats IS
    'Per queue: ready, scheduled, running and dead job counts, the age of the oldest ready job, paused, completed/failed/dead totals, waiting jobs, and whether counts are estimates (over 10,000 jobs).';
CREATE OR REPLACE VIEW jobq.queues AS
    -- Effective settings of every configured queue and every queue with jobs:
    -- its overrides over jobq._queue_defaults, as jobq._settings() applies
    -- them (no function call, so a reader needs no EXECUTE on a private one).
    -- No limit shows as 0 (what configure_queue takes to remove one);
    -- updated_at is NULL for a queue never configured. The names of queues
    -- with jobs come from skip scans (one index probe per name), not from
    -- reading every job.
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
          UNION SELECT l.queue FROM jobq._live_queues AS l
          UNION SELECT d.queue FROM jobq._dead_queues AS d) AS n
    CROSS JOIN jobq._queue_defaults AS d
    LEFT JOIN jobq._queue AS q ON q.queue = n.queue;
COMMENT ON VIEW jobq.queues IS 'Effective settings (overrides over defaults) of every known queue; 0 concurrency or rate_limit: no limit.';
CREATE OR REPLACE VIEW jobq.workers AS
    -- One row per worker name holding running jobs now: its queues, how many
    -- jobs, when the oldest started, its last heartbeat (NULL when none of
    -- its leases was heart-beaten yet) and the next of its leases to expire.
    -- Claims without a worker name show as one row with worker NULL. The
    -- running jobs come from jobq._running, which never reads the ready or
    -- waiting ones.
    SELECT r.worker,
           array_agg(DISTINCT r.queue ORDER BY r.queue) AS queues,
           count(*) AS jobs,
           min(r.started_at) AS oldest_started_at,
           max(r.heartbeat_at) AS last_heartbeat_at,
           min(r.lease_expires_at) AS next_lease_expires_at
    FROM jobq._running() AS r
    GROUP BY r.worker;
COMMENT ON VIEW jobq.workers IS 'The workers holding running jobs now: queues, job count, oldest start, last heartbeat, next lease expiry.';
GRANT EXECUTE ON FUNCTION jobq._queue_counts(), jobq._running() TO jobq_viewer;
GRANT SELECT ON jobq._live_queues, jobq._dead_queues TO jobq_admin;

-- per-queue privileges (issue 25, item 4)

-- smaller fixes (issue 25, item 5)

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

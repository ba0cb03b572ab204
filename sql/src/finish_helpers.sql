CREATE FUNCTION jobq._finish_lean(p_ids bigint[], p_lease_tokens uuid[], p_held boolean,
                                  OUT ids bigint[], OUT wake text[], OUT parents bigint[], OUT watched bigint[])
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_limited text[];
    v_rare jsonb;   -- the deleted jobs with side rows, dependents or watchers
    v_keyed_ids bigint[];
    v_keyed_queues text[];
    v_keys text[];
    v_erred bigint[];
    v_children bigint[];
    v_now timestamptz := clock_timestamp();
BEGIN
    -- jobq._finish's common case, lean: completed jobs without results
    -- while no queue keeps history, so the rows are deleted, not copied.
    -- Their side rows go with them (error history, edges and gates), a
    -- job_key records its completion in jobq._key_done, and each is
    -- counted. Returns the ids that left, the queues to wake (serial
    -- groups, concurrency limits), and the parents and watched jobs among
    -- them. Rows go in id order. One statement deletes, counts (one
    -- counter row per queue) and finds the queues to wake.
    WITH gone AS (
        DELETE FROM jobq._job AS j
        USING (SELECT u.* FROM unnest(p_ids, p_lease_tokens) AS u(id, lease_token) ORDER BY u.id) AS f
        WHERE j.id = f.id
          AND (f.lease_token IS NULL OR j.lease_token = f.lease_token)
          AND (NOT p_held OR j.status = 'ready')
        RETURNING j.id, j.queue, j.group_key, j.job_key, j.last_error IS NOT NULL AS erred,
                  j.has_children, j.has_parents, j.watched
    ), counted AS (
        INSERT INTO jobq._counter (queue, bucket, completed)
        SELECT g.queue, date_trunc('minute', now()), count(*) FROM gone AS g GROUP BY g.queue
        RETURNING queue
    )
    SELECT array_agg(g.id),
           jsonb_agg(g) FILTER (WHERE g.group_key IS NOT NULL OR g.job_key IS NOT NULL OR g.erred
                                   OR g.has_children OR g.has_parents OR g.watched),
           ARRAY(SELECT q.queue FROM jobq._queue AS q
                 WHERE q.queue IN (SELECT c.queue FROM counted AS c) AND q.concurrency IS NOT NULL)
    INTO ids, v_rare, v_limited
    FROM gone AS g;
    IF v_rare IS NOT NULL THEN
        -- Jobs with more to them (a serial group, a job_key, an error
        -- history, dependents, parents, a watcher): the common case never
        -- builds these arrays.
        SELECT array_agg(DISTINCT r.queue) FILTER (WHERE r.group_key IS NOT NULL),
               array_agg(r.id) FILTER (WHERE r.job_key IS NOT NULL),
               array_agg(r.queue) FILTER (WHERE r.job_key IS NOT NULL),
               array_agg(r.job_key) FILTER (WHERE r.job_key IS NOT NULL),
               array_agg(r.id) FILTER (WHERE r.erred),
               array_agg(r.id) FILTER (WHERE r.has_children),
               array_agg(r.id) FILTER (WHERE r.has_parents),
               array_agg(r.id) FILTER (WHERE r.watched)
        INTO wake, v_keyed_ids, v_keyed_queues, v_keys, v_erred, parents, v_children, watched
        FROM jsonb_to_recordset(v_rare) AS r(id bigint, queue text, group_key text, job_key text, erred boolean,
                                             has_children boolean, has_parents boolean, watched boolean);
    END IF;
    IF ids IS NULL THEN
        RETURN;
    END IF;
    IF v_erred IS NOT NULL THEN
        -- Only jobs that failed before have an error history to delete
        -- (the common case never opens jobq._job_error).
        DELETE FROM jobq._job_error AS e WHERE e.job_id = ANY (v_erred);
    END IF;
    IF v_children IS NOT NULL THEN
        -- Jobs that depended on others, gone without history: so are their edges and gates.
        DELETE FROM jobq._job_dep AS d WHERE d.child_id = ANY (v_children);
        DELETE FROM jobq._job_wait AS w WHERE w.job_id = ANY (v_children);
    END IF;
    IF v_keys IS NOT NULL THEN
        -- A separate statement, so that finishing jobs without keys (the
        -- common case) never opens jobq._key_done.
        INSERT INTO jobq._key_done AS k (queue, job_key, job_id, finished_at)
        SELECT u.queue, u.job_key, u.id, v_now FROM unnest(v_keyed_queues, v_keys, v_keyed_ids) AS u(queue, job_key, id)
        ON CONFLICT (queue, job_key) DO UPDATE SET job_id = excluded.job_id, finished_at = excluded.finished_at;
    END IF;
    wake := wake || v_limited;
END
$$;
COMMENT ON FUNCTION jobq._finish_lean(bigint[], uuid[], boolean) IS
    'jobq._finish when nothing is kept: deletes completed jobs and their side rows, counts them, records their job_key.';

CREATE FUNCTION jobq._finish_kept(p_ids bigint[], p_lease_tokens uuid[], p_status text, p_error text,
                                  p_held boolean, p_results jsonb[], p_cause bigint,
                                  OUT ids bigint[], OUT wake text[], OUT parents bigint[], OUT watched bigint[])
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    -- jobq._finish's general case, in one statement: the jobs leave the
    -- live table as p_status and go to the archive when kept (dead and
    -- cancelled always, with p_error or their last error; completed ones
    -- when their queue's retention is over 0 or they carry a result from
    -- p_results, kept for at least result_retention); those not kept take
    -- their error history, edges and gates along; a job_key records its
    -- completion; completed and dead jobs are counted. Returns the ids that
    -- left, the queues to wake, and the parents and watched jobs among them.
    WITH gone AS (
        DELETE FROM jobq._job AS j
        USING (SELECT u.* FROM unnest(p_ids, p_lease_tokens, p_results) AS u(id, lease_token, result)
               ORDER BY u.id) AS f
        WHERE j.id = f.id
          AND (f.lease_token IS NULL OR j.lease_token = f.lease_token)
          AND (NOT p_held OR j.status = 'ready')
        RETURNING j.*, CASE WHEN p_status = 'completed' THEN f.result END AS result
    ), settings AS (
        SELECT s.*
        FROM (SELECT DISTINCT g.queue FROM gone AS g) AS q,
             LATERAL jobq._settings(q.queue) AS s
    ), kept AS (
        INSERT INTO jobq._job_archive
            (id, queue, payload, status, priority, run_at, attempts, max_attempts,
             job_key, worker, last_error, created_at, started_at, finished_at, prune_after, group_key, timeout,
             result, cancelled_by, meta, fair_key)
        SELECT g.id, g.queue, g.payload, p_status, g.priority, g.run_at, g.attempts + p_held::integer,
               g.max_attempts, g.job_key, CASE WHEN p_held THEN session_user ELSE g.worker END,
               coalesce(p_error, g.last_error), g.created_at,
               CASE WHEN p_held THEN v_now ELSE g.started_at END,
               v_now, v_now + CASE WHEN p_status <> 'completed' THEN s.dead_retention
                                   WHEN g.result IS NOT NULL THEN greatest(s.retention, s.result_retention)
                                   ELSE s.retention END,
               g.group_key, g.timeout, g.result, p_cause, g.meta, g.fair_key
        FROM gone AS g
        JOIN settings AS s ON s.queue = g.queue
        WHERE p_status <> 'completed' OR s.retention > interval '0' OR g.result IS NOT NULL
    ), forgotten AS (
        -- Completed jobs the history does not keep take their errors along.
        DELETE FROM jobq._job_error AS e
        USING gone AS g
        JOIN settings AS s ON s.queue = g.queue
        WHERE e.job_id = g.id AND g.last_error IS NOT NULL
          AND p_status = 'completed' AND s.retention <= interval '0' AND g.result IS NULL
    ), unlinked AS (
        -- ... and their edges and gates, when they depended on others.
        DELETE FROM jobq._job_dep AS d
        USING gone AS g
        JOIN settings AS s ON s.queue = g.queue
        WHERE d.child_id = g.id AND g.has_parents
          AND p_status = 'completed' AND s.retention <= interval '0' AND g.result IS NULL
    ), ungated AS (
        DELETE FROM jobq._job_wait AS w
        USING gone AS g
        JOIN settings AS s ON s.queue = g.queue
        WHERE w.job_id = g.id AND g.has_parents
          AND p_status = 'completed' AND s.retention <= interval '0' AND g.result IS NULL
    ), keyed AS (
        INSERT INTO jobq._key_done AS k (queue, job_key, job_id, finished_at)
        SELECT g.queue, g.job_key, g.id, v_now FROM gone AS g
        WHERE p_status = 'completed' AND g.job_key IS NOT NULL
        ON CONFLICT (queue, job_key) DO UPDATE SET job_id = excluded.job_id, finished_at = excluded.finished_at
    ), counted AS (
        INSERT INTO jobq._counter (queue, bucket, completed, dead)
        SELECT g.queue, date_trunc('minute', now()),
               count(*) FILTER (WHERE p_status = 'completed'), count(*) FILTER (WHERE p_status = 'dead')
        FROM gone AS g
        WHERE p_status IN ('completed', 'dead')
        GROUP BY g.queue
    )
    SELECT array_agg(g.id),
           array_agg(DISTINCT g.queue) FILTER (WHERE g.group_key IS NOT NULL OR s.concurrency IS NOT NULL),
           array_agg(g.id) FILTER (WHERE g.has_children),
           array_agg(g.id) FILTER (WHERE g.watched)
    INTO ids, wake, parents, watched
    FROM gone AS g
    JOIN settings AS s ON s.queue = g.queue;
END
$$;
COMMENT ON FUNCTION jobq._finish_kept(bigint[], uuid[], text, text, boolean, jsonb[], bigint) IS
    'jobq._finish in general: moves jobs to the archive as they end (or deletes them), with their side rows and counts.';

CREATE FUNCTION jobq._finish(p_ids bigint[], p_lease_tokens uuid[], p_status text, p_error text,
                             p_held boolean DEFAULT false, p_results jsonb[] DEFAULT NULL,
                             p_cause bigint DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_ids bigint[];
    v_wake text[];
    v_parents bigint[];
    v_watched bigint[];
    v_lean record;
BEGIN
    -- Take live jobs out of the live table as p_status (completed, dead or
    -- cancelled). A non-NULL lease token fences: the job must still be held
    -- under exactly that lease. p_held: jobs the caller's transaction holds
    -- without a lease (take, hold): they must be unleased, and this
    -- transaction is their attempt. Every job is counted (one counter row per
    -- queue); history keeps dead and cancelled jobs, and completed ones when
    -- their queue's retention is over 0 (jobq._finish_kept; when nothing is
    -- kept, jobq._finish_lean). A completed job with a job_key records its
    -- completion in jobq._key_done (for enqueue's unique_for). Finishing a
    -- serial-group job or a job of a concurrency-limited queue frees a slot,
    -- so it wakes that queue's workers. A job that leaves no history takes
    -- its error history (jobq._job_error) with it; only a job that failed
    -- before (last_error set) has any. Rows go in id order (as
    -- jobq._settle_at_commit locks parents: no deadlock with an enqueue of
    -- their children). p_results (paired with p_ids): what completed jobs
    -- report; a job with a result is kept for at least its queue's
    -- result_retention. A job others depend on (has_children) updates their
    -- gates (jobq._finish_dependents); a job that depended on others and
    -- leaves no history takes its edges along. p_cause: the root ancestor of
    -- a cascade cancelling these jobs (recorded as cancelled_by; the caller,
    -- jobq._finish_dependents, then handles their dependents itself). A
    -- watched job (jobq.watch) sends NOTIFY jobq_finished with its id. A job
    -- kept in history keeps its gate, so a retry goes through it again.
    -- Returns the ids that left the live table. Its statements take jobs
    -- by id: planned once per session (generic plans), on index paths only,
    -- so that a plan made while the table held a few rows (a hash join over
    -- a sequential scan of it) does not scan a backlog that arrived since.
    IF p_held THEN
        -- Only jobs this transaction holds (or nobody does): a job another
        -- transaction holds is skipped, never waited for.
        p_ids := ARRAY(SELECT j.id FROM jobq._job AS j
                       WHERE j.id = ANY (p_ids) AND j.status = 'ready'
                       FOR UPDATE SKIP LOCKED);
    END IF;
    IF p_status = 'completed' AND coalesce(cardinality(array_remove(p_results, NULL)), 0) = 0
       AND NOT jobq._history_kept() THEN
        -- An assignment, not a query: a simple expression costs no executor start.
        v_lean := jobq._finish_lean(p_ids => p_ids, p_lease_tokens => p_lease_tokens, p_held => p_held);
        v_ids := v_lean.ids;
        v_wake := v_lean.wake;
        v_parents := v_lean.parents;
        v_watched := v_lean.watched;
    ELSE
        SELECT f.ids, f.wake, f.parents, f.watched INTO v_ids, v_wake, v_parents, v_watched
        FROM jobq._finish_kept(p_ids => p_ids, p_lease_tokens => p_lease_tokens, p_status => p_status,
                               p_error => p_error, p_held => p_held, p_results => p_results,
                               p_cause => p_cause) AS f;
    END IF;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    IF current_setting('jobq.named_jobs', true) = 'on' THEN
        -- This transaction named live jobs (depends_on, members, watch)
        -- whose flags wait for its commit (jobq._settle_at_commit): those
        -- it finishes itself are acted on as if flagged already.
        SELECT ARRAY(SELECT DISTINCT u.id FROM unnest(v_parents || n.parents) AS u(id)),
               ARRAY(SELECT DISTINCT u.id FROM unnest(v_watched || n.watched) AS u(id))
        INTO v_parents, v_watched
        FROM (SELECT ARRAY(SELECT p.id FROM jobq._at_commit AS c, unnest(c.parents) AS p(id)
                           WHERE c.xact = pg_current_xact_id() AND p.id = ANY (v_ids)) AS parents,
                     ARRAY(SELECT w.id FROM jobq._at_commit AS c, unnest(c.watched) AS w(id)
                           WHERE c.xact = pg_current_xact_id() AND w.id = ANY (v_ids)) AS watched) AS n;
    END IF;
    IF cardinality(v_watched) > 0 THEN
        PERFORM pg_notify('jobq_finished', w.id::text) FROM unnest(v_watched) AS w(id);
    END IF;
    IF cardinality(v_parents) > 0 AND p_cause IS NULL THEN
        PERFORM jobq._finish_dependents(v_parents, p_status);
    END IF;
    IF cardinality(v_wake) > 0 THEN
        PERFORM pg_notify('jobq', w.queue) FROM (SELECT DISTINCT u.queue FROM unnest(v_wake) AS u(queue)) AS w;
    END IF;
    RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
END
$$;
COMMENT ON FUNCTION jobq._finish(bigint[], uuid[], text, text, boolean, jsonb[], bigint) IS
    'Deletes live jobs (fenced by lease token, or held by this transaction), counts them, keeps the history and results they need, and updates their dependents.';

CREATE FUNCTION jobq._fold_counters() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Fold the per-statement counter rows into one row per queue and minute;
    -- rows older than a day into one row per queue at -infinity. Each folder
    -- folds the rows it could lock (SKIP LOCKED: concurrent folders split
    -- the rows, never wait, never count one twice, and the next fold merges
    -- what they left); rows committed meanwhile wait for the next. Row locks
    -- and not an advisory lock, which any role could hold to stop folding.
    WITH counted AS (
        SELECT c.ctid AS row_id, c.queue, c.bucket AS was,
               CASE WHEN c.bucket < now() - interval '1 day' THEN '-infinity'::timestamptz ELSE c.bucket END AS bucket
        FROM jobq._counter AS c
        FOR UPDATE SKIP LOCKED
    ), crowded AS (
        SELECT k.queue, k.bucket
        FROM counted AS k
        GROUP BY k.queue, k.bucket
        HAVING count(*) > 1 OR bool_or(k.was <> k.bucket)
    ), gone AS (
        DELETE FROM jobq._counter AS c
        USING counted AS k
        JOIN crowded AS w ON w.queue = k.queue AND w.bucket = k.bucket
        WHERE c.ctid = k.row_id
        RETURNING k.queue, k.bucket, c.completed, c.failed, c.dead
    )
    INSERT INTO jobq._counter (queue, bucket, completed, failed, dead)
    SELECT g.queue, g.bucket, sum(g.completed), sum(g.failed), sum(g.dead)
    FROM gone AS g
    GROUP BY g.queue, g.bucket;
END
$$;
COMMENT ON FUNCTION jobq._fold_counters() IS 'Folds counter rows into one per queue and minute (one per queue past a day).';

CREATE FUNCTION jobq._forget_taken() RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    -- Delete the take/hold bookkeeping of transactions that have ended
    -- (every transaction older than the oldest snapshot's xmin has).
    DELETE FROM jobq._taken AS t WHERE t.xact < pg_snapshot_xmin(pg_current_snapshot())
$$;
COMMENT ON FUNCTION jobq._forget_taken() IS 'Deletes jobq._taken rows of transactions that have ended.';

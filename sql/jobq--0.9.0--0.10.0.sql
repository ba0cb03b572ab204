-- jobq 0.9.0 → 0.10.0: smaller SQL functions, the same behaviour (issue 30, item 4). One line per change:
--   jobq._finish split by idea: new jobq._finish_lean (completed jobs, nothing kept: deleted) and
--     jobq._finish_kept (the general case: archived or deleted with their side rows); _finish chooses and
--     does what follows (jobs named in this transaction, NOTIFY of watched jobs, dependents, wake-ups)
--   new jobq._retry_or_bury: the failed attempt that jobq.fail and jobq.fail_held both record (counter,
--     error history, dead letter or a retry after backoff with jitter), written once
--   jobq._claim: which jobs and leases first (plain path or jobq._pick), then one lease UPDATE (it was two)
--   jobq._pick: each queue's budget (pause, concurrency, rate limit) in new jobq._queue_slots, its candidates
--     (one statement) in new jobq._pick_candidates, the re-check of serial-group heads after the row locks in
--     new jobq._group_heads_only
--   jobq.enqueue_many: its full argument checks (the slow path) in new jobq._check_enqueue_many_args, its
--     job keys' in new jobq._check_job_keys
--   calls name their arguments (p_held => true, not a bare true): jobq._finish's callers (complete,
--     complete_many, complete_held, take, cancel, cancel_jobs, reap, _settle, _finish_dependents) and _claim
--
-- Applied by ALTER EXTENSION jobq UPDATE TO '0.10.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.9.0 is installed.

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
    IF jobq.version() <> '0.9.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.9.0 to 0.10.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.10.0');

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '0.10.0'::text
$$;
COMMENT ON FUNCTION jobq.version() IS 'Installed jobq version (semver text).';

-- the end of a job: split by idea, named arguments
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
    v_queues text[];
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
    -- them. Rows go in id order.
    WITH gone AS (
        DELETE FROM jobq._job AS j
        USING (SELECT u.* FROM unnest(p_ids, p_lease_tokens) AS u(id, lease_token) ORDER BY u.id) AS f
        WHERE j.id = f.id
          AND (f.lease_token IS NULL OR j.lease_token = f.lease_token)
          AND (NOT p_held OR j.status = 'ready')
        RETURNING j.id, j.queue, j.group_key, j.job_key, j.last_error IS NOT NULL AS erred,
                  j.has_children, j.has_parents, j.watched
    )
    SELECT array_agg(g.id), array_agg(g.queue), array_agg(DISTINCT g.queue) FILTER (WHERE g.group_key IS NOT NULL),
           array_agg(g.id) FILTER (WHERE g.job_key IS NOT NULL),
           array_agg(g.queue) FILTER (WHERE g.job_key IS NOT NULL),
           array_agg(g.job_key) FILTER (WHERE g.job_key IS NOT NULL),
           array_agg(g.id) FILTER (WHERE g.erred),
           array_agg(g.id) FILTER (WHERE g.has_children),
           array_agg(g.id) FILTER (WHERE g.has_parents),
           array_agg(g.id) FILTER (WHERE g.watched)
    INTO ids, v_queues, wake, v_keyed_ids, v_keyed_queues, v_keys, v_erred, parents, v_children, watched
    FROM gone AS g;
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
    INSERT INTO jobq._counter (queue, bucket, completed)
    SELECT u.queue, date_trunc('minute', now()), count(*) FROM unnest(v_queues) AS u(queue) GROUP BY u.queue;
    wake := wake || ARRAY(SELECT q.queue FROM jobq._queue AS q
                          WHERE q.queue = ANY (v_queues) AND q.concurrency IS NOT NULL);
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
             result, cancelled_by)
        SELECT g.id, g.queue, g.payload, p_status, g.priority, g.run_at, g.attempts + p_held::integer,
               g.max_attempts, g.job_key, CASE WHEN p_held THEN session_user ELSE g.worker END,
               coalesce(p_error, g.last_error), g.created_at,
               CASE WHEN p_held THEN v_now ELSE g.started_at END,
               v_now, v_now + CASE WHEN p_status <> 'completed' THEN s.dead_retention
                                   WHEN g.result IS NOT NULL THEN greatest(s.retention, s.result_retention)
                                   ELSE s.retention END,
               g.group_key, g.timeout, g.result, p_cause
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
CREATE OR REPLACE FUNCTION jobq._finish(p_ids bigint[], p_lease_tokens uuid[], p_status text, p_error text,
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
        SELECT f.ids, f.wake, f.parents, f.watched INTO v_ids, v_wake, v_parents, v_watched
        FROM jobq._finish_lean(p_ids => p_ids, p_lease_tokens => p_lease_tokens, p_held => p_held) AS f;
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
CREATE OR REPLACE FUNCTION jobq.complete(id bigint, lease_token uuid, result jsonb DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
BEGIN
    -- Acknowledge success of a job still held under lease_token, with its
    -- result (any JSON value; jobq.result() returns it, the job's children
    -- read it with jobq.parent_results()). False (and no change) when the
    -- lease was lost or the id is unknown; JQ003 for a result over the
    -- queue's max_payload_bytes.
    PERFORM jobq._check_lease_args(complete.id, complete.lease_token);
    IF complete.result IS NULL THEN
        RETURN EXISTS (
            SELECT FROM jobq._finish(p_ids => ARRAY[complete.id], p_lease_tokens => ARRAY[complete.lease_token],
                                     p_status => 'completed', p_error => NULL));
    END IF;
    PERFORM jobq._check_results(ARRAY[complete.id], ARRAY[complete.result]);
    RETURN EXISTS (
        SELECT FROM jobq._finish(p_ids => ARRAY[complete.id], p_lease_tokens => ARRAY[complete.lease_token],
                                 p_status => 'completed', p_error => NULL, p_results => ARRAY[complete.result]));
END
$$;
COMMENT ON FUNCTION jobq.complete(bigint, uuid, jsonb) IS
    'Marks a job done (with its result) if still held under lease_token; false when the lease was lost or the id is unknown.';
CREATE OR REPLACE FUNCTION jobq.complete_many(ids bigint[], lease_tokens uuid[], results jsonb[] DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_done integer;
BEGIN
    -- Acknowledge many jobs in one statement; returns how many were still
    -- held under their lease tokens (the others are left alone). results:
    -- one result (or NULL) per job, as in jobq.complete; JQ003 (and nothing
    -- completed) when one is over its queue's max_payload_bytes.
    IF array_ndims(complete_many.ids) > 1 THEN
        RAISE EXCEPTION 'jobq: ids must be a one-dimensional array, got % dimensions %',
                array_ndims(complete_many.ids), array_dims(complete_many.ids)
            USING ERRCODE = 'JQ010', HINT = 'Pass the id and lease_token of each claimed job, as two lists.';
    END IF;
    IF array_ndims(complete_many.lease_tokens) > 1 THEN
        RAISE EXCEPTION 'jobq: lease_tokens must be a one-dimensional array, got % dimensions %',
                array_ndims(complete_many.lease_tokens), array_dims(complete_many.lease_tokens)
            USING ERRCODE = 'JQ010', HINT = 'Pass the id and lease_token of each claimed job, as two lists.';
    END IF;
    IF complete_many.ids IS NULL OR complete_many.lease_tokens IS NULL
       OR cardinality(complete_many.ids) <> cardinality(complete_many.lease_tokens) THEN
        RAISE EXCEPTION 'jobq: ids and lease_tokens must be arrays of the same length'
            USING ERRCODE = 'JQ010', HINT = 'Pass the id and lease_token of each claimed job, in the same order.';
    END IF;
    PERFORM jobq._check_batch(cardinality(complete_many.ids), 'cardinality(ids)', 10000);
    IF array_position(complete_many.ids, NULL) IS NOT NULL
       OR array_position(complete_many.lease_tokens, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: ids and lease_tokens must not contain NULL'
            USING ERRCODE = 'JQ010', HINT = 'Pass the id and lease_token of each claimed job.';
    END IF;
    IF complete_many.results IS NOT NULL THEN
        PERFORM jobq._check_results(complete_many.ids, complete_many.results);
    END IF;
    SELECT count(*) INTO v_done
    FROM jobq._finish(p_ids => complete_many.ids, p_lease_tokens => complete_many.lease_tokens, p_status => 'completed',
                      p_error => NULL, p_results => complete_many.results);
    RETURN v_done;
END
$$;
COMMENT ON FUNCTION jobq.complete_many(bigint[], uuid[], jsonb[]) IS
    'Marks many jobs done in one statement (with their results); returns how many were still held under their lease tokens.';
CREATE OR REPLACE FUNCTION jobq.complete_held(ids bigint[], results jsonb[] DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_done integer;
    v_ids bigint[] := complete_held.ids;
BEGIN
    -- Acknowledge success of jobs this transaction holds (jobq.hold): they
    -- are done when it commits. Returns how many it completed; leased,
    -- finished and unknown ids, and jobs another transaction holds, are left
    -- alone (never waited for). results: each job's result (or NULL), as
    -- in jobq.complete_many.
    IF array_ndims(complete_held.ids) > 1 THEN
        RAISE EXCEPTION 'jobq: ids must be a one-dimensional array, got % dimensions %',
                array_ndims(complete_held.ids), array_dims(complete_held.ids)
            USING ERRCODE = 'JQ010', HINT = 'Pass a list of the ids jobq.hold() returned.';
    END IF;
    IF complete_held.ids IS NULL OR array_position(complete_held.ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: ids must be an array of job ids without NULL'
            USING ERRCODE = 'JQ010', HINT = 'Pass the ids of the jobs jobq.hold() returned.';
    END IF;
    PERFORM jobq._check_batch(cardinality(complete_held.ids), 'cardinality(ids)', 10000);
    IF complete_held.results IS NOT NULL THEN
        PERFORM jobq._check_results(complete_held.ids, complete_held.results);
    END IF;
    IF EXISTS (SELECT FROM jobq._queue_grant AS g WHERE g.privilege = 'consume') THEN
        -- A job of a queue the caller may not consume is left alone, as an unknown id is.
        v_ids := ARRAY(SELECT CASE WHEN jobq._job_allowed(u.id, 'consume') THEN u.id END
                       FROM unnest(complete_held.ids) WITH ORDINALITY AS u(id, ord) ORDER BY u.ord);
    END IF;
    SELECT count(*) INTO v_done
    FROM jobq._finish(p_ids => v_ids, p_lease_tokens => NULL, p_status => 'completed', p_error => NULL,
                      p_held => true, p_results => complete_held.results);
    RETURN v_done;
END
$$;
COMMENT ON FUNCTION jobq.complete_held(bigint[], jsonb[]) IS
    'Marks jobs held by this transaction done (on commit), with their results; returns how many; never waits for another holder.';
CREATE OR REPLACE FUNCTION jobq.take(queue text, n integer DEFAULT 1) RETURNS SETOF jobq.job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
BEGIN
    -- Exactly-once processing for work that only touches this database:
    -- remove up to n ready jobs inside the caller's transaction, without a
    -- lease. Commit and they are done (counted as completed) together with
    -- the caller's writes; roll back, or crash, and they are back,
    -- untouched. (To fail jobs one by one, use hold.) The rows stay locked
    -- (and, for limited queues, the queue's slots held) until then.
    IF NOT jobq._claim_args_ok(ARRAY[take.queue], take.n, NULL, NULL) THEN
        PERFORM jobq._check_queue(take.queue, 'queue');
        PERFORM jobq._check_claim_args(ARRAY[take.queue], take.n, NULL);
    END IF;
    PERFORM jobq._check_queue_privilege(ARRAY[take.queue], 'consume')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'consume' AND take.queue LIKE g.queue_like);
    RETURN QUERY
    WITH held AS (
        SELECT * FROM jobq._lock_ready(take.queue, take.n)
    ), done AS (
        SELECT count(*) FROM jobq._finish(p_ids => ARRAY(SELECT h.id FROM held AS h), p_lease_tokens => NULL,
                                               p_status => 'completed', p_error => NULL, p_held => true)
    )
    SELECT h.* FROM held AS h, done ORDER BY h.priority, h.run_at, h.id;
END
$$;
COMMENT ON FUNCTION jobq.take(text, integer) IS
    'Removes up to n ready jobs inside the caller''s transaction: done on commit, back untouched on rollback.';
CREATE OR REPLACE FUNCTION jobq.cancel(id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Cancel a waiting, ready, scheduled or running job (a running job's
    -- holder then finds its lease lost). Its waiting dependents are
    -- cancelled too (on_parent_failure 'cancel', cancelled_by this job) or
    -- count it as finished ('run'). False for finished and unknown jobs.
    IF cancel.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass a job id.';
    END IF;
    RETURN EXISTS (SELECT FROM jobq._finish(p_ids => ARRAY[cancel.id], p_lease_tokens => NULL, p_status => 'cancelled',
                                                 p_error => 'cancelled by ' || session_user));
END
$$;
COMMENT ON FUNCTION jobq.cancel(bigint) IS
    'Cancels a live job (its holder, if any, loses the lease); false for finished or unknown ids.';
CREATE OR REPLACE FUNCTION jobq.cancel_jobs(queue text, status text DEFAULT NULL, payload_contains jsonb DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_cancelled integer;
BEGIN
    -- Cancel the live jobs of a queue, as jobq.cancel() does one by one:
    -- every one (status NULL), or those ready now, scheduled for later,
    -- running or waiting for parents; only those whose payload contains
    -- payload_contains (@>) when given. Running jobs' holders find their
    -- lease lost; dependents follow as after jobq.cancel(). Returns how many.
    PERFORM jobq._check_queue(cancel_jobs.queue, 'queue');
    IF cancel_jobs.status IS NOT NULL AND cancel_jobs.status NOT IN ('ready', 'scheduled', 'running', 'waiting') THEN
        RAISE EXCEPTION 'jobq: status must be NULL (every live job), ''ready'', ''scheduled'', ''running'' or ''waiting'', got %',
                pg_catalog.quote_literal(pg_catalog.left(cancel_jobs.status, 100))
            USING ERRCODE = 'JQ017', HINT = 'Dead jobs are finished already: remove them with jobq.discard_dead().';
    END IF;
    IF jsonb_typeof(cancel_jobs.payload_contains) <> 'object' THEN
        RAISE EXCEPTION 'jobq: payload_contains must be a JSON object, got %', jsonb_typeof(cancel_jobs.payload_contains)
            USING ERRCODE = 'JQ017', HINT = 'Pass e.g. ''{"customer": 42}''::jsonb: jobs whose payload contains it.';
    END IF;
    SELECT count(*) INTO v_cancelled
    FROM jobq._finish(
        p_ids => ARRAY(SELECT j.id FROM jobq._job AS j
                       WHERE j.queue = cancel_jobs.queue
                         AND CASE cancel_jobs.status
                                 WHEN 'ready' THEN j.status = 'ready' AND j.run_at <= now()
                                 WHEN 'scheduled' THEN j.status = 'ready' AND j.run_at > now()
                                 WHEN 'running' THEN j.status = 'running'
                                 WHEN 'waiting' THEN j.status = 'waiting'
                                 ELSE true END
                         AND (cancel_jobs.payload_contains IS NULL OR j.payload @> cancel_jobs.payload_contains)
                       ORDER BY j.id),
        p_lease_tokens => NULL, p_status => 'cancelled', p_error => 'cancelled by ' || session_user);
    RETURN v_cancelled;
END
$$;
COMMENT ON FUNCTION jobq.cancel_jobs(text, text, jsonb) IS
    'Cancels the live jobs of a queue (optionally only ready, scheduled, running or waiting ones, or those whose payload contains a filter); returns how many.';
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
        PERFORM jobq._finish(p_ids => v_dead, p_lease_tokens => NULL, p_status => 'dead', p_error => NULL);
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
CREATE OR REPLACE FUNCTION jobq._settle(p_children bigint[]) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_cause record;
    v_cancelled bigint[] := '{}';
    v_queues text[];
BEGIN
    -- Act on the gates of waiting jobs (locked by the caller): cancel those
    -- that take a parent's failure as theirs ('cancel') and have a dead or
    -- cancelled parent, recording the root of it (the parent, or the root
    -- that cancelled the parent); release those with no parent left: ready
    -- (scheduled when their own run_at is later), a batch callback with its
    -- members' counts in its payload, and their queues woken. A released job
    -- keeps its gate (its on_parent_failure): a retry after it ran goes
    -- through it again. Returns the ids cancelled here: their own
    -- dependents are the caller's next step.
    FOR v_cause IN
        SELECT c.cause, array_agg(c.job_id ORDER BY c.job_id) AS ids,
               coalesce((SELECT r.status FROM jobq._job_archive AS r WHERE r.id = c.cause), 'dead') AS fate
        FROM (SELECT w.job_id, min(coalesce(a.cancelled_by, a.id)) AS cause
              FROM jobq._job_wait AS w
              JOIN jobq._job_dep AS d ON d.child_id = w.job_id
              JOIN jobq._job_archive AS a ON a.id = d.parent_id AND a.status IN ('dead', 'cancelled')
              WHERE w.job_id = ANY (p_children) AND w.on_parent_failure = 'cancel' AND w.dead + w.cancelled > 0
              GROUP BY w.job_id) AS c
        GROUP BY c.cause
    LOOP
        v_cancelled := v_cancelled || ARRAY(
            SELECT jobq._finish(p_ids => v_cause.ids, p_lease_tokens => NULL, p_status => 'cancelled',
                                p_error => format('cancelled: ancestor job %s %s', v_cause.cause,
                                                  CASE v_cause.fate WHEN 'cancelled' THEN 'was cancelled' ELSE 'is dead' END),
                                p_cause => v_cause.cause));
    END LOOP;
    WITH released AS (
        UPDATE jobq._job AS j
        SET status = 'ready',
            parked = false,
            payload = CASE WHEN w.report
                           THEN j.payload || jsonb_build_object('batch', jsonb_build_object(
                                    'members', w.completed + w.dead + w.cancelled, 'completed', w.completed,
                                    'dead', w.dead, 'cancelled', w.cancelled))
                           ELSE j.payload END
        FROM jobq._job_wait AS w
        WHERE w.job_id = j.id AND j.id = ANY (p_children) AND j.status = 'waiting'
          AND w.parents_left = 0 AND (w.on_parent_failure = 'run' OR w.dead + w.cancelled = 0)
        RETURNING j.id, j.queue
    )
    SELECT array_agg(DISTINCT r.queue) INTO v_queues FROM released AS r;
    PERFORM pg_notify('jobq', q.queue) FROM unnest(v_queues) AS q(queue);
    RETURN v_cancelled;
END
$$;
COMMENT ON FUNCTION jobq._settle(bigint[]) IS
    'Cancels waiting jobs whose parent failed (on_parent_failure cancel) and releases those with no parent left; returns the cancelled ids.';
CREATE OR REPLACE FUNCTION jobq._finish_dependents(p_parents bigint[], p_status text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
SET jit = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_seqscan = off
SET join_collapse_limit = 1
AS $$
DECLARE
    v_doomed bigint[] := '{}';
    v_cause record;
    v_released bigint[];
BEGIN
    -- Jobs p_parents just left the live table as p_status (completed, dead
    -- or cancelled): cancel the descendants their failure dooms, count the
    -- finished jobs in the gates of the waiting children that remain, and
    -- release those with no parent left. The cascade is one pass, linear in
    -- the edges it follows (0.8.0 went level by level, re-planning nothing,
    -- and a chain 3,000 deep took 15 s): every waiting descendant with
    -- on_parent_failure 'cancel' reachable from a failed parent through
    -- such jobs, each cancelled with the lowest root among its failed
    -- ancestors (a failed parent's root: itself, or the root that
    -- cancelled it) as cancelled_by, one jobq._finish per root. The
    -- remaining waiting children of the parents and of the cancelled jobs
    -- ('run' children, and any child of a completed parent) have their
    -- gates updated by outcome in one statement, locked in id order as late
    -- as possible, so that a wide fan-in's completions hold a gate only for
    -- their commit. The gates the cancelled jobs keep are left as they are
    -- (a retry recounts them). Planned at each call (force_custom_plan),
    -- with the tables' sizes of then, on index paths only and joining in
    -- the order written (each step from the jobs found in the last): a
    -- plan cached while a graph was small (or never analyzed) scanned a
    -- whole table at each step, and so does a recursion whose step starts
    -- from the table instead of from the last step's jobs.
    IF p_status <> 'completed' THEN
        FOR v_cause IN
            WITH RECURSIVE doomed (id, root) AS (
                SELECT d.child_id, coalesce(a.cancelled_by, a.id)
                FROM unnest(p_parents) AS p(id)
                JOIN jobq._job_archive AS a ON a.id = p.id
                JOIN jobq._job_dep AS d ON d.parent_id = p.id
                JOIN jobq._job_wait AS w ON w.job_id = d.child_id AND w.on_parent_failure = 'cancel'
                JOIN jobq._job AS j ON j.id = d.child_id AND j.status = 'waiting'
              UNION
                SELECT d.child_id, x.root
                FROM doomed AS x
                JOIN jobq._job_dep AS d ON d.parent_id = x.id
                JOIN jobq._job_wait AS w ON w.job_id = d.child_id AND w.on_parent_failure = 'cancel'
                JOIN jobq._job AS j ON j.id = d.child_id AND j.status = 'waiting'
            )
            SELECT r.root AS cause, array_agg(r.id ORDER BY r.id) AS ids,
                   coalesce((SELECT a.status FROM jobq._job_archive AS a WHERE a.id = r.root), 'dead') AS fate
            FROM (SELECT x.id, min(x.root) AS root FROM doomed AS x GROUP BY x.id) AS r
            GROUP BY r.root
            ORDER BY r.root
        LOOP
            v_doomed := v_doomed || ARRAY(
                SELECT jobq._finish(p_ids => v_cause.ids, p_lease_tokens => NULL, p_status => 'cancelled',
                                    p_error => format('cancelled: ancestor job %s %s', v_cause.cause,
                                                      CASE v_cause.fate WHEN 'cancelled' THEN 'was cancelled' ELSE 'is dead' END),
                                    p_cause => v_cause.cause));
        END LOOP;
    END IF;
    WITH counted AS (
        SELECT d.child_id,
               count(*) FILTER (WHERE f.doomed)::integer AS cancelled_here,
               count(*) FILTER (WHERE NOT f.doomed)::integer AS finished_here
        FROM (SELECT u.id, false AS doomed FROM unnest(p_parents) AS u(id)
              UNION ALL
              SELECT u.id, true FROM unnest(v_doomed) AS u(id)) AS f
        JOIN jobq._job_dep AS d ON d.parent_id = f.id
        GROUP BY d.child_id
    ), locked AS MATERIALIZED (
        SELECT w.job_id, c.cancelled_here, c.finished_here
        FROM counted AS c
        JOIN jobq._job_wait AS w ON w.job_id = c.child_id
        JOIN jobq._job AS j ON j.id = c.child_id AND j.status = 'waiting'
        ORDER BY w.job_id
        FOR UPDATE OF w
    ), updated AS (
        UPDATE jobq._job_wait AS w
        SET parents_left = w.parents_left - l.cancelled_here - l.finished_here,
            completed = w.completed + CASE WHEN p_status = 'completed' THEN l.finished_here ELSE 0 END,
            dead = w.dead + CASE WHEN p_status = 'dead' THEN l.finished_here ELSE 0 END,
            cancelled = w.cancelled + l.cancelled_here
                        + CASE WHEN p_status = 'cancelled' THEN l.finished_here ELSE 0 END
        FROM locked AS l
        WHERE w.job_id = l.job_id
        RETURNING w.job_id, w.parents_left = 0 OR (w.on_parent_failure = 'cancel' AND w.dead + w.cancelled > 0)
                            AS settles
    )
    SELECT coalesce(array_agg(u.job_id ORDER BY u.job_id) FILTER (WHERE u.settles), '{}')
    INTO v_released
    FROM updated AS u;
    IF cardinality(v_released) > 0 THEN
        -- Released here; a 'cancel' child found with a failed parent (one
        -- not waiting when the cascade looked) is cancelled, and its own
        -- dependents follow.
        v_doomed := jobq._settle(v_released);
        IF cardinality(v_doomed) > 0 THEN
            PERFORM jobq._finish_dependents(v_doomed, 'cancelled');
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._finish_dependents(bigint[], text) IS
    'Cancels the descendants that finished parents'' failure dooms (one pass), counts the finished jobs in the remaining waiting children''s gates, and releases those with no parent left.';

-- a failed attempt: one retry-or-bury step
CREATE FUNCTION jobq._retry_or_bury(p_job jobq._job, p_attempt integer, p_error text, p_worker text,
                                    p_retry_at timestamptz, p_held boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
BEGIN
    -- The failed attempt p_attempt of p_job, which the caller has locked
    -- (jobq.fail: under its lease; jobq.fail_held: held by this transaction,
    -- p_held, and this is its attempt): counted, its error (p_error, already
    -- bounded) kept in the job's history under p_worker; then dead letter
    -- when that was its last attempt, else ready again after exponential
    -- backoff with jitter (or at p_retry_at), unleased, and its queue's
    -- workers woken (a freed concurrency slot or group, or a retry already due).
    INSERT INTO jobq._counter (queue, bucket, failed) VALUES (p_job.queue, date_trunc('minute', now()), 1);
    PERFORM jobq._record_errors(p_ids => ARRAY[p_job.id], p_attempts => ARRAY[p_attempt],
                                p_errors => ARRAY[p_error], p_workers => ARRAY[p_worker]);
    IF p_attempt >= p_job.max_attempts THEN
        PERFORM jobq._finish(p_ids => ARRAY[p_job.id], p_lease_tokens => ARRAY[p_job.lease_token],
                             p_status => 'dead', p_error => p_error, p_held => p_held);
        RETURN;
    END IF;
    v_settings := jobq._settings(p_job.queue);
    UPDATE jobq._job AS j
    SET status = 'ready',
        parked = false,
        attempts = p_attempt,
        run_at = coalesce(p_retry_at,
                          now() + jobq._backoff_delay(p_attempt, v_settings.backoff_base,
                                                      v_settings.backoff_cap, v_settings.backoff_jitter,
                                                      random())),
        lease_token = NULL,
        lease_expires_at = NULL,
        heartbeat_at = NULL,
        last_error = p_error,
        worker = p_worker,
        started_at = CASE WHEN p_held THEN clock_timestamp() ELSE j.started_at END
    WHERE j.id = p_job.id;
    PERFORM pg_notify('jobq', p_job.queue);
END
$$;
COMMENT ON FUNCTION jobq._retry_or_bury(jobq._job, integer, text, text, timestamptz, boolean) IS
    'A failed attempt of a locked job, for fail and fail_held: counted, its error kept, then dead letter or a retry after backoff.';
CREATE OR REPLACE FUNCTION jobq.fail(id bigint, error text, lease_token uuid, retry_at timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_job jobq._job;
    v_error text := jobq._error_text(fail.error);
BEGIN
    -- Record a failed attempt of a job held under lease_token: retry after
    -- exponential backoff with jitter (or at retry_at), or dead-letter it when
    -- its attempts are used up. The error joins the job's error history
    -- (jobq.job_errors). False (and no change) when the lease was lost.
    PERFORM jobq._check_lease_args(fail.id, fail.lease_token);
    PERFORM jobq._check_error(fail.error);
    IF fail.retry_at IS NOT NULL THEN
        PERFORM jobq._check_time(fail.retry_at, 'retry_at');
    END IF;

    SELECT * INTO v_job FROM jobq._job AS j
    WHERE j.id = fail.id AND j.lease_token = fail.lease_token
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM jobq._retry_or_bury(p_job => v_job, p_attempt => v_job.attempts, p_error => v_error,
                                p_worker => v_job.worker, p_retry_at => fail.retry_at, p_held => false);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.fail(bigint, text, uuid, timestamptz) IS
    'Records a failure: retries after backoff (or at retry_at) or dead-letters when out of attempts; false when the lease was lost.';
CREATE OR REPLACE FUNCTION jobq.fail_held(id bigint, error text, retry_at timestamptz DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_job jobq._job;
    v_error text := jobq._error_text(fail_held.error);
BEGIN
    -- Record a failed attempt of a job this transaction holds (jobq.hold):
    -- it retries after backoff (or at retry_at), or goes to dead letter when
    -- its attempts are used up, as jobq.fail() does for a leased job (the
    -- error joins the job's error history, worker session_user). False
    -- (and no change) when the job is not ready and due (hold took only
    -- those; a job failed once already waits for its retry), or another
    -- transaction holds it.
    IF fail_held.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL'
            USING ERRCODE = 'JQ010', HINT = 'Pass the id of a job jobq.hold() returned.';
    END IF;
    PERFORM jobq._check_error(fail_held.error);
    IF fail_held.retry_at IS NOT NULL THEN
        PERFORM jobq._check_time(fail_held.retry_at, 'retry_at');
    END IF;
    IF NOT jobq._job_allowed(fail_held.id, 'consume') THEN
        RETURN false;   -- a job of a queue the caller may not consume: as if another transaction held it
    END IF;
    BEGIN
        SELECT * INTO v_job FROM jobq._job AS j
        WHERE j.id = fail_held.id AND j.status = 'ready' AND j.run_at <= now()
        FOR UPDATE NOWAIT;
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;
    END;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM jobq._retry_or_bury(p_job => v_job, p_attempt => v_job.attempts + 1, p_error => v_error,
                                p_worker => session_user, p_retry_at => fail_held.retry_at, p_held => true);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.fail_held(bigint, text, timestamptz) IS
    'Records a failed attempt of a job held by this transaction (backoff or dead letter); false when not held.';

-- the claim: one lease UPDATE
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
    v_parked boolean[];
    v_park text[];
    v_now timestamptz;
BEGIN
    -- What both claim() overloads do once their arguments are checked:
    -- lease up to p_n ready jobs across p_queues, most urgent first
    -- (priority, run_at, id), each under its queue's lease unless given;
    -- paused queues, concurrency and rate limits and serial groups honoured.
    -- No sort and no bitmap scan (the SET clauses): whatever the table's
    -- statistics say (never analyzed, analyzed while empty), the candidates
    -- come from the claim index in its order, and reading stops after p_n.
    -- First which jobs (locked), under which lease, parked or not; then the
    -- one lease UPDATE.
    v_now := clock_timestamp();
    v_plain := jobq._plain_leases(p_queues, p_lease);
    IF v_plain.names IS NOT NULL THEN
        -- Plain queues: one statement picks (an index scan per queue). The
        -- lease writes no indexed column: a HOT update on the row's own
        -- page; the row stays in the claim index, and claims skip it by its
        -- status. On a queue crowded with older leases
        -- (jobq._crowded_queues) the lease parks the row instead, so that
        -- leases do not pile up ahead of every later claim.
        v_park := jobq._crowded_queues(p_names => v_plain.names, p_now => v_now);
        SELECT array_agg(c.id), array_agg(v_plain.leases[array_position(v_plain.names, c.queue)]),
               array_agg(c.queue = ANY (v_park))
        INTO v_ids, v_leases, v_parked
        FROM (SELECT c.id, c.queue
              FROM unnest(v_plain.names) AS q(name),
                   LATERAL (SELECT p.id, p.queue, p.priority, p.run_at
                            FROM jobq._job AS p
                            WHERE p.queue = q.name AND NOT p.parked AND p.status = 'ready'
                              AND p.run_at <= now() AND p.group_key IS NULL
                            ORDER BY p.priority, p.run_at, p.id
                            LIMIT p_n
                            FOR UPDATE SKIP LOCKED) AS c
              ORDER BY c.priority, c.run_at, c.id
              LIMIT p_n) AS c;
    ELSE
        -- Limits, pause or serial groups: jobq._pick counts and locks. These
        -- leases are parked at once: limited queues count their running jobs
        -- by the parked index.
        SELECT array_agg(p.id), array_agg(p.lease), array_agg(true) INTO v_ids, v_leases, v_parked
        FROM jobq._pick(p_queues => p_queues, p_n => p_n, p_lease => p_lease, p_now => v_now) AS p;
    END IF;
    RETURN QUERY
    WITH leased AS (
        UPDATE jobq._job AS j
        SET status = 'running',
            parked = p.parked,
            attempts = j.attempts + 1,
            lease_token = gen_random_uuid(),
            lease_expires_at = v_now + p.lease,
            worker = p_worker,
            started_at = v_now
        FROM unnest(v_ids, v_leases, v_parked) AS p(id, lease, parked)
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

-- the full claim path: a queue's budget and the group-head re-check apart
CREATE FUNCTION jobq._queue_slots(p_queue text, p_n integer, p_now timestamptz,
                                  OUT slots integer, OUT lease interval, OUT rated boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_settings jobq._queue := jobq._settings(p_queue);
BEGIN
    -- How many of p_n jobs jobq._pick may start now in queue p_queue
    -- (slots), under which lease setting, and whether the queue is rate
    -- limited (rated: the caller records the starts at p_now). None when
    -- paused, or when another claimer is counting this queue's slots: a
    -- limited queue's slots are counted under a row lock on its own
    -- jobq._queue row, taken with SKIP LOCKED (a busy queue yields no jobs,
    -- never a wait, and a crashed claimer's lock vanishes with its
    -- transaction; only jobq's roles can lock that row, where any role can
    -- take an advisory lock); each count runs in a statement that starts
    -- after the lock, so it sees every claim that committed before. Jobs
    -- taken earlier in this transaction (take, hold) count as running.
    slots := p_n;
    lease := v_settings.lease;
    rated := v_settings.rate_limit IS NOT NULL;
    IF v_settings.paused THEN
        slots := 0;
    ELSIF v_settings.concurrency IS NOT NULL OR v_settings.rate_limit IS NOT NULL THEN
        PERFORM FROM jobq._queue AS q WHERE q.queue = p_queue FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            slots := 0;   -- another claimer is counting this queue's slots right now
        END IF;
    END IF;
    IF slots > 0 AND v_settings.concurrency IS NOT NULL THEN
        SELECT least(slots, v_settings.concurrency - count(*) - jobq._taken_in_transaction(p_queue))::integer
        INTO slots
        FROM jobq._job AS j
        WHERE j.queue = p_queue AND j.parked AND j.status = 'running';
    END IF;
    IF slots > 0 AND v_settings.rate_limit IS NOT NULL THEN
        DELETE FROM jobq._rate_start AS r
        WHERE r.queue = p_queue AND r.started_at <= p_now - v_settings.rate_interval;
        SELECT least(slots, v_settings.rate_limit - coalesce(sum(r.n), 0))::integer INTO slots
        FROM jobq._rate_start AS r
        WHERE r.queue = p_queue AND r.started_at > p_now - v_settings.rate_interval;
    ELSE
        rated := false;
    END IF;
    slots := greatest(slots, 0);
END
$$;
COMMENT ON FUNCTION jobq._queue_slots(text, integer, timestamptz) IS
    'How many jobs jobq._pick may start now in a queue (pause, concurrency, rate limit), its lease, whether rate limited.';
CREATE FUNCTION jobq._pick_candidates(p_names text[], p_slots integer[], p_leases interval[], p_n integer,
                                       OUT ids bigint[], OUT leases interval[], OUT queues text[],
                                       OUT grouped boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
BEGIN
    -- jobq._pick's candidates, row-locked (SKIP LOCKED): up to p_n jobs
    -- across the queues p_names, at most p_slots[i] of queue i, most urgent
    -- first (priority, run_at, id), with each queue's lease (p_leases), and
    -- whether any belongs to a serial group (the caller re-checks those
    -- after the locks: jobq._group_heads_only). Per queue, its most urgent
    -- unlocked ready rows (one index scan each); a serial-group job only
    -- when it heads its group's due members and none runs (its row lock
    -- makes this transaction the group's only claimer of it). The group-head
    -- test is written here and in jobq._group_heads_only: inline, the
    -- planner runs it as an index probe per candidate; a helper function
    -- would cost a call per candidate row.
    SELECT array_agg(c.id ORDER BY c.priority, c.run_at, c.id),
           array_agg(c.lease ORDER BY c.priority, c.run_at, c.id),
           array_agg(c.queue ORDER BY c.priority, c.run_at, c.id),
           coalesce(bool_or(c.grouped), false)
    INTO ids, leases, queues, grouped
    FROM (
        SELECT c.id, c.priority, c.run_at, c.grouped, q.name AS queue, q.lease
        FROM unnest(p_names, p_slots, p_leases) AS q(name, slots, lease),
             LATERAL (
                 SELECT j.id, j.priority, j.run_at, j.group_key IS NOT NULL AS grouped
                 FROM jobq._job AS j
                 WHERE j.queue = q.name AND NOT j.parked AND j.status = 'ready' AND j.run_at <= now()
                   AND (j.group_key IS NULL
                        OR NOT EXISTS (SELECT FROM jobq._job AS g
                                       WHERE g.queue = j.queue AND g.group_key = j.group_key AND g.id <> j.id
                                         AND (g.status = 'running'
                                              OR (g.id < j.id AND NOT (g.status = 'ready' AND g.run_at > now()
                                                                       AND g.started_at IS NULL)))))
                 ORDER BY j.priority, j.run_at, j.id
                 LIMIT q.slots
                 FOR UPDATE SKIP LOCKED
             ) AS c
        WHERE q.slots > 0
        ORDER BY c.priority, c.run_at, c.id
        LIMIT p_n
    ) AS c;
END
$$;
COMMENT ON FUNCTION jobq._pick_candidates(text[], integer[], interval[], integer) IS
    'jobq._pick''s candidates: up to n ready jobs across queues within each queue''s slots, most urgent first, row-locked.';
CREATE FUNCTION jobq._group_heads_only(p_ids bigint[], p_leases interval[], p_queues text[],
                                       OUT ids bigint[], OUT leases interval[], OUT queues text[])
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
BEGIN
    -- Of the jobs jobq._pick chose and row-locked (p_ids, with their leases
    -- and queues, in claim order), those that still head their serial group
    -- (or have none), checked again with a snapshot taken after the row
    -- locks: a claim of the same group that committed meanwhile is now
    -- visible. A job that goes ahead of older members not due yet also locks
    -- the group's oldest one (jobq._lock_group_head): every claim of the
    -- group locks that same row.
    SELECT array_agg(u.id ORDER BY u.ord), array_agg(u.lease ORDER BY u.ord), array_agg(u.queue ORDER BY u.ord)
    INTO ids, leases, queues
    FROM unnest(p_ids, p_leases, p_queues) WITH ORDINALITY AS u(id, lease, queue, ord)
    JOIN jobq._job AS j ON j.id = u.id
    WHERE j.group_key IS NULL
       OR NOT EXISTS (SELECT FROM jobq._job AS g
                      WHERE g.queue = j.queue AND g.group_key = j.group_key AND g.id <> j.id
                        AND (g.status = 'running'
                             OR (g.id < j.id AND NOT (g.status = 'ready' AND g.run_at > now()
                                                      AND g.started_at IS NULL))));
    SELECT array_agg(u.id ORDER BY u.ord), array_agg(u.lease ORDER BY u.ord), array_agg(u.queue ORDER BY u.ord)
    INTO ids, leases, queues
    FROM unnest(ids, leases, queues) WITH ORDINALITY AS u(id, lease, queue, ord)
    JOIN jobq._job AS j ON j.id = u.id
    WHERE j.group_key IS NULL OR jobq._lock_group_head(j.queue, j.group_key, j.id);
END
$$;
COMMENT ON FUNCTION jobq._group_heads_only(bigint[], interval[], text[]) IS
    'Of the jobs jobq._pick locked, those that still head their serial group (re-checked after the locks).';
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
    v_slots record;
    v_now timestamptz := p_now;   -- the start time the rate limit counts (the claim's started_at)
    v_names text[] := '{}';
    v_leases interval[] := '{}';
    v_allow integer[] := '{}';
    v_rated text[] := '{}';
    v_ids bigint[];
    v_grouped boolean;
BEGIN
    -- The full claim path. Choose (and row-lock) up to p_n ready jobs across
    -- p_queues, most urgent first, that may start now: the queue is not
    -- paused, has a free concurrency slot and rate budget, and the job heads
    -- its serial group. Each queue's budget: jobq._queue_slots. Group heads
    -- are row-locked (SKIP LOCKED) and re-checked after the locks
    -- (jobq._group_heads_only). A group's order is among its due jobs: a member scheduled for
    -- later that never started does not hold back the members after it (a
    -- retry waiting for its backoff, a snoozed or a waiting member does),
    -- and one that goes ahead also locks the group's oldest member
    -- (jobq._lock_group_head), so that no two members ever run at once. The
    -- jobs this path leases are parked, so the count of a queue's
    -- running jobs is an index scan (waiting jobs are parked too, and
    -- skipped). Records the starts of rate-limited queues at p_now, which
    -- the caller also stamps on the jobs as started_at. Plans pinned as
    -- jobq._claim's (no sort, no bitmap scan of the backlog).
    PERFORM jobq._check_claim_args(p_queues, p_n, p_lease);
    FOR v_queue IN SELECT DISTINCT ON (u.name) u.name FROM unnest(p_queues) WITH ORDINALITY AS u(name, ord)
                   ORDER BY u.name, u.ord LOOP
        v_slots := jobq._queue_slots(p_queue => v_queue, p_n => p_n, p_now => v_now);
        IF v_slots.rated THEN
            v_rated := v_rated || v_queue;
        END IF;
        v_names := v_names || v_queue;
        v_leases := v_leases || coalesce(p_lease, v_slots.lease);
        v_allow := v_allow || v_slots.slots;
    END LOOP;

    SELECT c.ids, c.leases, c.queues, c.grouped INTO v_ids, v_leases, v_names, v_grouped
    FROM jobq._pick_candidates(p_names => v_names, p_slots => v_allow, p_leases => v_leases, p_n => p_n) AS c;

    IF v_grouped THEN
        SELECT g.ids, g.leases, g.queues INTO v_ids, v_leases, v_names
        FROM jobq._group_heads_only(p_ids => v_ids, p_leases => v_leases, p_queues => v_names) AS g;
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

-- enqueue_many: its checks apart
CREATE FUNCTION jobq._check_enqueue_many_args(
    p_queue text, p_payloads jsonb[], p_run_at timestamptz, p_priority integer, p_max_attempts integer,
    p_job_keys text[], p_group_key text, p_timeout interval, p_unique_for interval, p_depends_on bigint[],
    p_on_parent_failure text
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise the JQ error of the first bad argument of jobq.enqueue_many, all
    -- but the payloads' elements and the job keys (checked where they are
    -- used): the checks that name the bad argument, which enqueue_many runs
    -- only when its fast check (jobq._enqueue_args_ok and the rest of its
    -- one expression) says no.
    PERFORM jobq._check_queue(p_queue, 'queue');
    IF p_payloads IS NULL THEN
        RAISE EXCEPTION 'jobq: payloads must not be NULL'
            USING ERRCODE = 'JQ002', HINT = 'Pass an array of JSON objects, e.g. ARRAY[''{"a":1}'']::jsonb[].';
    END IF;
    IF array_ndims(p_payloads) > 1 THEN
        RAISE EXCEPTION 'jobq: payloads must be a one-dimensional array, got % dimensions %',
                array_ndims(p_payloads), array_dims(p_payloads)
            USING ERRCODE = 'JQ002',
                  HINT = 'Pass a list of JSON objects, e.g. ARRAY[''{"a":1}'', ''{"a":2}'']::jsonb[].';
    END IF;
    PERFORM jobq._check_batch(cardinality(p_payloads), 'cardinality(payloads)', 100000);
    PERFORM jobq._check_time(p_run_at, 'run_at');
    PERFORM jobq._check_job_options(p_priority, p_max_attempts);
    PERFORM jobq._check_job_key(p_group_key, 'group_key');
    PERFORM jobq._check_interval(p_timeout, 'timeout', interval '1 second', interval '1 day');
    PERFORM jobq._check_unique_for(p_unique_for, p_job_keys IS NOT NULL, 'job_keys');
    PERFORM jobq._check_dependencies(coalesce(p_depends_on, '{}'), 'depends_on', p_on_parent_failure);
END
$$;
COMMENT ON FUNCTION jobq._check_enqueue_many_args(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text) IS
    'Raises the JQ error of the first bad argument of enqueue_many (but payload elements and job keys).';
CREATE FUNCTION jobq._check_job_keys(p_job_keys text[], p_n integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_item record;
BEGIN
    -- Raise JQ009 unless p_job_keys is a list of p_n keys (or NULLs), each
    -- NULL or 1 to 512 characters; a bad key is named by its own subscript
    -- (arrays may start at another index than 1, e.g. '[0:1]={...}').
    IF array_ndims(p_job_keys) > 1 THEN
        RAISE EXCEPTION 'jobq: job_keys must be a one-dimensional array, got % dimensions %',
                array_ndims(p_job_keys), array_dims(p_job_keys)
            USING ERRCODE = 'JQ009', HINT = 'Pass a list of keys (or NULLs), one per payload.';
    END IF;
    IF cardinality(p_job_keys) <> p_n THEN
        RAISE EXCEPTION 'jobq: job_keys has % elements but payloads has %', cardinality(p_job_keys), p_n
            USING ERRCODE = 'JQ009', HINT = 'Pass one key (or NULL) per payload, or job_keys => NULL.';
    END IF;
    FOR v_item IN SELECT x.job_key, x.ord FROM unnest(p_job_keys) WITH ORDINALITY AS x(job_key, ord) LOOP
        PERFORM jobq._check_job_key(v_item.job_key, format('job_keys[%s]', array_lower(p_job_keys, 1) + v_item.ord - 1));
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq._check_job_keys(text[], integer) IS
    'Raises JQ009 for job_keys that are not one key (or NULL) per payload, each NULL or 1 to 512 characters.';
CREATE OR REPLACE FUNCTION jobq.enqueue_many(
    queue text,
    payloads jsonb[],
    run_at timestamptz DEFAULT pg_catalog.now(),
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL,
    job_keys text[] DEFAULT NULL,
    group_key text DEFAULT NULL,
    timeout interval DEFAULT NULL,
    unique_for interval DEFAULT NULL,
    depends_on bigint[] DEFAULT NULL,
    on_parent_failure text DEFAULT 'cancel'
) RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
    v_bad record;
    v_item record;
    v_n integer := coalesce(cardinality(enqueue_many.payloads), -1);
    v_ids bigint[] := '{}';
    v_waiting boolean := coalesce(cardinality(enqueue_many.depends_on), 0) > 0;
BEGIN
    -- Add many jobs to one queue in one statement; returns one id per
    -- payload, in payload order, and wakes the queue's workers once. With
    -- group_key, they join that serial group in payload order. timeout,
    -- unique_for, depends_on and on_parent_failure apply to every job, as in
    -- jobq.enqueue (unique_for to those with a key): with depends_on, every
    -- job waits for the same parents.
    IF NOT (jobq._enqueue_args_ok(enqueue_many.queue, enqueue_many.run_at, enqueue_many.priority,
                                  enqueue_many.max_attempts, NULL, enqueue_many.group_key)
            AND v_n BETWEEN 0 AND 100000 AND coalesce(array_ndims(enqueue_many.payloads), 1) = 1
            AND enqueue_many.timeout IS NULL AND enqueue_many.unique_for IS NULL
            AND enqueue_many.depends_on IS NULL AND enqueue_many.on_parent_failure IS NOT DISTINCT FROM 'cancel') THEN
        PERFORM jobq._check_enqueue_many_args(
            p_queue => enqueue_many.queue, p_payloads => enqueue_many.payloads, p_run_at => enqueue_many.run_at,
            p_priority => enqueue_many.priority, p_max_attempts => enqueue_many.max_attempts,
            p_job_keys => enqueue_many.job_keys, p_group_key => enqueue_many.group_key,
            p_timeout => enqueue_many.timeout, p_unique_for => enqueue_many.unique_for,
            p_depends_on => enqueue_many.depends_on, p_on_parent_failure => enqueue_many.on_parent_failure);
    END IF;
    v_settings := jobq._settings(enqueue_many.queue);
    PERFORM jobq._check_queue_privilege(ARRAY[enqueue_many.queue], 'produce')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'produce' AND enqueue_many.queue LIKE g.queue_like);

    SELECT p.payload, p.ord INTO v_bad
    FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, ord)
    WHERE p.payload IS NULL OR jsonb_typeof(p.payload) <> 'object'
       OR pg_column_size(p.payload) > v_settings.max_payload_bytes
    ORDER BY p.ord LIMIT 1;
    IF FOUND THEN
        PERFORM jobq._check_payload(v_bad.payload,  -- named by its own subscript
                                    format('payloads[%s]', array_lower(enqueue_many.payloads, 1) + v_bad.ord - 1),
                                    v_settings.max_payload_bytes);
    END IF;

    IF v_waiting THEN
        PERFORM jobq._check_readable_jobs(enqueue_many.depends_on, 'depends_on');
        PERFORM jobq._check_parents_issued(enqueue_many.depends_on, 'depends_on');
    END IF;
    IF enqueue_many.job_keys IS NULL AND NOT v_waiting THEN
        -- No keys: one INSERT. Identity values follow the ORDER BY, so
        -- sorting the returned ids gives payload order.
        RETURN QUERY
        WITH ins AS (
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, group_key, timeout)
            SELECT enqueue_many.queue, p.payload, enqueue_many.run_at, enqueue_many.priority,
                   coalesce(enqueue_many.max_attempts, v_settings.max_attempts), enqueue_many.group_key,
                   coalesce(enqueue_many.timeout, v_settings.timeout)
            FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, ord)
            ORDER BY p.ord
            RETURNING id
        )
        SELECT ins.id FROM ins ORDER BY ins.id;
        PERFORM pg_notify('jobq', enqueue_many.queue);
        RETURN;
    END IF;
    IF enqueue_many.job_keys IS NULL THEN
        -- No keys, with parents: one INSERT of waiting jobs, then their links.
        WITH ins AS (
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, group_key, timeout,
                                   status, parked, has_parents)
            SELECT enqueue_many.queue, p.payload, enqueue_many.run_at, enqueue_many.priority,
                   coalesce(enqueue_many.max_attempts, v_settings.max_attempts), enqueue_many.group_key,
                   coalesce(enqueue_many.timeout, v_settings.timeout), 'waiting', true, true
            FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, ord)
            ORDER BY p.ord
            RETURNING id
        )
        SELECT coalesce(array_agg(ins.id ORDER BY ins.id), '{}') INTO v_ids FROM ins;
        PERFORM jobq._attach(v_ids, enqueue_many.depends_on, enqueue_many.on_parent_failure, false);
        RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
        RETURN;
    END IF;

    PERFORM jobq._check_job_keys(p_job_keys => enqueue_many.job_keys, p_n => v_n);
    FOR v_item IN
        SELECT x.payload, x.job_key
        FROM unnest(enqueue_many.payloads, enqueue_many.job_keys) WITH ORDINALITY AS x(payload, job_key, ord)
        ORDER BY x.ord
    LOOP
        v_ids := v_ids || jobq._insert_job(enqueue_many.queue, v_item.payload, enqueue_many.run_at,
                                           enqueue_many.priority,
                                           coalesce(enqueue_many.max_attempts, v_settings.max_attempts),
                                           v_item.job_key, enqueue_many.group_key,
                                           coalesce(enqueue_many.timeout, v_settings.timeout),
                                           enqueue_many.unique_for, v_waiting);
    END LOOP;
    IF v_waiting THEN
        PERFORM jobq._attach(v_ids, enqueue_many.depends_on, enqueue_many.on_parent_failure, false);
    END IF;
    RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
END
$$;
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text) IS
    'Adds one job per payload in one call; returns their ids in payload order (existing ids for job_keys already held); depends_on makes every one wait for those jobs.';

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

-- jobq 0.8.0 → 0.9.0: a producer's open transaction no longer freezes the jobs it names. One line per change:
--   workflows, watch and cascades (issue 25, items 1-3):
--   * new jobq._at_commit (unlogged) and its deferred constraint trigger running new
--     jobq._settle_at_commit(): jobs named by depends_on, enqueue_callback's members and watch() are
--     flagged (has_children, watched) and their waiting children's gates recounted when the naming
--     transaction commits, not locked from the call until then
--   * jobq._lock_parents() dropped; new jobq._check_parents_issued() does its JQ019 check alone;
--     enqueue, enqueue_many, enqueue_callback, _attach and watch call the new pair
--   plans that do not depend on statistics, costs that do not grow with the backlog (issue 24):
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

-- workflows, watch and cascades (issue 25, items 1-3)
CREATE UNLOGGED TABLE jobq._at_commit (
    xact      xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
    parents   bigint[] NOT NULL DEFAULT '{}',
    children  bigint[] NOT NULL DEFAULT '{}',
    watched   bigint[] NOT NULL DEFAULT '{}'
) WITH (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE jobq._at_commit IS
    'Jobs named by this transaction (parents, waiting children, watched), settled at its commit. Private.';
CREATE INDEX _at_commit_xact_idx ON jobq._at_commit (xact);
REVOKE ALL ON jobq._at_commit FROM PUBLIC;
GRANT SELECT ON jobq._at_commit TO jobq_admin;

-- workflows, watch and cascades (issue 25, items 1-3)
DROP FUNCTION jobq._lock_parents(bigint[], text);
CREATE FUNCTION jobq._check_parents_issued(p_parents bigint[], p_arg text) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_last bigint;
    v_unknown bigint;
BEGIN
    -- Raise JQ019 when p_parents (validated by _check_dependencies) names an
    -- id jobq never issued. Reads the id sequence only: it locks no job, so
    -- naming a job never holds up its claim, heartbeat or acknowledgement.
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END INTO v_last FROM jobq._job_id_seq AS s;
    SELECT u.id INTO v_unknown
    FROM unnest(p_parents) AS u(id)
    WHERE u.id NOT BETWEEN 1 AND v_last
    ORDER BY u.id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'jobq: % names job %, which does not exist', p_arg, v_unknown
            USING ERRCODE = 'JQ019', HINT = 'Pass ids that jobq.enqueue() returned.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_parents_issued(bigint[], text) IS
    'Raises JQ019 when a depends_on/members id was never issued by jobq; locks nothing.';
CREATE OR REPLACE FUNCTION jobq._attach(p_children bigint[], p_parents bigint[], p_on_parent_failure text, p_report boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_new bigint[];
    v_waiting bigint[];
BEGIN
    -- Link jobs just enqueued as waiting (jobq._insert_job with p_waiting)
    -- to p_parents (ids checked by jobq._check_parents_issued): edges, a
    -- gate counting the parents' states as this statement sees them, then
    -- cancel or release at once what needs no wait. Ids that came back for
    -- a held job_key (an existing job) are left as they are: only waiting
    -- jobs without a gate are new. No parent is locked or written here:
    -- those still waiting are handed to jobq._settle_at_commit, which flags
    -- their parents and counts their gates again when this transaction
    -- commits, so a parent that finishes meanwhile is never missed and this
    -- transaction never holds up a worker (see that function).
    v_new := ARRAY(SELECT j.id FROM jobq._job AS j
                   WHERE j.id = ANY (p_children) AND j.status = 'waiting'
                     AND NOT EXISTS (SELECT FROM jobq._job_wait AS w WHERE w.job_id = j.id)
                   ORDER BY j.id);
    IF cardinality(v_new) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO jobq._job_dep (parent_id, child_id)
    SELECT p.id, c.id FROM unnest(p_parents) AS p(id) CROSS JOIN unnest(v_new) AS c(id);
    INSERT INTO jobq._job_wait (job_id, parents_left, on_parent_failure, report)
    SELECT c.id, 0, p_on_parent_failure, p_report FROM unnest(v_new) AS c(id);
    PERFORM jobq._gate_recount(v_new);
    PERFORM jobq._settle(v_new);
    v_waiting := ARRAY(SELECT j.id FROM jobq._job AS j
                       WHERE j.id = ANY (v_new) AND j.status = 'waiting'
                       ORDER BY j.id);
    IF cardinality(v_waiting) > 0 THEN
        INSERT INTO jobq._at_commit (parents, children) VALUES (p_parents, v_waiting);
        PERFORM set_config('jobq.named_jobs', 'on', true);   -- for jobq._finish in this transaction
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._attach(bigint[], bigint[], text, boolean) IS
    'Links newly enqueued waiting jobs to their parents (edges, gates), settles what need not wait, and leaves the rest to the commit.';
CREATE FUNCTION jobq._settle_at_commit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_parents bigint[];
    v_children bigint[];
    v_watched bigint[];
    v_cancelled bigint[];
BEGIN
    -- What naming a job (depends_on, members, watch) needs from that job,
    -- done when the naming transaction commits: jobq._at_commit's deferred
    -- constraint trigger runs this at COMMIT, before the commit itself. The
    -- first run takes every row of this transaction (later runs find none).
    -- In id order, the named jobs still live are key-share-locked and
    -- flagged: has_children for parents, watched for watched jobs. From
    -- then until the commit ends (a moment), a finishing DELETE of one of
    -- them waits and then sees the flag and the committed edges; one that
    -- finished before is no longer live here. So the waiting children's
    -- gates are counted again now, in statements that start after the
    -- locks: a parent that finished since the enqueue is counted finished,
    -- and the children it released or cancelled are settled (cancelled
    -- ones' own dependents too). A watched job that finished since watch()
    -- saw it live is notified from here. Nothing is locked before the
    -- commit, so an open producer transaction never holds up a claim,
    -- heartbeat or acknowledgement of the jobs it names (0.8.0 locked them
    -- at the enqueue, until the commit). Locks go in id order, as
    -- jobq._finish deletes: no deadlock with a completion.
    WITH mine AS (
        DELETE FROM jobq._at_commit AS c WHERE c.xact = pg_current_xact_id()
        RETURNING c.parents, c.children, c.watched
    )
    SELECT ARRAY(SELECT DISTINCT u.id FROM mine AS m, unnest(m.parents) AS u(id)),
           ARRAY(SELECT DISTINCT u.id FROM mine AS m, unnest(m.children) AS u(id)),
           ARRAY(SELECT DISTINCT u.id FROM mine AS m, unnest(m.watched) AS u(id))
    INTO v_parents, v_children, v_watched;
    IF cardinality(v_parents) + cardinality(v_children) + cardinality(v_watched) = 0 THEN
        RETURN NULL;
    END IF;
    PERFORM FROM jobq._job AS j
    WHERE j.id = ANY (v_parents) OR j.id = ANY (v_watched)
    ORDER BY j.id
    FOR KEY SHARE OF j;
    UPDATE jobq._job AS j
    SET has_children = j.has_children OR j.id = ANY (v_parents),
        watched = j.watched OR j.id = ANY (v_watched)
    WHERE j.id IN (SELECT u.id FROM jobq._job AS u
                   WHERE (u.id = ANY (v_parents) AND NOT u.has_children)
                      OR (u.id = ANY (v_watched) AND NOT u.watched)
                   ORDER BY u.id
                   FOR NO KEY UPDATE OF u);
    PERFORM pg_notify('jobq_finished', w.id::text)
    FROM unnest(v_watched) AS w(id)
    WHERE NOT EXISTS (SELECT FROM jobq._job AS j WHERE j.id = w.id);
    v_children := ARRAY(SELECT j.id FROM jobq._job AS j
                        WHERE j.id = ANY (v_children) AND j.status = 'waiting'
                        ORDER BY j.id);
    IF cardinality(v_children) > 0 THEN
        PERFORM jobq._gate_recount(v_children);
        v_cancelled := jobq._settle(v_children);
        IF cardinality(v_cancelled) > 0 THEN
            PERFORM jobq._finish_dependents(v_cancelled, 'cancelled');
        END IF;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION jobq._settle_at_commit() IS
    'At commit: flags the live jobs this transaction named (has_children, watched) and settles its waiting children against their parents'' states then.';
CREATE CONSTRAINT TRIGGER _500_settle_at_commit
    AFTER INSERT ON jobq._at_commit
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION jobq._settle_at_commit();
CREATE OR REPLACE FUNCTION jobq._finish(p_ids bigint[], p_lease_tokens uuid[], p_status text, p_error text,
                             p_held boolean DEFAULT false, p_results jsonb[] DEFAULT NULL,
                             p_cause bigint DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    v_ids bigint[];
    v_queues text[];
    v_wake text[];
    v_keyed_ids bigint[];
    v_keyed_queues text[];
    v_keys text[];
    v_erred bigint[];
    v_parents bigint[];
    v_children bigint[];
    v_watched bigint[];
    v_now timestamptz := clock_timestamp();
BEGIN
    -- Take live jobs out of the live table as p_status (completed, dead or
    -- cancelled). A non-NULL lease token fences: the job must still be held
    -- under exactly that lease. p_held: jobs the caller's transaction holds
    -- without a lease (take, hold): they must be unleased, and this
    -- transaction is their attempt. Every job is counted (one counter row per
    -- queue); history keeps dead and cancelled jobs, and completed ones when
    -- their queue's retention is over 0. A completed job with a job_key
    -- records its completion in jobq._key_done (for enqueue's unique_for). Finishing a serial-group job or a job
    -- of a concurrency-limited queue frees a slot, so it wakes that queue's
    -- workers. A job that leaves no history takes its error history
    -- (jobq._job_error) with it; only a job that failed before (last_error
    -- set) has any. Rows go in id order (as jobq._settle_at_commit locks
    -- parents: no deadlock with an enqueue of their children). p_results
    -- (paired with p_ids): what completed jobs
    -- report; a job with a result is kept for at least its queue's
    -- result_retention. A job others depend on (has_children) updates their
    -- gates (jobq._finish_dependents); a job that depended on others and
    -- leaves no history takes its edges along. p_cause: the root ancestor of
    -- a cascade cancelling these jobs (recorded as cancelled_by; the caller,
    -- jobq._finish_dependents, then handles their dependents itself). A
    -- watched job (jobq.watch) sends NOTIFY jobq_finished with its id. A job
    -- kept in history keeps its gate, so a retry goes through it again.
    -- Returns the ids that left the live table.
    IF p_held THEN
        -- Only jobs this transaction holds (or nobody does): a job another
        -- transaction holds is skipped, never waited for.
        p_ids := ARRAY(SELECT j.id FROM jobq._job AS j
                       WHERE j.id = ANY (p_ids) AND j.status = 'ready'
                       FOR UPDATE SKIP LOCKED);
    END IF;
    IF p_status = 'completed' AND coalesce(cardinality(array_remove(p_results, NULL)), 0) = 0
       AND NOT jobq._history_kept() THEN
        -- The common case, lean: no history to write, so the rows are not copied.
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
        INTO v_ids, v_queues, v_wake, v_keyed_ids, v_keyed_queues, v_keys, v_erred, v_parents, v_children, v_watched
        FROM gone AS g;
        IF v_ids IS NULL THEN
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
        v_wake := v_wake || ARRAY(SELECT q.queue FROM jobq._queue AS q
                                  WHERE q.queue = ANY (v_queues) AND q.concurrency IS NOT NULL);
    ELSE
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
        INTO v_ids, v_wake, v_parents, v_watched
        FROM gone AS g
        JOIN settings AS s ON s.queue = g.queue;
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
CREATE OR REPLACE FUNCTION jobq.enqueue(
    queue text,
    payload jsonb,
    run_at timestamptz DEFAULT pg_catalog.now(),
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL,
    job_key text DEFAULT NULL,
    group_key text DEFAULT NULL,
    timeout interval DEFAULT NULL,
    unique_for interval DEFAULT NULL,
    depends_on bigint[] DEFAULT NULL,
    on_parent_failure text DEFAULT 'cancel'
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
    v_id bigint;
BEGIN
    -- Add one job in the caller's transaction; return its id (or the id of
    -- the active job that already holds job_key; with unique_for, also of
    -- the job of that key completed within unique_for). Jobs sharing a
    -- group_key run one at a time, in enqueue order. timeout (else the
    -- queue's timeout setting, fixed now) is how long a worker lets its
    -- handler run. depends_on: the job waits until those jobs completed;
    -- when one is dead or cancelled, on_parent_failure 'cancel' cancels it
    -- (and its own dependents), 'run' runs it once all have finished.
    v_settings := jobq._settings(enqueue.queue);
    IF NOT (jobq._enqueue_args_ok(enqueue.queue, enqueue.run_at, enqueue.priority, enqueue.max_attempts,
                                  enqueue.job_key, enqueue.group_key)
            AND coalesce(jsonb_typeof(enqueue.payload) = 'object'
                         AND pg_column_size(enqueue.payload) <= v_settings.max_payload_bytes, false)
            AND enqueue.timeout IS NULL AND enqueue.unique_for IS NULL
            AND enqueue.depends_on IS NULL AND enqueue.on_parent_failure IS NOT DISTINCT FROM 'cancel') THEN
        PERFORM jobq._check_queue(enqueue.queue, 'queue');
        PERFORM jobq._check_payload(enqueue.payload, 'payload', v_settings.max_payload_bytes);
        PERFORM jobq._check_time(enqueue.run_at, 'run_at');
        PERFORM jobq._check_job_options(enqueue.priority, enqueue.max_attempts);
        PERFORM jobq._check_job_key(enqueue.job_key, 'job_key');
        PERFORM jobq._check_job_key(enqueue.group_key, 'group_key');
        PERFORM jobq._check_interval(enqueue.timeout, 'timeout', interval '1 second', interval '1 day');
        PERFORM jobq._check_unique_for(enqueue.unique_for, enqueue.job_key IS NOT NULL, 'job_key');
        PERFORM jobq._check_dependencies(coalesce(enqueue.depends_on, '{}'), 'depends_on', enqueue.on_parent_failure);
    END IF;
    IF coalesce(cardinality(enqueue.depends_on), 0) = 0 THEN
        RETURN jobq._insert_job(enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
                                coalesce(enqueue.max_attempts, v_settings.max_attempts), enqueue.job_key,
                                enqueue.group_key, coalesce(enqueue.timeout, v_settings.timeout), enqueue.unique_for);
    END IF;
    PERFORM jobq._check_parents_issued(enqueue.depends_on, 'depends_on');
    v_id := jobq._insert_job(enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
                             coalesce(enqueue.max_attempts, v_settings.max_attempts), enqueue.job_key,
                             enqueue.group_key, coalesce(enqueue.timeout, v_settings.timeout), enqueue.unique_for,
                             true);
    PERFORM jobq._attach(ARRAY[v_id], enqueue.depends_on, enqueue.on_parent_failure, false);
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text) IS
    'Adds one job (inside the caller''s transaction) and returns its id; a job_key held by an active job (or, with unique_for, completed within it) returns that job''s id instead; depends_on makes it wait for those jobs.';
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
            AND v_n BETWEEN 0 AND 100000
            AND enqueue_many.timeout IS NULL AND enqueue_many.unique_for IS NULL
            AND enqueue_many.depends_on IS NULL AND enqueue_many.on_parent_failure IS NOT DISTINCT FROM 'cancel') THEN
        PERFORM jobq._check_queue(enqueue_many.queue, 'queue');
        IF enqueue_many.payloads IS NULL THEN
            RAISE EXCEPTION 'jobq: payloads must not be NULL'
                USING ERRCODE = 'JQ002', HINT = 'Pass an array of JSON objects, e.g. ARRAY[''{"a":1}'']::jsonb[].';
        END IF;
        PERFORM jobq._check_batch(v_n, 'cardinality(payloads)', 100000);
        PERFORM jobq._check_time(enqueue_many.run_at, 'run_at');
        PERFORM jobq._check_job_options(enqueue_many.priority, enqueue_many.max_attempts);
        PERFORM jobq._check_job_key(enqueue_many.group_key, 'group_key');
        PERFORM jobq._check_interval(enqueue_many.timeout, 'timeout', interval '1 second', interval '1 day');
        PERFORM jobq._check_unique_for(enqueue_many.unique_for, enqueue_many.job_keys IS NOT NULL, 'job_keys');
        PERFORM jobq._check_dependencies(coalesce(enqueue_many.depends_on, '{}'), 'depends_on',
                                         enqueue_many.on_parent_failure);
    END IF;
    v_settings := jobq._settings(enqueue_many.queue);

    SELECT p.payload, p.ord INTO v_bad
    FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, ord)
    WHERE p.payload IS NULL OR jsonb_typeof(p.payload) <> 'object'
       OR pg_column_size(p.payload) > v_settings.max_payload_bytes
    ORDER BY p.ord LIMIT 1;
    IF FOUND THEN
        PERFORM jobq._check_payload(v_bad.payload, format('payloads[%s]', v_bad.ord), v_settings.max_payload_bytes);
    END IF;

    IF v_waiting THEN
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

    IF cardinality(enqueue_many.job_keys) <> v_n THEN
        RAISE EXCEPTION 'jobq: job_keys has % elements but payloads has %', cardinality(enqueue_many.job_keys), v_n
            USING ERRCODE = 'JQ009', HINT = 'Pass one key (or NULL) per payload, or job_keys => NULL.';
    END IF;
    -- Pair payloads and keys by position with unnest, not by subscript:
    -- arrays may start at another index than 1 (e.g. '[0:1]={...}').
    FOR v_item IN
        SELECT x.job_key, x.ord
        FROM unnest(enqueue_many.payloads, enqueue_many.job_keys) WITH ORDINALITY AS x(payload, job_key, ord)
    LOOP
        PERFORM jobq._check_job_key(v_item.job_key, format('job_keys[%s]', v_item.ord));
    END LOOP;
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
CREATE OR REPLACE FUNCTION jobq.enqueue_callback(
    queue text,
    payload jsonb,
    members bigint[],
    run_at timestamptz DEFAULT pg_catalog.now(),
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
    v_id bigint;
BEGIN
    -- Add a batch callback: a job that waits until every one of members
    -- (jobs of any queues) has finished — completed, dead or cancelled — and
    -- then becomes ready exactly once, its payload with "batch": {members,
    -- completed, dead, cancelled} (jobq's counts replace a "batch" key of
    -- the payload). Returns its id. A member retried after the callback was
    -- released does not release it again.
    v_settings := jobq._settings(enqueue_callback.queue);
    PERFORM jobq._check_queue(enqueue_callback.queue, 'queue');
    PERFORM jobq._check_payload(enqueue_callback.payload, 'payload', v_settings.max_payload_bytes);
    PERFORM jobq._check_time(enqueue_callback.run_at, 'run_at');
    PERFORM jobq._check_job_options(enqueue_callback.priority, enqueue_callback.max_attempts);
    PERFORM jobq._check_dependencies(enqueue_callback.members, 'members', 'run');
    PERFORM jobq._check_parents_issued(enqueue_callback.members, 'members');
    v_id := jobq._insert_job(enqueue_callback.queue, enqueue_callback.payload, enqueue_callback.run_at,
                             enqueue_callback.priority,
                             coalesce(enqueue_callback.max_attempts, v_settings.max_attempts), NULL, NULL,
                             v_settings.timeout, NULL, true);
    PERFORM jobq._attach(ARRAY[v_id], enqueue_callback.members, 'run', true);
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION jobq.enqueue_callback(text, jsonb, bigint[], timestamptz, integer, integer) IS
    'Adds a batch callback: a job released exactly once when all members have finished, with their completed/dead/cancelled counts in its payload.';
CREATE OR REPLACE FUNCTION jobq.watch(id bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_status text;
BEGIN
    -- Ask to be told when a job finishes: finishing it (completed, dead or
    -- cancelled) sends NOTIFY jobq_finished with its id. Returns its state
    -- now, as jobq.status() (JQ019 for an unknown id). LISTEN jobq_finished
    -- before calling this: a job that finishes in between is then either
    -- notified or already finished here. Jobs nobody watches send nothing
    -- when they finish. The job is marked watched when this transaction
    -- commits (jobq._settle_at_commit), not here: a watcher's open
    -- transaction never holds up the job's worker. A job that finishes
    -- between this call and that commit is notified by the commit itself.
    v_status := jobq.status(watch.id);
    IF v_status NOT IN ('completed', 'dead', 'cancelled') THEN
        INSERT INTO jobq._at_commit (watched) VALUES (ARRAY[watch.id]);
        PERFORM set_config('jobq.named_jobs', 'on', true);   -- for jobq._finish in this transaction
    END IF;
    RETURN v_status;
END
$$;
COMMENT ON FUNCTION jobq.watch(bigint) IS
    'Marks a live job so that finishing it sends NOTIFY jobq_finished with its id; returns its state (as jobq.status).';

-- plans and costs (issue 24)

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

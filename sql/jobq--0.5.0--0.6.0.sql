-- jobq 0.5.0 → 0.6.0: workflows (dependencies, results, batch callbacks). One line per change:
--   * enqueue / enqueue_many take depends_on bigint[] and on_parent_failure ('cancel' | 'run'): a job
--     whose parents have not all completed has the new status 'waiting' (parked: never claimed) and is
--     released (ready, NOTIFY) in the transaction that completes its last parent; a dead or cancelled
--     parent cancels it and its descendants (cancelled_by: the root ancestor) or, with 'run', counts as
--     finished
--   * jobq.enqueue_callback(queue, payload, members): a batch callback released exactly once when every
--     member finished, with the members' completed/dead/cancelled counts in its payload ("batch")
--   * complete / complete_many / complete_held take a result (results jsonb[]): kept with the finished
--     job for greatest(retention, result_retention); jobq.result(id), jobq.status(id),
--     jobq.parent_results(id); results of parents are kept while a child of theirs is live
--   * retry / retry_dead of a dead or cancelled job restore the descendants its failure cancelled
--   * tables jobq._job_dep (edges) and jobq._job_wait (gates of waiting jobs); jobq._job gains
--     has_children and has_parents; jobq._job_archive gains result and cancelled_by (indexed)
--   * queue setting result_retention (default 1 day): configure_queue's last argument, jobq.queues'
--     last column
--   * views: jobq.stats gains waiting (last column), jobq.jobs gains result and cancelled_by (last
--     columns), new jobq.job_dependencies (child_id, parent_id); jobq.metrics() reports
--     jobq_jobs{state="waiting"}
--   * cancel_jobs takes status 'waiting'; concurrency limits count only running jobs (waiting ones are
--     parked too)
--   * jobq.watch(id): finishing a watched job sends NOTIFY jobq_finished with its id (pyqueue.wait)
--   * SQLSTATEs JQ018 (a bad depends_on or members list) and JQ019 (an unknown job id)
--
-- Applied by ALTER EXTENSION jobq UPDATE TO '0.6.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.5.0 is installed.

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
    IF jobq.version() <> '0.5.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.5.0 to 0.6.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.6.0');

---------------------------------------------------------------------------
-- tables
---------------------------------------------------------------------------

ALTER TABLE jobq._job ADD COLUMN has_children boolean NOT NULL DEFAULT false;
ALTER TABLE jobq._job ADD COLUMN has_parents boolean NOT NULL DEFAULT false;
ALTER TABLE jobq._job ADD COLUMN watched boolean NOT NULL DEFAULT false;
ALTER TABLE jobq._job DROP CONSTRAINT job_status_valid;
ALTER TABLE jobq._job ADD CONSTRAINT job_status_valid CHECK (status IN ('ready', 'running', 'waiting'));
ALTER TABLE jobq._job DROP CONSTRAINT job_parked_when_running;
ALTER TABLE jobq._job ADD CONSTRAINT job_parked_when_running CHECK (NOT parked OR status IN ('running', 'waiting'));
ALTER TABLE jobq._job ADD CONSTRAINT job_waiting_parked CHECK (status <> 'waiting' OR parked);
COMMENT ON TABLE jobq._job IS 'Live jobs (waiting, ready, scheduled, running). Private: use the jobq functions and views.';
COMMENT ON COLUMN jobq._job.has_children IS
    'Some job was enqueued depending on this one (jobq._job_dep): finishing it updates their gates. Set by the child''s enqueue.';
COMMENT ON COLUMN jobq._job.has_parents IS
    'This job was enqueued with depends_on (or as a batch callback): its edges in jobq._job_dep go when it does.';
COMMENT ON COLUMN jobq._job.watched IS
    'Someone waits for this job (jobq.watch): finishing it sends NOTIFY jobq_finished with its id.';

ALTER TABLE jobq._job_archive ADD COLUMN result jsonb;
ALTER TABLE jobq._job_archive ADD COLUMN cancelled_by bigint;
COMMENT ON COLUMN jobq._job_archive.result IS 'What the job''s complete() reported (any JSON value); NULL when none.';
COMMENT ON COLUMN jobq._job_archive.cancelled_by IS
    'The ancestor whose death or cancellation cancelled this job (the root of the cascade); jobq.retry of it restores this job.';
-- The descendants a retry of their root ancestor restores.
CREATE INDEX _job_archive_cancelled_by_idx ON jobq._job_archive (cancelled_by)
    WHERE cancelled_by IS NOT NULL;

-- Dependencies: one row per (parent, child) edge, from the child's enqueue
-- until the child leaves jobq (finished without history, pruned or
-- discarded). Parents exist before their children, so the graph has no
-- cycle. Finishing a parent looks its children up by the primary key.
CREATE TABLE jobq._job_dep (
    parent_id  bigint NOT NULL,
    child_id   bigint NOT NULL,
    PRIMARY KEY (parent_id, child_id),
    CONSTRAINT job_dep_not_self CHECK (parent_id <> child_id)
) WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE jobq._job_dep IS 'Job dependencies (parent, child), while the child exists. Private: read jobq.job_dependencies.';
CREATE INDEX _job_dep_child_idx ON jobq._job_dep (child_id, parent_id);

-- The gate of each waiting job: how many of its parents are still live, and
-- how the finished ones ended. Finishing a parent updates its children's
-- gates (row-locked in id order); the update that brings parents_left to 0
-- releases the job in that transaction. Every job enqueued with parents
-- has one, from its enqueue until it leaves jobq with its edges (finished
-- without history, pruned or discarded): a retry of the job, once it was
-- released or cancelled, goes through its gate again (recounted), so it
-- never runs before its parents completed.
CREATE TABLE jobq._job_wait (
    job_id             bigint PRIMARY KEY,
    parents_left       integer NOT NULL,
    completed          integer NOT NULL DEFAULT 0,
    dead               integer NOT NULL DEFAULT 0,
    cancelled          integer NOT NULL DEFAULT 0,
    on_parent_failure  text NOT NULL,
    report             boolean NOT NULL DEFAULT false,
    CONSTRAINT job_wait_counts_valid CHECK (parents_left >= 0 AND completed >= 0 AND dead >= 0 AND cancelled >= 0),
    CONSTRAINT job_wait_on_parent_failure_valid CHECK (on_parent_failure IN ('cancel', 'run'))
) WITH (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_cost_delay = 0,
    fillfactor = 50
);
COMMENT ON TABLE jobq._job_wait IS 'Waiting jobs: parents still live, finished parents by outcome, what a parent failure does. Private.';
COMMENT ON COLUMN jobq._job_wait.report IS
    'A batch callback (jobq.enqueue_callback): released with the counts of its members'' outcomes in its payload.';

ALTER TABLE jobq._queue ADD COLUMN result_retention interval;
ALTER TABLE jobq._queue ADD CONSTRAINT queue_result_retention_range
    CHECK (result_retention BETWEEN interval '0' AND interval '3650 days');

DO $dump$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'jobq') THEN
        PERFORM pg_catalog.pg_extension_config_dump('jobq._job_dep', '');
        PERFORM pg_catalog.pg_extension_config_dump('jobq._job_wait', '');
    END IF;
END
$dump$;

CREATE OR REPLACE VIEW jobq._queue_defaults AS
    -- The built-in defaults of the queue settings, here and only here: a
    -- setting a queue does not override (NULL in jobq._queue) takes this.
    -- Settings absent here (dead_retention, concurrency, rate_limit,
    -- timeout) have none: NULL means no limit. A view, not a function, so
    -- that jobq.queues needs no function its readers (jobq_viewer) would
    -- have to be allowed to call.
    SELECT 25 AS max_attempts,
           interval '2 seconds' AS backoff_base,
           interval '1 hour' AS backoff_cap,
           0.25::double precision AS backoff_jitter,
           interval '5 minutes' AS lease,
           interval '0' AS retention,                -- completed jobs leave no history unless asked
           1048576 AS max_payload_bytes,
           interval '1 second' AS rate_interval,     -- the window of a rate limit
           false AS paused,
           interval '1 day' AS result_retention;     -- a completed job's result, at the least
COMMENT ON VIEW jobq._queue_defaults IS 'Built-in defaults of the queue settings (one row). Private: read jobq.queues.';

---------------------------------------------------------------------------
-- functions: changed signatures go first
---------------------------------------------------------------------------

DROP FUNCTION jobq._finish(bigint[], uuid[], text, text, boolean);
DROP FUNCTION jobq._insert_job(text, jsonb, timestamptz, integer, integer, text, text, interval, interval);
DROP FUNCTION jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval);
DROP FUNCTION jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval);
DROP FUNCTION jobq.complete_held(bigint[]);
DROP FUNCTION jobq.complete(bigint, uuid);
DROP FUNCTION jobq.complete_many(bigint[], uuid[]);
DROP FUNCTION jobq.complete(bigint, text);
DROP FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval,
                                   interval, integer, integer, integer, interval, interval);

CREATE OR REPLACE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '0.6.0'::text
$$;
COMMENT ON FUNCTION jobq.version() IS 'Installed jobq version (semver text).';

CREATE OR REPLACE FUNCTION jobq._settings(p_queue text) RETURNS jobq._queue
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
BEGIN
    -- The effective settings of a queue: its overrides over the defaults
    -- (jobq._queue_defaults). (PL/pgSQL, not SQL: a SQL function with a SET
    -- clause is planned afresh on every call, and every enqueue, claim and
    -- completion asks for settings.)
    SELECT p_queue,
           coalesce(q.max_attempts, d.max_attempts),
           coalesce(q.backoff_base, d.backoff_base),
           coalesce(q.backoff_cap, d.backoff_cap),
           coalesce(q.backoff_jitter, d.backoff_jitter),
           coalesce(q.lease, d.lease),
           coalesce(q.retention, d.retention),
           q.dead_retention,                          -- NULL: dead and cancelled jobs stay until retried
           coalesce(q.max_payload_bytes, d.max_payload_bytes),
           coalesce(q.updated_at, '-infinity'::timestamptz),
           q.concurrency,                             -- NULL: no limit
           q.rate_limit,                              -- NULL: no limit
           CASE WHEN q.rate_limit IS NOT NULL THEN coalesce(q.rate_interval, d.rate_interval) END,
           coalesce(q.paused, d.paused),
           q.timeout,                                 -- NULL: handlers run as long as they take
           coalesce(q.result_retention, d.result_retention)
    INTO v_settings
    FROM jobq._queue_defaults AS d
    LEFT JOIN jobq._queue AS q ON q.queue = p_queue;
    RETURN v_settings;
END
$$;
COMMENT ON FUNCTION jobq._settings(text) IS 'Effective settings of a queue (overrides from jobq._queue over built-in defaults).';

CREATE FUNCTION jobq._check_dependencies(p_ids bigint[], p_arg text, p_on_parent_failure text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_bad record;
BEGIN
    -- Raise JQ018 unless p_ids (depends_on, members) is an array of at most
    -- 100,000 distinct job ids without NULL, and JQ017 unless
    -- p_on_parent_failure is 'cancel' or 'run'. Whether the ids are known is
    -- jobq._lock_parents' question.
    IF p_on_parent_failure IS NULL OR p_on_parent_failure NOT IN ('cancel', 'run') THEN
        RAISE EXCEPTION 'jobq: on_parent_failure must be ''cancel'' or ''run'', got %',
                coalesce(pg_catalog.quote_literal(pg_catalog.left(p_on_parent_failure, 100)), 'NULL')
            USING ERRCODE = 'JQ017',
                  HINT = '''cancel'' (the default) cancels the job when a parent is dead or cancelled; '
                         '''run'' runs it once every parent has finished, however.';
    END IF;
    IF p_ids IS NULL THEN
        RAISE EXCEPTION 'jobq: % must be an array of job ids, got NULL', p_arg
            USING ERRCODE = 'JQ018', HINT = 'Pass e.g. ARRAY[41, 42]::bigint[].';
    END IF;
    IF cardinality(p_ids) > 100000 THEN
        RAISE EXCEPTION 'jobq: % has % ids, over the cap of 100000', p_arg, cardinality(p_ids)
            USING ERRCODE = 'JQ018',
                  HINT = 'Make a tree: callbacks of up to 100000 jobs each, and one callback depending on those.';
    END IF;
    SELECT u.id, u.ord INTO v_bad
    FROM unnest(p_ids) WITH ORDINALITY AS u(id, ord)
    WHERE u.id IS NULL
    ORDER BY u.ord LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'jobq: %[%] is NULL', p_arg, v_bad.ord
            USING ERRCODE = 'JQ018', HINT = 'Pass the id of every job this one depends on, without NULL.';
    END IF;
    SELECT u.id, count(*) AS n INTO v_bad
    FROM unnest(p_ids) AS u(id)
    GROUP BY u.id HAVING count(*) > 1
    ORDER BY u.id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'jobq: % names job % % times', p_arg, v_bad.id, v_bad.n
            USING ERRCODE = 'JQ018', HINT = 'Name each job once, e.g. ARRAY(SELECT DISTINCT unnest(ids)).';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_dependencies(bigint[], text, text) IS
    'Raises JQ018 for a NULL, oversized, NULL-holding or repeating list of parent ids, JQ017 for a bad on_parent_failure.';

CREATE FUNCTION jobq._check_results(p_ids bigint[], p_results jsonb[]) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_bad record;
BEGIN
    -- Raise JQ010 unless p_results pairs with p_ids, and JQ003 for a result
    -- over its job's queue's max_payload_bytes (jobs not live are left to the
    -- completion, which ignores them).
    IF cardinality(p_results) <> cardinality(p_ids) THEN
        RAISE EXCEPTION 'jobq: results has % elements but ids has %', cardinality(p_results), cardinality(p_ids)
            USING ERRCODE = 'JQ010', HINT = 'Pass one result (or NULL) per job id, in the same order.';
    END IF;
    IF cardinality(array_remove(p_results, NULL)) = 0 THEN
        RETURN;
    END IF;
    SELECT r.id, r.ord, pg_column_size(r.result) AS size, (jobq._settings(j.queue)).max_payload_bytes AS cap
    INTO v_bad
    FROM unnest(p_ids, p_results) WITH ORDINALITY AS r(id, result, ord)
    JOIN jobq._job AS j ON j.id = r.id
    WHERE r.result IS NOT NULL AND pg_column_size(r.result) > (jobq._settings(j.queue)).max_payload_bytes
    ORDER BY r.ord LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'jobq: the result of job % is % bytes, over the queue''s cap of % bytes', v_bad.id, v_bad.size, v_bad.cap
            USING ERRCODE = 'JQ003',
                  HINT = 'Store large results in a table and return its key, or raise max_payload_bytes with jobq.configure_queue().';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_results(bigint[], jsonb[]) IS
    'Raises JQ010 when results does not pair with ids, JQ003 for a result over its queue''s payload cap.';

CREATE FUNCTION jobq._finish(p_ids bigint[], p_lease_tokens uuid[], p_status text, p_error text,
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
    -- set) has any. Rows go in id order (as jobq._lock_parents locks
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
    IF v_watched IS NOT NULL THEN
        PERFORM pg_notify('jobq_finished', w.id::text) FROM unnest(v_watched) AS w(id);
    END IF;
    IF v_parents IS NOT NULL AND p_cause IS NULL THEN
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

CREATE FUNCTION jobq._insert_job(
    p_queue text, p_payload jsonb, p_run_at timestamptz, p_priority integer, p_max_attempts integer,
    p_job_key text, p_group_key text, p_timeout interval, p_unique_for interval, p_waiting boolean DEFAULT false
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id bigint;
BEGIN
    -- Insert one validated job and wake the queue's workers; with a job_key
    -- already held by an active job, return that job's id instead, and with
    -- p_unique_for also the id of the job of that key completed within
    -- p_unique_for. Loops when the holder finishes between the INSERT and
    -- the lookup. p_waiting: the job waits for parents (jobq._attach links
    -- it): status waiting, parked, and no wake-up yet.
    IF p_unique_for IS NOT NULL THEN
        SELECT j.id INTO v_id FROM jobq._job AS j WHERE j.queue = p_queue AND j.job_key = p_job_key;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
        SELECT k.job_id INTO v_id FROM jobq._key_done AS k
        WHERE k.queue = p_queue AND k.job_key = p_job_key AND k.finished_at > clock_timestamp() - p_unique_for;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END IF;
    FOR i IN 1..10 LOOP
        IF p_waiting THEN
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, job_key, group_key, timeout,
                                   status, parked, has_parents)
            VALUES (p_queue, p_payload, p_run_at, p_priority, p_max_attempts, p_job_key, p_group_key, p_timeout,
                    'waiting', true, true)
            ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
            RETURNING id INTO v_id;
        ELSE
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, job_key, group_key, timeout)
            VALUES (p_queue, p_payload, p_run_at, p_priority, p_max_attempts, p_job_key, p_group_key, p_timeout)
            ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
            RETURNING id INTO v_id;
        END IF;
        IF v_id IS NOT NULL THEN
            IF NOT p_waiting THEN
                PERFORM pg_notify('jobq', p_queue);
            END IF;
            RETURN v_id;
        END IF;
        SELECT j.id INTO v_id FROM jobq._job AS j WHERE j.queue = p_queue AND j.job_key = p_job_key;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'jobq: job_key % kept changing hands while enqueueing', pg_catalog.quote_literal(p_job_key)
        USING ERRCODE = '40001', HINT = 'Retry the transaction.';
END
$$;
COMMENT ON FUNCTION jobq._insert_job(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, boolean) IS
    'Inserts one validated job (ready, and NOTIFYs; or waiting for parents), or returns the id of the active (or, with unique_for, recently completed) job holding its job_key.';

CREATE FUNCTION jobq._lock_parents(p_parents bigint[], p_arg text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_last bigint;
    v_unknown bigint;
BEGIN
    -- Before jobs are linked to p_parents (validated by
    -- _check_dependencies): raise JQ019 for an id jobq never issued; lock
    -- the live parents (FOR KEY SHARE) until this transaction ends and mark
    -- them has_children. A parent cannot then finish unseen: its finishing
    -- DELETE waits for this transaction and then sees the new edges, and one
    -- that finished before shows in a later statement here. Claims and
    -- heartbeats of those parents are not blocked (they change no key).
    -- Both passes go in id order, as jobq._finish deletes, so an enqueue
    -- and a completion of the same parents cannot deadlock.
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END INTO v_last FROM jobq._job_id_seq AS s;
    SELECT u.id INTO v_unknown
    FROM unnest(p_parents) AS u(id)
    WHERE u.id NOT BETWEEN 1 AND v_last
    ORDER BY u.id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'jobq: % names job %, which does not exist', p_arg, v_unknown
            USING ERRCODE = 'JQ019', HINT = 'Pass ids that jobq.enqueue() returned.';
    END IF;
    PERFORM FROM jobq._job AS j WHERE j.id = ANY (p_parents) ORDER BY j.id FOR KEY SHARE OF j;
    UPDATE jobq._job AS j SET has_children = true
    WHERE j.id IN (SELECT u.id FROM jobq._job AS u
                   WHERE u.id = ANY (p_parents) AND NOT u.has_children
                   ORDER BY u.id
                   FOR NO KEY UPDATE OF u);
END
$$;
COMMENT ON FUNCTION jobq._lock_parents(bigint[], text) IS
    'Raises JQ019 for a parent id never issued; flags and key-share-locks the live parents until the transaction ends.';

CREATE FUNCTION jobq._gate_recount(p_children bigint[]) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Set the gates of waiting jobs from their parents' states now: live
    -- (in jobq._job), completed, dead or cancelled (history), and completed
    -- when jobq no longer knows the parent (finished without history, or
    -- pruned). The gates are locked first, in id order, so the count runs in
    -- a statement that starts after every finishing parent that held them
    -- committed.
    PERFORM FROM jobq._job_wait AS w WHERE w.job_id = ANY (p_children) ORDER BY w.job_id FOR UPDATE;
    WITH state AS (
        SELECT d.child_id,
               CASE WHEN j.id IS NOT NULL THEN 'live' ELSE coalesce(a.status, 'completed') END AS outcome
        FROM jobq._job_dep AS d
        LEFT JOIN jobq._job AS j ON j.id = d.parent_id
        LEFT JOIN jobq._job_archive AS a ON a.id = d.parent_id
        WHERE d.child_id = ANY (p_children)
    ), counted AS (
        SELECT s.child_id,
               count(*) FILTER (WHERE s.outcome = 'live') AS live,
               count(*) FILTER (WHERE s.outcome = 'completed') AS completed,
               count(*) FILTER (WHERE s.outcome = 'dead') AS dead,
               count(*) FILTER (WHERE s.outcome = 'cancelled') AS cancelled
        FROM state AS s
        GROUP BY s.child_id
    )
    UPDATE jobq._job_wait AS w
    SET parents_left = c.live, completed = c.completed, dead = c.dead, cancelled = c.cancelled
    FROM counted AS c
    WHERE w.job_id = c.child_id;
END
$$;
COMMENT ON FUNCTION jobq._gate_recount(bigint[]) IS
    'Recounts the gates of waiting jobs from their parents'' current states (live, completed, dead, cancelled).';

CREATE FUNCTION jobq._settle(p_children bigint[]) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
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
            SELECT jobq._finish(v_cause.ids, NULL, 'cancelled',
                                format('cancelled: ancestor job %s %s', v_cause.cause,
                                       CASE v_cause.fate WHEN 'cancelled' THEN 'was cancelled' ELSE 'is dead' END),
                                false, NULL, v_cause.cause));
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

CREATE FUNCTION jobq._finish_dependents(p_parents bigint[], p_status text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    v_frontier bigint[] := p_parents;
    v_status text := p_status;
    v_gates record;
BEGIN
    -- Jobs p_parents just left the live table as p_status (completed, dead
    -- or cancelled): count them in the gates of their waiting children,
    -- then cancel or release the children whose gate says so (jobq._settle).
    -- Cancelled children are the next round's parents, so a cascade goes
    -- down the whole graph in a loop, not in recursion. A gate is one row
    -- per waiting child, whatever its number of parents: it is locked (in
    -- id order) by the one statement that updates it, as late as possible,
    -- so that a wide fan-in's completions hold it only for their commit.
    -- The gates jobs cancelled while waiting keep are left as they are (a
    -- retry recounts them).
    WHILE cardinality(v_frontier) > 0 LOOP
        WITH counted AS (
            SELECT d.child_id, count(*)::integer AS n
            FROM jobq._job_dep AS d
            WHERE d.parent_id = ANY (v_frontier)
            GROUP BY d.child_id
        ), locked AS MATERIALIZED (
            SELECT w.job_id, c.n
            FROM counted AS c
            JOIN jobq._job_wait AS w ON w.job_id = c.child_id
            JOIN jobq._job AS j ON j.id = c.child_id AND j.status = 'waiting'
            ORDER BY w.job_id
            FOR UPDATE OF w
        ), updated AS (
            UPDATE jobq._job_wait AS w
            SET parents_left = w.parents_left - l.n,
                completed = w.completed + CASE WHEN v_status = 'completed' THEN l.n ELSE 0 END,
                dead = w.dead + CASE WHEN v_status = 'dead' THEN l.n ELSE 0 END,
                cancelled = w.cancelled + CASE WHEN v_status = 'cancelled' THEN l.n ELSE 0 END
            FROM locked AS l
            WHERE w.job_id = l.job_id
            RETURNING w.job_id, w.parents_left = 0 OR (w.on_parent_failure = 'cancel' AND w.dead + w.cancelled > 0)
                                AS settles
        )
        SELECT coalesce(array_agg(u.job_id ORDER BY u.job_id) FILTER (WHERE u.settles), '{}') AS ids
        INTO v_gates
        FROM updated AS u;
        EXIT WHEN cardinality(v_gates.ids) = 0;
        v_frontier := jobq._settle(v_gates.ids);
        v_status := 'cancelled';
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq._finish_dependents(bigint[], text) IS
    'Counts parents that just finished (as p_status) in their waiting children''s gates, then cancels or releases those children, down the graph.';

CREATE FUNCTION jobq._attach(p_children bigint[], p_parents bigint[], p_on_parent_failure text, p_report boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_new bigint[];
BEGIN
    -- Link jobs just enqueued as waiting (jobq._insert_job with p_waiting)
    -- to p_parents (locked by jobq._lock_parents): edges, a gate counting
    -- the parents' states now, then cancel or release at once what needs
    -- no wait. Ids that came back for a held job_key (an existing job) are
    -- left as they are: only waiting jobs without a gate are new.
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
END
$$;
COMMENT ON FUNCTION jobq._attach(bigint[], bigint[], text, boolean) IS
    'Links newly enqueued waiting jobs to their parents (edges, gates), cancelling or releasing at once what need not wait.';

CREATE FUNCTION jobq._restore_descendants(p_root bigint) RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_set bigint[];
    v_blocked bigint[];
    v_moved bigint[];
    v_gates bigint[];
    v_cancelled bigint[];
BEGIN
    -- p_root (dead or cancelled) is live again (jobq.retry): bring back the
    -- descendants its failure cancelled (cancelled_by = p_root) as waiting,
    -- and recount the gates of its waiting children that counted it as
    -- failed ('run'). A descendant with another dead or cancelled parent
    -- outside that set stays cancelled, re-rooted to that parent's root (a
    -- retry of that one restores it), and so do its own descendants in the
    -- set. One whose job_key an active job now holds stays cancelled.
    -- Returns how many came back.
    v_set := ARRAY(SELECT a.id FROM jobq._job_archive AS a
                   WHERE a.cancelled_by = p_root AND a.status = 'cancelled'
                   ORDER BY a.id
                   FOR UPDATE);
    LOOP
        v_blocked := ARRAY(
            SELECT DISTINCT d.child_id
            FROM jobq._job_dep AS d
            JOIN jobq._job_archive AS a ON a.id = d.parent_id AND a.status IN ('dead', 'cancelled')
            WHERE d.child_id = ANY (v_set) AND a.id <> ALL (v_set));
        EXIT WHEN cardinality(v_blocked) = 0;
        UPDATE jobq._job_archive AS c
        SET cancelled_by = (SELECT min(coalesce(p.cancelled_by, p.id))
                            FROM jobq._job_dep AS d
                            JOIN jobq._job_archive AS p ON p.id = d.parent_id AND p.status IN ('dead', 'cancelled')
                            WHERE d.child_id = c.id AND p.id <> ALL (v_set))
        WHERE c.id = ANY (v_blocked);
        v_set := ARRAY(SELECT u.id FROM unnest(v_set) AS u(id) WHERE u.id <> ALL (v_blocked));
    END LOOP;
    IF cardinality(v_set) > 0 THEN
        WITH moved AS (
            INSERT INTO jobq._job (id, queue, payload, status, parked, priority, run_at, attempts, max_attempts,
                                   job_key, created_at, group_key, timeout, has_children, has_parents)
            SELECT a.id, a.queue, a.payload, 'waiting', true, a.priority, a.run_at, a.attempts, a.max_attempts,
                   a.job_key, a.created_at, a.group_key, a.timeout,
                   EXISTS (SELECT FROM jobq._job_dep AS d WHERE d.parent_id = a.id), true
            FROM jobq._job_archive AS a
            WHERE a.id = ANY (v_set)
            ORDER BY a.id
            ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
            RETURNING id
        )
        SELECT coalesce(array_agg(m.id ORDER BY m.id), '{}') INTO v_moved FROM moved AS m;
        DELETE FROM jobq._job_archive AS a WHERE a.id = ANY (v_moved);
        IF cardinality(v_moved) < cardinality(v_set) THEN
            RAISE NOTICE 'jobq: % descendants of job % stay cancelled: their job_key is held by an active job',
                cardinality(v_set) - cardinality(v_moved), p_root;
        END IF;
        -- They kept their gates (and on_parent_failure) when cancelled.
        INSERT INTO jobq._job_wait (job_id, parents_left, on_parent_failure)
        SELECT m.id, 0, 'cancel' FROM unnest(v_moved) AS m(id)
        ON CONFLICT (job_id) DO NOTHING;
    ELSE
        v_moved := '{}';
    END IF;
    -- The gates to recount: those moved back, and p_root's other waiting
    -- children (the gates of finished ones are recounted by their own retry).
    v_gates := ARRAY(SELECT w.job_id FROM jobq._job_wait AS w
                     JOIN jobq._job AS j ON j.id = w.job_id AND j.status = 'waiting'
                     WHERE w.job_id IN (SELECT d.child_id FROM jobq._job_dep AS d WHERE d.parent_id = p_root)
                        OR w.job_id = ANY (v_moved)
                     ORDER BY w.job_id);
    PERFORM jobq._gate_recount(v_gates);
    v_cancelled := jobq._settle(v_gates);
    IF cardinality(v_cancelled) > 0 THEN
        PERFORM jobq._finish_dependents(v_cancelled, 'cancelled');
    END IF;
    RETURN cardinality(v_moved);
END
$$;
COMMENT ON FUNCTION jobq._restore_descendants(bigint) IS
    'After a retry of a dead or cancelled job: its cascade-cancelled descendants wait again (unless another failed parent holds them).';

CREATE OR REPLACE FUNCTION jobq._pick(p_queues text[], p_n integer, p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, lease interval)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
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
    -- this transaction (take, hold) count as running.
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

CREATE FUNCTION jobq.enqueue(
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
    PERFORM jobq._lock_parents(enqueue.depends_on, 'depends_on');
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

CREATE FUNCTION jobq.enqueue_many(
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
        PERFORM jobq._lock_parents(enqueue_many.depends_on, 'depends_on');
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

CREATE FUNCTION jobq.enqueue_callback(
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
    PERFORM jobq._lock_parents(enqueue_callback.members, 'members');
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

CREATE FUNCTION jobq.complete_held(ids bigint[], results jsonb[] DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_done integer;
BEGIN
    -- Acknowledge success of jobs this transaction holds (jobq.hold): they
    -- are done when it commits. Returns how many it completed; leased,
    -- finished and unknown ids, and jobs another transaction holds, are left
    -- alone (never waited for). results: each job's result (or NULL), as
    -- in jobq.complete_many.
    IF complete_held.ids IS NULL OR array_position(complete_held.ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: ids must be an array of job ids without NULL'
            USING ERRCODE = 'JQ010', HINT = 'Pass the ids of the jobs jobq.hold() returned.';
    END IF;
    PERFORM jobq._check_batch(cardinality(complete_held.ids), 'cardinality(ids)', 10000);
    IF complete_held.results IS NOT NULL THEN
        PERFORM jobq._check_results(complete_held.ids, complete_held.results);
    END IF;
    SELECT count(*) INTO v_done
    FROM jobq._finish(complete_held.ids, NULL, 'completed', NULL, true, complete_held.results);
    RETURN v_done;
END
$$;
COMMENT ON FUNCTION jobq.complete_held(bigint[], jsonb[]) IS
    'Marks jobs held by this transaction done (on commit), with their results; returns how many; never waits for another holder.';

CREATE FUNCTION jobq.complete(id bigint, lease_token uuid, result jsonb DEFAULT NULL) RETURNS boolean
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
            SELECT FROM jobq._finish(ARRAY[complete.id], ARRAY[complete.lease_token], 'completed', NULL));
    END IF;
    PERFORM jobq._check_results(ARRAY[complete.id], ARRAY[complete.result]);
    RETURN EXISTS (
        SELECT FROM jobq._finish(ARRAY[complete.id], ARRAY[complete.lease_token], 'completed', NULL, false,
                                 ARRAY[complete.result]));
END
$$;
COMMENT ON FUNCTION jobq.complete(bigint, uuid, jsonb) IS
    'Marks a job done (with its result) if still held under lease_token; false when the lease was lost or the id is unknown.';

CREATE FUNCTION jobq.complete_many(ids bigint[], lease_tokens uuid[], results jsonb[] DEFAULT NULL) RETURNS integer
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
    FROM jobq._finish(complete_many.ids, complete_many.lease_tokens, 'completed', NULL, false, complete_many.results);
    RETURN v_done;
END
$$;
COMMENT ON FUNCTION jobq.complete_many(bigint[], uuid[], jsonb[]) IS
    'Marks many jobs done in one statement (with their results); returns how many were still held under their lease tokens.';

CREATE FUNCTION jobq.complete(id bigint, lease_token text, result jsonb DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- jobq.complete with the lease token as text (JQ010 when not a UUID).
    RETURN jobq.complete(complete.id, jobq._lease_token(complete.lease_token), complete.result);
END
$$;
COMMENT ON FUNCTION jobq.complete(bigint, text, jsonb) IS
    'jobq.complete with the lease token as text (JQ010 when it is not a UUID).';

CREATE OR REPLACE FUNCTION jobq.retry(id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job jobq._job_archive;
    v_queue text;
    v_waits boolean;
BEGIN
    -- Run a job again now: a dead or cancelled job comes back with a fresh
    -- attempt budget, and the descendants its failure cancelled wait for it
    -- again; a scheduled or backing-off job runs now. A job with parents
    -- goes through its gate again: ready when they have completed, waiting
    -- for those live again, or cancelled again at once (returning false)
    -- when one is dead or cancelled and its on_parent_failure is 'cancel':
    -- retry that one. False for waiting, running, completed and unknown jobs.
    IF retry.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass a job id.';
    END IF;

    UPDATE jobq._job AS j SET run_at = now()
    WHERE j.id = retry.id AND j.status = 'ready'
    RETURNING j.queue INTO v_queue;
    IF FOUND THEN
        PERFORM pg_notify('jobq', v_queue);
        RETURN true;
    END IF;

    SELECT * INTO v_job FROM jobq._job_archive AS a
    WHERE a.id = retry.id AND a.status IN ('dead', 'cancelled')
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_waits := EXISTS (SELECT FROM jobq._job_wait AS w WHERE w.job_id = v_job.id);
    BEGIN
        INSERT INTO jobq._job (id, queue, payload, priority, run_at, attempts, max_attempts,
                               job_key, last_error, created_at, group_key, timeout, has_children, has_parents,
                               status, parked)
        VALUES (v_job.id, v_job.queue, v_job.payload, v_job.priority, now(), 0, v_job.max_attempts,
                v_job.job_key, v_job.last_error, v_job.created_at, v_job.group_key, v_job.timeout,
                EXISTS (SELECT FROM jobq._job_dep AS d WHERE d.parent_id = v_job.id),
                EXISTS (SELECT FROM jobq._job_dep AS d WHERE d.child_id = v_job.id),
                CASE WHEN v_waits THEN 'waiting' ELSE 'ready' END, v_waits);
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'jobq: job % cannot be retried: job_key % is held by an active job',
                v_job.id, pg_catalog.quote_literal(v_job.job_key)
            USING ERRCODE = 'JQ013',
                  HINT = 'Wait for the active job to finish, or cancel it with jobq.cancel(), then retry.';
    END;
    DELETE FROM jobq._job_archive AS a WHERE a.id = v_job.id;
    IF v_waits THEN
        -- Through its gate again: released, waiting, or cancelled at once.
        PERFORM jobq._gate_recount(ARRAY[v_job.id]);
        PERFORM jobq._settle(ARRAY[v_job.id]);
        IF NOT EXISTS (SELECT FROM jobq._job AS j WHERE j.id = v_job.id) THEN
            RAISE NOTICE 'jobq: job % is cancelled again: % did not complete; retry that job instead',
                v_job.id, (SELECT 'ancestor job ' || a.cancelled_by FROM jobq._job_archive AS a WHERE a.id = v_job.id);
            RETURN false;
        END IF;
    ELSE
        PERFORM pg_notify('jobq', v_job.queue);
    END IF;
    PERFORM jobq._restore_descendants(v_job.id);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.retry(bigint) IS
    'Runs a dead, cancelled or scheduled job again now (fresh attempts for dead/cancelled, whose cancelled descendants wait again; one cancelled while waiting waits again); false for waiting, running, completed or unknown ids.';

CREATE OR REPLACE FUNCTION jobq.retry_dead(queue text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
-- The argument is named queue, like the column in ON CONFLICT (queue, job_key)
-- below: resolve unqualified names to columns (the argument is always
-- written retry_dead.queue).
#variable_conflict use_column
DECLARE
    v_moved bigint[];
    v_gated bigint[];
    v_count integer;
    v_parent bigint;
BEGIN
    -- Bring every dead job of a queue back with a fresh attempt budget (one
    -- with parents through its gate again, as jobq.retry does), and the
    -- descendants their deaths cancelled back to waiting. Jobs whose
    -- job_key is held by an active job stay dead (see NOTICE).
    PERFORM jobq._check_queue(retry_dead.queue, 'queue');
    WITH dead AS (
        SELECT a.* FROM jobq._job_archive AS a
        WHERE a.queue = retry_dead.queue AND a.status = 'dead'
        ORDER BY a.id
        FOR UPDATE SKIP LOCKED
    ), moved AS (
        INSERT INTO jobq._job (id, queue, payload, priority, run_at, attempts, max_attempts,
                               job_key, last_error, created_at, group_key, timeout, has_children, has_parents,
                               status, parked)
        SELECT d.id, d.queue, d.payload, d.priority, now(), 0, d.max_attempts,
               d.job_key, d.last_error, d.created_at, d.group_key, d.timeout,
               EXISTS (SELECT FROM jobq._job_dep AS e WHERE e.parent_id = d.id),
               EXISTS (SELECT FROM jobq._job_dep AS e WHERE e.child_id = d.id),
               CASE WHEN w.job_id IS NULL THEN 'ready' ELSE 'waiting' END, w.job_id IS NOT NULL
        FROM dead AS d
        LEFT JOIN jobq._job_wait AS w ON w.job_id = d.id
        ORDER BY d.id
        ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
        RETURNING id, has_children, status
    ), removed AS (
        DELETE FROM jobq._job_archive AS a USING moved AS m WHERE a.id = m.id
        RETURNING a.id, m.has_children, m.status
    )
    SELECT coalesce(array_agg(r.id ORDER BY r.id) FILTER (WHERE r.has_children), '{}'),
           coalesce(array_agg(r.id ORDER BY r.id) FILTER (WHERE r.status = 'waiting'), '{}'),
           count(*)
    INTO v_moved, v_gated, v_count
    FROM removed AS r;
    IF v_count > 0 THEN
        PERFORM pg_notify('jobq', retry_dead.queue);
    END IF;
    IF cardinality(v_gated) > 0 THEN
        -- Jobs with parents go through their gates again (all of them
        -- dead, so their parents finished: mostly released at once).
        PERFORM jobq._gate_recount(v_gated);
        PERFORM jobq._finish_dependents(jobq._settle(v_gated), 'cancelled');
    END IF;
    FOREACH v_parent IN ARRAY v_moved LOOP
        CONTINUE WHEN NOT EXISTS (SELECT FROM jobq._job AS j WHERE j.id = v_parent);
        PERFORM jobq._restore_descendants(v_parent);
    END LOOP;
    IF EXISTS (SELECT FROM jobq._job_archive AS a WHERE a.queue = retry_dead.queue AND a.status = 'dead') THEN
        RAISE NOTICE 'jobq: some dead jobs of queue % stay dead: their job_key is held by an active job',
            pg_catalog.quote_literal(retry_dead.queue);
    END IF;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION jobq.retry_dead(text) IS
    'Brings every dead job of a queue back with a fresh attempt budget (and the descendants their deaths cancelled); returns how many.';

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
    RETURN EXISTS (SELECT FROM jobq._finish(ARRAY[cancel.id], NULL, 'cancelled', 'cancelled by ' || session_user));
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
        ARRAY(SELECT j.id FROM jobq._job AS j
              WHERE j.queue = cancel_jobs.queue
                AND CASE cancel_jobs.status
                        WHEN 'ready' THEN j.status = 'ready' AND j.run_at <= now()
                        WHEN 'scheduled' THEN j.status = 'ready' AND j.run_at > now()
                        WHEN 'running' THEN j.status = 'running'
                        WHEN 'waiting' THEN j.status = 'waiting'
                        ELSE true END
                AND (cancel_jobs.payload_contains IS NULL OR j.payload @> cancel_jobs.payload_contains)
              ORDER BY j.id),
        NULL, 'cancelled', 'cancelled by ' || session_user);
    RETURN v_cancelled;
END
$$;
COMMENT ON FUNCTION jobq.cancel_jobs(text, text, jsonb) IS
    'Cancels the live jobs of a queue (optionally only ready, scheduled, running or waiting ones, or those whose payload contains a filter); returns how many.';

CREATE OR REPLACE FUNCTION jobq.discard_dead(queue text, older_than interval DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_discarded integer;
    v_descendants integer;
BEGIN
    -- Delete the dead jobs of a queue for good (all of them, or those dead
    -- for longer than older_than), with their error history, and the
    -- descendants their deaths cancelled (in any queue; see NOTICE). Returns
    -- how many dead jobs. They cannot be retried afterwards; jobq.stats'
    -- dead_total still counts them.
    PERFORM jobq._check_queue(discard_dead.queue, 'queue');
    IF discard_dead.older_than < interval '0' THEN
        RAISE EXCEPTION 'jobq: older_than must not be negative, got %', discard_dead.older_than
            USING ERRCODE = 'JQ008', HINT = 'Pass e.g. interval ''7 days'', or NULL for every dead job.';
    END IF;
    WITH dead AS (
        SELECT a.id FROM jobq._job_archive AS a
        WHERE a.queue = discard_dead.queue AND a.status = 'dead'
          AND (discard_dead.older_than IS NULL OR a.finished_at < now() - discard_dead.older_than)
    ), gone AS (
        -- With the descendants their deaths cancelled: only a retry of
        -- their root could bring those back.
        DELETE FROM jobq._job_archive AS a
        WHERE a.id IN (SELECT d.id FROM dead AS d)
           OR (a.status = 'cancelled' AND a.cancelled_by IN (SELECT d.id FROM dead AS d))
        RETURNING a.id, a.status
    ), forgotten AS (
        DELETE FROM jobq._job_error AS e USING gone AS g WHERE e.job_id = g.id
    ), unlinked AS (
        DELETE FROM jobq._job_dep AS d USING gone AS g WHERE d.child_id = g.id
    ), ungated AS (
        DELETE FROM jobq._job_wait AS w USING gone AS g WHERE w.job_id = g.id
    )
    SELECT count(*) FILTER (WHERE g.status = 'dead'), count(*) FILTER (WHERE g.status = 'cancelled')
    INTO v_discarded, v_descendants
    FROM gone AS g;
    IF v_descendants > 0 THEN
        RAISE NOTICE 'jobq: % cancelled descendants of the discarded jobs were discarded with them', v_descendants;
    END IF;
    RETURN v_discarded;
END
$$;
COMMENT ON FUNCTION jobq.discard_dead(text, interval) IS
    'Deletes the dead jobs of a queue (those dead longer than older_than when given); returns how many.';

CREATE OR REPLACE FUNCTION jobq.prune(n integer DEFAULT 100000) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_pruned integer;
BEGIN
    -- Delete up to n finished jobs whose retention has passed (with their
    -- error history, the edges to their parents and the gate of one
    -- cancelled while waiting), except a completed job with a live child
    -- (its result stays readable until the child finishes) and a dead or
    -- cancelled job with any child jobq still knows (it must not pass for
    -- completed: a parent jobq forgot counts as completed); the
    -- rate-limit bookkeeping older than any rate window (1 day) and key
    -- completions older than any unique_for (366 days); fold the counters.
    PERFORM jobq._check_batch(prune.n, 'n', 10000000);
    WITH old AS (
        SELECT a.id FROM jobq._job_archive AS a
        WHERE a.prune_after < now()
          AND NOT EXISTS (SELECT FROM jobq._job_dep AS d
                          WHERE d.parent_id = a.id
                            AND (a.status <> 'completed' OR EXISTS (SELECT FROM jobq._job AS c WHERE c.id = d.child_id)))
        ORDER BY a.prune_after
        LIMIT prune.n
        FOR UPDATE OF a SKIP LOCKED
    ), gone AS (
        DELETE FROM jobq._job_archive AS a USING old AS o WHERE a.id = o.id
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
    RETURN v_pruned;
END
$$;
COMMENT ON FUNCTION jobq.prune(integer) IS
    'Deletes up to n finished jobs past their retention (not while a child of theirs is live); returns how many.';

CREATE FUNCTION jobq.status(id bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_status text;
BEGIN
    -- The state of one job: waiting, ready, scheduled, running, completed,
    -- dead or cancelled. (VOLATILE, as result and parent_results: called in
    -- the statement that enqueued or completed the job, it sees that.) JQ019 for an id jobq does not know (never issued,
    -- or finished and gone: completed without history, or pruned).
    IF status.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass a job id.';
    END IF;
    SELECT CASE WHEN j.status = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.status END INTO v_status
    FROM jobq._job AS j WHERE j.id = status.id;
    IF v_status IS NULL THEN
        SELECT a.status INTO v_status FROM jobq._job_archive AS a WHERE a.id = status.id;
    END IF;
    IF v_status IS NULL THEN
        RAISE EXCEPTION 'jobq: job % is unknown: never enqueued, or finished and no longer kept', status.id
            USING ERRCODE = 'JQ019',
                  HINT = 'Completed jobs are kept for the queue''s retention (result_retention when they have a result).';
    END IF;
    RETURN v_status;
END
$$;
COMMENT ON FUNCTION jobq.status(bigint) IS
    'The state of one job (waiting, ready, scheduled, running, completed, dead, cancelled); JQ019 when unknown.';

CREATE FUNCTION jobq.result(id bigint) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job record;
BEGIN
    -- The result a completed job reported (jobq.complete's result). NULL
    -- while the job is unfinished, when it completed without one, and when
    -- it is dead or cancelled (jobq.status tells these apart). JQ019 for an
    -- id jobq does not know.
    IF result.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass a job id.';
    END IF;
    IF EXISTS (SELECT FROM jobq._job AS j WHERE j.id = result.id) THEN
        RETURN NULL;
    END IF;
    SELECT a.status, a.result INTO v_job FROM jobq._job_archive AS a WHERE a.id = result.id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'jobq: job % is unknown: never enqueued, or finished and no longer kept', result.id
            USING ERRCODE = 'JQ019',
                  HINT = 'A result is kept for the queue''s result_retention (or retention, when longer).';
    END IF;
    RETURN CASE WHEN v_job.status = 'completed' THEN v_job.result END;
END
$$;
COMMENT ON FUNCTION jobq.result(bigint) IS
    'The result of a completed job; NULL while unfinished, without one, or dead/cancelled; JQ019 when unknown.';

CREATE FUNCTION jobq.parent_results(id bigint) RETURNS TABLE (parent_id bigint, result jsonb)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- One row per parent of a job (its depends_on, or a callback's members),
    -- by parent id, with the result that parent completed with: NULL when
    -- it has none, has not completed, or jobq no longer keeps it (a parent's
    -- result is kept while a child of it is live). No rows for a job without
    -- parents; JQ019 for an id jobq does not know.
    IF parent_results.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass a job id.';
    END IF;
    IF NOT EXISTS (SELECT FROM jobq._job AS j WHERE j.id = parent_results.id)
       AND NOT EXISTS (SELECT FROM jobq._job_archive AS a WHERE a.id = parent_results.id) THEN
        RAISE EXCEPTION 'jobq: job % is unknown: never enqueued, or finished and no longer kept', parent_results.id
            USING ERRCODE = 'JQ019', HINT = 'Read the results of a job''s parents while it is live, e.g. in its handler.';
    END IF;
    RETURN QUERY
    SELECT d.parent_id, a.result
    FROM jobq._job_dep AS d
    LEFT JOIN jobq._job_archive AS a ON a.id = d.parent_id AND a.status = 'completed'
    WHERE d.child_id = parent_results.id
    ORDER BY d.parent_id;
END
$$;
COMMENT ON FUNCTION jobq.parent_results(bigint) IS
    'The parents of a job with the results they completed with (NULL when none); JQ019 when the job is unknown.';

CREATE FUNCTION jobq.watch(id bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Ask to be told when a job finishes: a live job is marked watched, and
    -- finishing it (completed, dead or cancelled) sends NOTIFY jobq_finished
    -- with its id. Returns its state now, as jobq.status() (JQ019 for an
    -- unknown id). LISTEN jobq_finished before calling this: a job that
    -- finishes in between is then either notified or already finished here.
    -- Jobs nobody watches send nothing when they finish.
    -- The mark comes first: a job finishing concurrently is then either
    -- marked before it goes (and notifies) or gone when the state is read.
    IF watch.id IS NOT NULL THEN
        UPDATE jobq._job AS j SET watched = true WHERE j.id = watch.id AND NOT j.watched;
    END IF;
    RETURN jobq.status(watch.id);
END
$$;
COMMENT ON FUNCTION jobq.watch(bigint) IS
    'Marks a live job so that finishing it sends NOTIFY jobq_finished with its id; returns its state (as jobq.status).';

CREATE FUNCTION jobq.configure_queue(
    queue text,
    max_attempts integer DEFAULT NULL,
    backoff_base interval DEFAULT NULL,
    backoff_cap interval DEFAULT NULL,
    backoff_jitter double precision DEFAULT NULL,
    lease interval DEFAULT NULL,
    retention interval DEFAULT NULL,
    dead_retention interval DEFAULT NULL,
    max_payload_bytes integer DEFAULT NULL,
    concurrency integer DEFAULT NULL,
    rate_limit integer DEFAULT NULL,
    rate_interval interval DEFAULT NULL,
    timeout interval DEFAULT NULL,
    result_retention interval DEFAULT NULL
) RETURNS jobq._queue
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_constraint text;
    v_setting record;
BEGIN
    -- Set the given settings of a queue (NULL arguments leave a setting as
    -- it is; concurrency => 0, rate_limit => 0 or timeout => interval '0'
    -- removes that limit); returns the effective settings. New jobs and new
    -- failures use them; max_attempts and timeout are fixed on a job when it
    -- is enqueued. A new concurrency limit counts the jobs running now; a
    -- claim already under way when it commits may still lease past it once.
    -- The short durations (backoff, lease, rate interval, timeout) must be
    -- fixed lengths: no months, days and time of one sign. result_retention:
    -- how long a completed job with a result stays readable (jobq.result),
    -- at the least; retention when that is longer.
    PERFORM jobq._check_queue(configure_queue.queue, 'queue');
    FOR v_setting IN
        SELECT d.name, d.value
        FROM (VALUES ('backoff_base', configure_queue.backoff_base), ('backoff_cap', configure_queue.backoff_cap),
                     ('lease', configure_queue.lease), ('rate_interval', configure_queue.rate_interval),
                     ('timeout', configure_queue.timeout)) AS d(name, value)
        WHERE NOT jobq._fixed_length(d.value)
    LOOP
        RAISE EXCEPTION 'jobq: setting % must be a duration without months or years, its days and time of one sign, got %',
                v_setting.name, v_setting.value
            USING ERRCODE = 'JQ012', HINT = 'Write it in seconds, minutes, hours or days, e.g. interval ''30 seconds''.';
    END LOOP;
    INSERT INTO jobq._queue AS q (queue, max_attempts, backoff_base, backoff_cap, backoff_jitter,
                                  lease, retention, dead_retention, max_payload_bytes,
                                  concurrency, rate_limit, rate_interval, timeout, result_retention)
    VALUES (configure_queue.queue, configure_queue.max_attempts, configure_queue.backoff_base,
            configure_queue.backoff_cap, configure_queue.backoff_jitter, configure_queue.lease,
            configure_queue.retention, configure_queue.dead_retention, configure_queue.max_payload_bytes,
            nullif(configure_queue.concurrency, 0), nullif(configure_queue.rate_limit, 0),
            configure_queue.rate_interval, nullif(configure_queue.timeout, interval '0'),
            configure_queue.result_retention)
    ON CONFLICT ON CONSTRAINT _queue_pkey DO UPDATE
    SET max_attempts = coalesce(excluded.max_attempts, q.max_attempts),
        backoff_base = coalesce(excluded.backoff_base, q.backoff_base),
        backoff_cap = coalesce(excluded.backoff_cap, q.backoff_cap),
        backoff_jitter = coalesce(excluded.backoff_jitter, q.backoff_jitter),
        lease = coalesce(excluded.lease, q.lease),
        retention = coalesce(excluded.retention, q.retention),
        dead_retention = coalesce(excluded.dead_retention, q.dead_retention),
        max_payload_bytes = coalesce(excluded.max_payload_bytes, q.max_payload_bytes),
        concurrency = CASE WHEN configure_queue.concurrency = 0 THEN NULL
                           ELSE coalesce(excluded.concurrency, q.concurrency) END,
        rate_limit = CASE WHEN configure_queue.rate_limit = 0 THEN NULL
                          ELSE coalesce(excluded.rate_limit, q.rate_limit) END,
        rate_interval = coalesce(excluded.rate_interval, q.rate_interval),
        timeout = CASE WHEN configure_queue.timeout = interval '0' THEN NULL
                       ELSE coalesce(excluded.timeout, q.timeout) END,
        result_retention = coalesce(excluded.result_retention, q.result_retention),
        updated_at = now();
    IF configure_queue.concurrency > 0 THEN
        -- A limited queue counts its running jobs by the parked index:
        -- park the leases granted before the limit.
        UPDATE jobq._job AS j SET parked = true
        WHERE j.queue = configure_queue.queue AND NOT j.parked AND j.status = 'running';
    END IF;
    RETURN jobq._settings(configure_queue.queue);
EXCEPTION WHEN check_violation THEN
    GET STACKED DIAGNOSTICS v_constraint := CONSTRAINT_NAME;
    RAISE EXCEPTION 'jobq: setting % is out of range', regexp_replace(v_constraint, '^queue_|_range$', '', 'g')
        USING ERRCODE = 'JQ012',
              HINT = 'Ranges: max_attempts 1..1000, backoff_base 0..1 day, backoff_cap 0..30 days, '
                     'backoff_jitter 0..1, lease 1 s..1 day, retention 0..3650 days, '
                     'dead_retention 1 s..3650 days, max_payload_bytes 1..104857600, '
                     'concurrency 1..10000 (0: no limit), rate_limit 1..1000000 (0: no limit), '
                     'rate_interval 1 s..1 day, timeout 1 s..1 day (0: none), result_retention 0..3650 days.';
END
$$;
COMMENT ON FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer, integer, integer, interval, interval, interval)
    IS 'Sets per-queue settings (NULL leaves a setting unchanged, 0 removes a concurrency or rate limit or a timeout); returns the effective settings.';

CREATE OR REPLACE FUNCTION jobq.reset_queue(queue text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Drop every setting override of a queue: it goes back to the defaults.
    -- A paused queue stays paused (use jobq.resume()).
    PERFORM jobq._check_queue(reset_queue.queue, 'queue');
    DELETE FROM jobq._queue AS q WHERE q.queue = reset_queue.queue AND NOT coalesce(q.paused, false);
    IF FOUND THEN
        RETURN true;
    END IF;
    UPDATE jobq._queue AS q
    SET max_attempts = NULL, backoff_base = NULL, backoff_cap = NULL, backoff_jitter = NULL, lease = NULL,
        retention = NULL, dead_retention = NULL, max_payload_bytes = NULL, concurrency = NULL,
        rate_limit = NULL, rate_interval = NULL, timeout = NULL, result_retention = NULL, updated_at = now()
    WHERE q.queue = reset_queue.queue;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION jobq.reset_queue(text) IS 'Removes a queue''s setting overrides; false when it had none.';

---------------------------------------------------------------------------
-- views
---------------------------------------------------------------------------

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

CREATE VIEW jobq.job_dependencies AS
    -- The dependency edges of the jobs jobq still knows: child_id waits for
    -- (or waited for) parent_id. An edge lives as long as its child; the
    -- parent may be gone already (completed without history, or pruned).
    SELECT d.child_id, d.parent_id
    FROM jobq._job_dep AS d;
COMMENT ON VIEW jobq.job_dependencies IS 'Job dependencies: child_id depends on parent_id (depends_on, or a batch callback''s members).';

CREATE OR REPLACE FUNCTION jobq.metrics() RETURNS TABLE (name text, labels jsonb, value double precision)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    -- Prometheus-style samples of every known queue, from jobq.stats (so
    -- every scrape agrees, whichever host serves it): jobq_jobs by state
    -- (zeros included), jobq_oldest_ready_age_seconds (0 when nothing is
    -- ready), and the completed / failed-attempt / dead-lettered totals of
    -- the counters (never reset by pruning). Ordered by name, then labels.
    SELECT m.name, m.labels, m.value
    FROM jobq.stats AS s
    CROSS JOIN LATERAL (VALUES
        ('jobq_jobs', pg_catalog.jsonb_build_object('queue', s.queue, 'state', 'ready'), s.ready::double precision),
        ('jobq_jobs', pg_catalog.jsonb_build_object('queue', s.queue, 'state', 'scheduled'), s.scheduled::double precision),
        ('jobq_jobs', pg_catalog.jsonb_build_object('queue', s.queue, 'state', 'running'), s.running::double precision),
        ('jobq_jobs', pg_catalog.jsonb_build_object('queue', s.queue, 'state', 'dead'), s.dead::double precision),
        ('jobq_jobs', pg_catalog.jsonb_build_object('queue', s.queue, 'state', 'waiting'), s.waiting::double precision),
        ('jobq_oldest_ready_age_seconds', pg_catalog.jsonb_build_object('queue', s.queue),
         coalesce(pg_catalog.date_part('epoch', s.oldest_ready_age), 0)),
        ('jobq_completed_total', pg_catalog.jsonb_build_object('queue', s.queue), s.completed_total::double precision),
        ('jobq_failed_total', pg_catalog.jsonb_build_object('queue', s.queue), s.failed_total::double precision),
        ('jobq_dead_total', pg_catalog.jsonb_build_object('queue', s.queue), s.dead_total::double precision)
    ) AS m(name, labels, value)
    ORDER BY m.name, m.labels
$$;
COMMENT ON FUNCTION jobq.metrics() IS
    'Metrics of every known queue as (name, labels, value) rows: jobq_jobs{queue,state}, jobq_oldest_ready_age_seconds, jobq_*_total.';

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA jobq FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
    jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text),
    jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text)
TO jobq_producer;
GRANT EXECUTE ON FUNCTION
    jobq.complete_held(bigint[], jsonb[]),
    jobq.complete(bigint, uuid, jsonb),
    jobq.complete_many(bigint[], uuid[], jsonb[]),
    jobq.complete(bigint, text, jsonb)
TO jobq_worker;
GRANT EXECUTE ON FUNCTION
    jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer, integer, integer, interval, interval, interval)
TO jobq_admin;
GRANT EXECUTE ON FUNCTION jobq.enqueue_callback(text, jsonb, bigint[], timestamptz, integer, integer) TO jobq_producer;
GRANT EXECUTE ON FUNCTION jobq.status(bigint), jobq.result(bigint), jobq.parent_results(bigint), jobq.watch(bigint)
    TO jobq_producer, jobq_worker;
GRANT SELECT ON jobq.job_dependencies TO jobq_viewer;
GRANT SELECT ON jobq.job_dependencies, jobq._job_dep, jobq._job_wait TO jobq_admin;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

-- jobq 0.4.0 → 0.5.0: what the dashboard and the metrics read. One line per change:
--   * role jobq_viewer (NOLOGIN): USAGE on schema jobq, SELECT on the public views, EXECUTE on
--     jobq.version() and jobq.metrics(), nothing else; jobq_admin is a member of it
--   * jobq.metrics() (name, labels, value): jobq_jobs{queue,state}, jobq_oldest_ready_age_seconds{queue},
--     jobq_completed_total, jobq_failed_total, jobq_dead_total{queue}; for jobq_viewer, jobq_worker, jobq_admin
--   * error history: jobq._job_error keeps the error of every failed attempt (fail, fail_held, reaped
--     leases), the last 25 per job, deleted with its job; view jobq.job_errors
--   * jobq._job.heartbeat_at: set by heartbeat, cleared when a job stops running (NULL until the first
--     heartbeat of a lease); jobq.jobs gains heartbeat_at as its last column
--   * view jobq.workers: per worker name holding running jobs, its queues, jobs, oldest start, last
--     heartbeat and next lease expiry
--   * view jobq.throughput: completed, failed attempts and dead per queue and minute over the last hour
--   * jobq.run_now(id): a scheduled job runs now (and its workers are woken); admin only
--   * indexes on jobq._job_archive (queue, id) and (queue, job_key, id): jobq.jobs paged newest first by
--     id within a queue, and filtered by job_key, stays fast however large the archive
--   * the queue setting defaults live in the private view jobq._queue_defaults, which jobq._settings()
--     and jobq.queues read (jobq.queues calls no function, so jobq_viewer can read it)
--
-- Applied by ALTER EXTENSION jobq UPDATE TO '0.5.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.4.0 is installed.

-- Resolve every unqualified operator and type below in pg_catalog only,
-- whatever the upgrading session's search_path was, and leave that
-- search_path as it was: under CREATE/ALTER EXTENSION the setting is local to
-- the command (a plain SET here would outlive it, and the session's next
-- CREATE TABLE would land in pg_catalog); under psql -f or pyqueue it is put
-- back at the end of this file.
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
    IF jobq.version() <> '0.4.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.4.0 to 0.5.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.5.0');

---------------------------------------------------------------------------
-- roles
---------------------------------------------------------------------------

DO $roles$
BEGIN
    -- Roles are cluster-wide: another database may have made it already.
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'jobq_viewer') THEN
        BEGIN
            CREATE ROLE jobq_viewer NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
END
$roles$;
GRANT jobq_viewer TO jobq_admin;

---------------------------------------------------------------------------
-- tables
---------------------------------------------------------------------------

ALTER TABLE jobq._job ADD COLUMN heartbeat_at timestamptz;
COMMENT ON COLUMN jobq._job.heartbeat_at IS
    'The last heartbeat of the current lease; NULL until its first heartbeat (claim does not set it) and when not running.';

-- A queue's finished jobs newest first (jobq.jobs paged by id, keyset),
-- and those of one job_key (finding a key is a seek, however large the archive).
CREATE INDEX _job_archive_queue_idx ON jobq._job_archive (queue, id);
CREATE INDEX _job_archive_key_idx ON jobq._job_archive (queue, job_key, id)
    WHERE job_key IS NOT NULL;

CREATE TABLE jobq._job_error (
    job_id     bigint NOT NULL,
    attempt    integer NOT NULL,
    error      text NOT NULL,
    failed_at  timestamptz NOT NULL,
    worker     text
) WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE jobq._job_error IS 'The error of each failed attempt (the last 25 per job), as long as the job exists. Private: read jobq.job_errors.';
CREATE INDEX _job_error_job_idx ON jobq._job_error (job_id, failed_at);

DO $dump$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'jobq') THEN
        PERFORM pg_catalog.pg_extension_config_dump('jobq._job_error', '');
    END IF;
END
$dump$;

CREATE VIEW jobq._queue_defaults AS
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
           false AS paused;
COMMENT ON VIEW jobq._queue_defaults IS 'Built-in defaults of the queue settings (one row). Private: read jobq.queues.';

---------------------------------------------------------------------------
-- functions: new, and changed (as in jobq--0.5.0.sql)
---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '0.5.0'::text
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
           q.timeout                                  -- NULL: handlers run as long as they take
    INTO v_settings
    FROM jobq._queue_defaults AS d
    LEFT JOIN jobq._queue AS q ON q.queue = p_queue;
    RETURN v_settings;
END
$$;
COMMENT ON FUNCTION jobq._settings(text) IS 'Effective settings of a queue (overrides from jobq._queue over built-in defaults).';

CREATE OR REPLACE FUNCTION jobq._finish(p_ids bigint[], p_lease_tokens uuid[], p_status text, p_error text,
                             p_held boolean DEFAULT false)
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
    -- set) has any. Returns the ids that left the live table.
    IF p_held THEN
        -- Only jobs this transaction holds (or nobody does): a job another
        -- transaction holds is skipped, never waited for.
        p_ids := ARRAY(SELECT j.id FROM jobq._job AS j
                       WHERE j.id = ANY (p_ids) AND j.status = 'ready'
                       FOR UPDATE SKIP LOCKED);
    END IF;
    IF p_status = 'completed' AND NOT jobq._history_kept() THEN
        -- The common case, lean: no history to write, so the rows are not copied.
        WITH gone AS (
            DELETE FROM jobq._job AS j
            USING unnest(p_ids, p_lease_tokens) AS f(id, lease_token)
            WHERE j.id = f.id
              AND (f.lease_token IS NULL OR j.lease_token = f.lease_token)
              AND (NOT p_held OR j.status = 'ready')
            RETURNING j.id, j.queue, j.group_key, j.job_key, j.last_error IS NOT NULL AS erred
        )
        SELECT array_agg(g.id), array_agg(g.queue), array_agg(DISTINCT g.queue) FILTER (WHERE g.group_key IS NOT NULL),
               array_agg(g.id) FILTER (WHERE g.job_key IS NOT NULL),
               array_agg(g.queue) FILTER (WHERE g.job_key IS NOT NULL),
               array_agg(g.job_key) FILTER (WHERE g.job_key IS NOT NULL),
               array_agg(g.id) FILTER (WHERE g.erred)
        INTO v_ids, v_queues, v_wake, v_keyed_ids, v_keyed_queues, v_keys, v_erred
        FROM gone AS g;
        IF v_ids IS NULL THEN
            RETURN;
        END IF;
        IF v_erred IS NOT NULL THEN
            -- Only jobs that failed before have an error history to delete
            -- (the common case never opens jobq._job_error).
            DELETE FROM jobq._job_error AS e WHERE e.job_id = ANY (v_erred);
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
            USING unnest(p_ids, p_lease_tokens) AS f(id, lease_token)
            WHERE j.id = f.id
              AND (f.lease_token IS NULL OR j.lease_token = f.lease_token)
              AND (NOT p_held OR j.status = 'ready')
            RETURNING j.*
        ), settings AS (
            SELECT s.*
            FROM (SELECT DISTINCT g.queue FROM gone AS g) AS q,
                 LATERAL jobq._settings(q.queue) AS s
        ), kept AS (
            INSERT INTO jobq._job_archive
                (id, queue, payload, status, priority, run_at, attempts, max_attempts,
                 job_key, worker, last_error, created_at, started_at, finished_at, prune_after, group_key, timeout)
            SELECT g.id, g.queue, g.payload, p_status, g.priority, g.run_at, g.attempts + p_held::integer,
                   g.max_attempts, g.job_key, CASE WHEN p_held THEN session_user ELSE g.worker END,
                   coalesce(p_error, g.last_error), g.created_at,
                   CASE WHEN p_held THEN v_now ELSE g.started_at END,
                   v_now, v_now + CASE WHEN p_status = 'completed' THEN s.retention ELSE s.dead_retention END,
                   g.group_key, g.timeout
            FROM gone AS g
            JOIN settings AS s ON s.queue = g.queue
            WHERE p_status <> 'completed' OR s.retention > interval '0'
        ), forgotten AS (
            -- Completed jobs the history does not keep take their errors along.
            DELETE FROM jobq._job_error AS e
            USING gone AS g
            JOIN settings AS s ON s.queue = g.queue
            WHERE e.job_id = g.id AND g.last_error IS NOT NULL
              AND p_status = 'completed' AND s.retention <= interval '0'
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
               array_agg(DISTINCT g.queue) FILTER (WHERE g.group_key IS NOT NULL OR s.concurrency IS NOT NULL)
        INTO v_ids, v_wake
        FROM gone AS g
        JOIN settings AS s ON s.queue = g.queue;
    END IF;
    IF cardinality(v_wake) > 0 THEN
        PERFORM pg_notify('jobq', w.queue) FROM (SELECT DISTINCT u.queue FROM unnest(v_wake) AS u(queue)) AS w;
    END IF;
    RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
END
$$;
COMMENT ON FUNCTION jobq._finish(bigint[], uuid[], text, text, boolean) IS
    'Deletes live jobs (fenced by lease token, or held by this transaction), counts them and keeps the history they need.';

CREATE FUNCTION jobq._record_errors(p_ids bigint[], p_attempts integer[], p_errors text[], p_workers text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Keep the error of each failed attempt (job, attempt, error, worker, one
    -- per array position) in jobq._job_error, and of each of these jobs only
    -- the last 25: a job failing for days keeps a bounded history.
    INSERT INTO jobq._job_error (job_id, attempt, error, failed_at, worker)
    SELECT u.id, u.attempt, u.error, clock_timestamp(), u.worker
    FROM unnest(p_ids, p_attempts, p_errors, p_workers) AS u(id, attempt, error, worker);
    DELETE FROM jobq._job_error AS e
    USING (SELECT u.id,
                  (SELECT k.failed_at FROM jobq._job_error AS k
                   WHERE k.job_id = u.id
                   ORDER BY k.failed_at DESC
                   OFFSET 24 LIMIT 1) AS oldest_kept
           FROM unnest(p_ids) AS u(id)) AS c
    WHERE e.job_id = c.id AND e.failed_at < c.oldest_kept;
END
$$;
COMMENT ON FUNCTION jobq._record_errors(bigint[], integer[], text[], text[]) IS
    'Records the error of failed attempts in jobq._job_error, keeping the last 25 per job.';

CREATE OR REPLACE FUNCTION jobq.fail_held(id bigint, error text, retry_at timestamptz DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_job jobq._job;
    v_settings jobq._queue;
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
    INSERT INTO jobq._counter (queue, bucket, failed) VALUES (v_job.queue, date_trunc('minute', now()), 1);
    PERFORM jobq._record_errors(ARRAY[v_job.id], ARRAY[v_job.attempts + 1], ARRAY[v_error], ARRAY[session_user::text]);
    IF v_job.attempts + 1 >= v_job.max_attempts THEN
        PERFORM jobq._finish(ARRAY[v_job.id], NULL, 'dead', v_error, true);
        RETURN true;
    END IF;
    v_settings := jobq._settings(v_job.queue);
    UPDATE jobq._job AS j
    SET attempts = j.attempts + 1,
        run_at = coalesce(fail_held.retry_at,
                          now() + jobq._backoff_delay(v_job.attempts + 1, v_settings.backoff_base,
                                                      v_settings.backoff_cap, v_settings.backoff_jitter,
                                                      random())),
        last_error = v_error,
        worker = session_user,
        started_at = clock_timestamp()
    WHERE j.id = v_job.id;
    PERFORM pg_notify('jobq', v_job.queue);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.fail_held(bigint, text, timestamptz) IS
    'Records a failed attempt of a job held by this transaction (backoff or dead letter); false when not held.';

CREATE OR REPLACE FUNCTION jobq.fail(id bigint, error text, lease_token uuid, retry_at timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_job jobq._job;
    v_settings jobq._queue;
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
    INSERT INTO jobq._counter (queue, bucket, failed) VALUES (v_job.queue, date_trunc('minute', now()), 1);
    PERFORM jobq._record_errors(ARRAY[v_job.id], ARRAY[v_job.attempts], ARRAY[v_error], ARRAY[v_job.worker]);

    IF v_job.attempts >= v_job.max_attempts THEN
        PERFORM jobq._finish(ARRAY[v_job.id], ARRAY[v_job.lease_token], 'dead', v_error);
        RETURN true;
    END IF;

    v_settings := jobq._settings(v_job.queue);
    UPDATE jobq._job AS j
    SET status = 'ready',
        parked = false,
        run_at = coalesce(fail.retry_at,
                          now() + jobq._backoff_delay(v_job.attempts, v_settings.backoff_base,
                                                      v_settings.backoff_cap, v_settings.backoff_jitter,
                                                      random())),
        lease_token = NULL,
        lease_expires_at = NULL,
        heartbeat_at = NULL,
        last_error = v_error
    WHERE j.id = v_job.id;
    -- A freed concurrency slot or group, or a retry already due: let workers look.
    PERFORM pg_notify('jobq', v_job.queue);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.fail(bigint, text, uuid, timestamptz) IS
    'Records a failure: retries after backoff (or at retry_at) or dead-letters when out of attempts; false when the lease was lost.';

CREATE OR REPLACE FUNCTION jobq.heartbeat(id bigint, lease_token uuid, extend interval DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_queue text;
BEGIN
    -- Extend the lease of a job still held under lease_token to now() +
    -- extend (default: the queue's lease), and note the time (heartbeat_at).
    -- False when the lease was lost. A job that lives to be heart-beaten is
    -- long-running: it is parked (out of the claim index), so claims do not
    -- step over it while it runs.
    PERFORM jobq._check_lease_args(heartbeat.id, heartbeat.lease_token);
    PERFORM jobq._check_interval(heartbeat.extend, 'extend', interval '1 second', interval '1 day');
    UPDATE jobq._job AS j
    SET lease_expires_at = clock_timestamp()
                           + coalesce(heartbeat.extend, (jobq._settings(j.queue)).lease),
        heartbeat_at = clock_timestamp(),
        parked = true
    WHERE j.id = heartbeat.id AND j.lease_token = heartbeat.lease_token
    RETURNING j.queue INTO v_queue;
    RETURN v_queue IS NOT NULL;
END
$$;
COMMENT ON FUNCTION jobq.heartbeat(bigint, uuid, interval) IS
    'Extends a lease held under lease_token; false when the lease was lost.';

CREATE OR REPLACE FUNCTION jobq.release(id bigint, lease_token uuid) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_queue text;
BEGIN
    -- Hand a claimed job back untouched (a worker shutting down with jobs it
    -- never started): ready again at its old run_at, the attempt not spent.
    -- False when the lease was lost.
    PERFORM jobq._check_lease_args(release.id, release.lease_token);
    UPDATE jobq._job AS j
    SET status = 'ready',
        parked = false,
        attempts = greatest(j.attempts - 1, 0),
        lease_token = NULL,
        lease_expires_at = NULL,
        heartbeat_at = NULL
    WHERE j.id = release.id AND j.lease_token = release.lease_token
    RETURNING j.queue INTO v_queue;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('jobq', v_queue);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.release(bigint, uuid) IS
    'Returns a claimed job to the queue without spending an attempt; false when the lease was lost.';

CREATE OR REPLACE FUNCTION jobq.snooze(id bigint, lease_token uuid, run_at timestamptz) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_queue text;
BEGIN
    -- A worker reschedules the job it holds to run_at, without spending an
    -- attempt (not a failure: e.g. "the report is not ready yet").
    -- False when the lease was lost.
    PERFORM jobq._check_lease_args(snooze.id, snooze.lease_token);
    PERFORM jobq._check_time(snooze.run_at, 'run_at');
    UPDATE jobq._job AS j
    SET status = 'ready',
        parked = false,
        run_at = snooze.run_at,
        attempts = greatest(j.attempts - 1, 0),
        lease_token = NULL,
        lease_expires_at = NULL,
        heartbeat_at = NULL
    WHERE j.id = snooze.id AND j.lease_token = snooze.lease_token
    RETURNING j.queue INTO v_queue;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    -- A freed slot or group, or a run_at already due: let workers look.
    PERFORM pg_notify('jobq', v_queue);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.snooze(bigint, uuid, timestamptz) IS
    'Reschedules a held job to run_at without spending an attempt; false when the lease was lost.';

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
    -- Rows busy elsewhere are skipped, never waited for.
    UPDATE jobq._job AS j SET parked = true
    WHERE j.id IN (SELECT l.id FROM jobq._job AS l
                   WHERE l.status = 'running' AND NOT l.parked AND l.started_at < now() - interval '10 seconds'
                   FOR UPDATE SKIP LOCKED);
    PERFORM jobq._fold_counters();
    PERFORM jobq._forget_taken();
    RETURN cardinality(v_retry) + cardinality(v_dead);
END
$$;
COMMENT ON FUNCTION jobq.reap(integer) IS
    'Returns up to n jobs with an expired lease to the queue (or to dead letter when out of attempts); returns how many.';

CREATE FUNCTION jobq.run_now(id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue text;
BEGIN
    -- Run a scheduled job (ready, run_at in the future) now: its run_at
    -- becomes now() and its queue's workers are woken, as enqueue does.
    -- False for unknown ids and jobs in any other state (ready now, running,
    -- finished): jobq.retry() is for dead and cancelled ones.
    IF run_now.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass the id of a scheduled job.';
    END IF;
    UPDATE jobq._job AS j SET run_at = now()
    WHERE j.id = run_now.id AND j.status = 'ready' AND j.run_at > now()
    RETURNING j.queue INTO v_queue;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('jobq', v_queue);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.run_now(bigint) IS
    'Runs a scheduled job now (run_at = now(), workers woken); false for unknown ids and jobs not scheduled.';

CREATE OR REPLACE FUNCTION jobq.discard_dead(queue text, older_than interval DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_discarded integer;
BEGIN
    -- Delete the dead jobs of a queue for good (all of them, or those dead
    -- for longer than older_than), with their error history. Returns how
    -- many. They cannot be retried afterwards; jobq.stats' dead_total still
    -- counts them.
    PERFORM jobq._check_queue(discard_dead.queue, 'queue');
    IF discard_dead.older_than < interval '0' THEN
        RAISE EXCEPTION 'jobq: older_than must not be negative, got %', discard_dead.older_than
            USING ERRCODE = 'JQ008', HINT = 'Pass e.g. interval ''7 days'', or NULL for every dead job.';
    END IF;
    WITH gone AS (
        DELETE FROM jobq._job_archive AS a
        WHERE a.queue = discard_dead.queue AND a.status = 'dead'
          AND (discard_dead.older_than IS NULL OR a.finished_at < now() - discard_dead.older_than)
        RETURNING a.id
    ), forgotten AS (
        DELETE FROM jobq._job_error AS e USING gone AS g WHERE e.job_id = g.id
    )
    SELECT count(*) INTO v_discarded FROM gone;
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
    -- error history), the
    -- rate-limit bookkeeping older than any rate window (1 day) and key
    -- completions older than any unique_for (366 days); fold the counters.
    PERFORM jobq._check_batch(prune.n, 'n', 10000000);
    WITH old AS (
        SELECT a.id FROM jobq._job_archive AS a
        WHERE a.prune_after < now()
        ORDER BY a.prune_after
        LIMIT prune.n
        FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM jobq._job_archive AS a USING old AS o WHERE a.id = o.id
        RETURNING a.id, a.last_error IS NOT NULL AS erred
    ), forgotten AS (
        DELETE FROM jobq._job_error AS e USING gone AS g WHERE e.job_id = g.id AND g.erred
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
    'Deletes up to n finished jobs past their retention; returns how many.';

---------------------------------------------------------------------------
-- views, and the function that reads them
---------------------------------------------------------------------------

CREATE OR REPLACE VIEW jobq.jobs AS
    -- Every job jobq still knows, live or finished, with one status column:
    -- ready, scheduled, running, completed, dead or cancelled. heartbeat_at:
    -- the last heartbeat of a running job's lease (NULL before its first,
    -- and for jobs not running). Paged newest first by id within a queue,
    -- both halves read an index (the primary key, and (queue, id) of the
    -- archive).
    SELECT j.id, j.queue, j.payload,
           CASE WHEN j.status = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.status END AS status,
           j.priority::integer AS priority, j.run_at, j.attempts, j.max_attempts, j.job_key, j.worker,
           j.lease_expires_at, j.last_error, j.created_at, j.started_at, NULL::timestamptz AS finished_at,
           j.group_key, j.timeout, j.heartbeat_at
    FROM jobq._job AS j
    UNION ALL
    SELECT a.id, a.queue, a.payload, a.status, a.priority::integer, a.run_at, a.attempts, a.max_attempts,
           a.job_key, a.worker, NULL::timestamptz, a.last_error, a.created_at, a.started_at, a.finished_at,
           a.group_key, a.timeout, NULL::timestamptz
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
           q.timeout
    FROM (SELECT c.queue FROM jobq._queue AS c
          UNION SELECT j.queue FROM jobq._job AS j
          UNION SELECT a.queue FROM jobq._job_archive AS a WHERE a.status = 'dead') AS n
    CROSS JOIN jobq._queue_defaults AS d
    LEFT JOIN jobq._queue AS q ON q.queue = n.queue;
COMMENT ON VIEW jobq.queues IS 'Effective settings (overrides over defaults) of every known queue; 0 concurrency or rate_limit: no limit.';

CREATE VIEW jobq.workers AS
    -- One row per worker name holding running jobs now: its queues, how many
    -- jobs, when the oldest started, its last heartbeat (NULL when none of
    -- its leases was heart-beaten yet) and the next of its leases to expire.
    -- Claims without a worker name show as one row with worker NULL.
    SELECT j.worker,
           array_agg(DISTINCT j.queue ORDER BY j.queue) AS queues,
           count(*) AS jobs,
           min(j.started_at) AS oldest_started_at,
           max(j.heartbeat_at) AS last_heartbeat_at,
           min(j.lease_expires_at) AS next_lease_expires_at
    FROM jobq._job AS j
    WHERE j.status = 'running'
    GROUP BY j.worker;
COMMENT ON VIEW jobq.workers IS 'The workers holding running jobs now: queues, job count, oldest start, last heartbeat, next lease expiry.';

CREATE VIEW jobq.throughput AS
    -- Per queue and minute over the last hour (the current minute and the 59
    -- before it): jobs completed, failed attempts and jobs dead-lettered,
    -- from the counters (history is never scanned). A minute counts what
    -- finished in transactions that started in it; minutes with nothing are
    -- absent.
    SELECT c.queue, c.bucket AS minute,
           sum(c.completed)::bigint AS completed, sum(c.failed)::bigint AS failed, sum(c.dead)::bigint AS dead
    FROM jobq._counter AS c
    WHERE c.bucket >= date_trunc('minute', now()) - interval '59 minutes'
    GROUP BY c.queue, c.bucket;
COMMENT ON VIEW jobq.throughput IS 'Completed jobs, failed attempts and dead-lettered jobs per queue and minute over the last hour.';

CREATE VIEW jobq.job_errors AS
    -- The error of every failed attempt of the jobs jobq still knows (the
    -- last 25 per job; jobq.jobs.last_error is the latest): from jobq.fail,
    -- jobq.fail_held, and leases that expired (jobq.reap). attempt starts
    -- again at 1 after a retry of a dead job: failed_at orders them.
    SELECT e.job_id, e.attempt, e.error, e.failed_at, e.worker
    FROM jobq._job_error AS e;
COMMENT ON VIEW jobq.job_errors IS 'The error of each failed attempt of a job (the last 25 per job), with its attempt, time and worker.';

CREATE FUNCTION jobq.metrics() RETURNS TABLE (name text, labels jsonb, value double precision)
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
-- privileges (new objects)
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA jobq FROM PUBLIC;

GRANT USAGE ON SCHEMA jobq TO jobq_viewer;
GRANT EXECUTE ON FUNCTION jobq.run_now(bigint) TO jobq_admin;
GRANT EXECUTE ON FUNCTION jobq.version(), jobq.metrics() TO jobq_viewer;
GRANT SELECT ON jobq.stats, jobq.jobs, jobq.queues, jobq.schedules, jobq.workers, jobq.throughput,
    jobq.job_errors TO jobq_viewer;
GRANT EXECUTE ON FUNCTION jobq.metrics() TO jobq_worker, jobq_admin;
GRANT SELECT ON jobq._job_error, jobq._queue_defaults TO jobq_admin;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

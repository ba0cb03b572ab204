-- jobq 0.10.0 → 0.11.0. One line per change:
--   * jobq.enqueue(): a job without key, group, timeout or parents is inserted by one statement (issue 24)

-- Applied by ALTER EXTENSION jobq UPDATE TO '0.11.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.10.0 is installed.

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
    IF jobq.version() <> '0.10.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.10.0 to 0.11.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.11.0');

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '0.11.0'::text
$$;
COMMENT ON FUNCTION jobq.version() IS 'Installed jobq version (semver text).';
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
    IF enqueue.job_key IS NULL AND enqueue.group_key IS NULL AND enqueue.timeout IS NULL
       AND enqueue.unique_for IS NULL AND enqueue.depends_on IS NULL
       AND enqueue.on_parent_failure IS NOT DISTINCT FROM 'cancel'
       AND jsonb_typeof(enqueue.payload) IS NOT DISTINCT FROM 'object'
       AND jobq._enqueue_args_ok(enqueue.queue, enqueue.run_at, enqueue.priority, enqueue.max_attempts,
                                 NULL, NULL) THEN
        -- The common case (no key, group, timeout or parents) in one
        -- statement: the queue's settings read in it, and no row when the
        -- payload is over the queue's max_payload_bytes or some per-queue
        -- produce grant matches the queue; then the general path below
        -- raises the error, or checks the privilege and inserts. No key:
        -- nothing to conflict with. (Each helper call saved is a function
        -- call with pinned settings; a single-job enqueue pays them all.)
        INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, timeout)
        SELECT enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
               coalesce(enqueue.max_attempts, q.max_attempts, d.max_attempts), q.timeout
        FROM jobq._queue_defaults AS d
        LEFT JOIN jobq._queue AS q ON q.queue = enqueue.queue
        WHERE pg_column_size(enqueue.payload) <= coalesce(q.max_payload_bytes, d.max_payload_bytes)
          AND NOT EXISTS (SELECT FROM jobq._queue_grant AS g
                          WHERE g.privilege = 'produce' AND enqueue.queue LIKE g.queue_like)
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            PERFORM pg_notify('jobq', enqueue.queue);
            RETURN v_id;
        END IF;
    END IF;
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
    PERFORM jobq._check_queue_privilege(ARRAY[enqueue.queue], 'produce')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'produce' AND enqueue.queue LIKE g.queue_like);
    IF coalesce(cardinality(enqueue.depends_on), 0) = 0 THEN
        RETURN jobq._insert_job(enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
                                coalesce(enqueue.max_attempts, v_settings.max_attempts), enqueue.job_key,
                                enqueue.group_key, coalesce(enqueue.timeout, v_settings.timeout), enqueue.unique_for);
    END IF;
    PERFORM jobq._check_readable_jobs(enqueue.depends_on, 'depends_on');
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

-- jobq 0.10.0 → 0.11.0. One line per change:
--   complete, fail, heartbeat, release, snooze: the lease token is a uuid only; the text-token
--     overloads are dropped (with jobq._lease_token), so a driver that prepares `jobq.complete($1, $2)`
--     (asyncpg, postgres.js) is asked for a uuid and can pass back what claim returned (issue 29).
--   _retry_or_bury (fail, fail_held): NOTIFY only when the retry is due now or a slot or group is freed,
--     not while it waits out its backoff (issue 29).
--   next_run_at: its COMMENT says the next scheduled time (it said "ready") (issue 29).
--   claim (both), take, hold: n is a bigint (was integer), so an int8 parameter (JDBC's setLong, a
--     postgres.js BigInt) finds them; _check_batch, _check_claim_args and _claim_args_ok take it as
--     bigint, out of range still JQ007 (issue 29).
--   running jobs under control (issue 26, items 1-2):
--   * jobq.cancel() and jobq.cancel_jobs() of a running job send NOTIFY jobq_cancel ('id:lease_token' pairs, new
--     jobq._notify_cancelled) at commit, so that its worker stops the handler at once, not at its next heartbeat
--   * new jobq.progress(id, lease_token, progress jsonb) (jobq_worker): a running job's progress in the new column
--     jobq._job.progress (capped by max_payload_bytes, JQ003), shown by jobq.jobs (new last column progress) and
--     returned by claim (jobq.job gets the attribute progress; jobq._claim and jobq._lock_ready return it)
--   enqueue: a job without key, group, timeout or parents is inserted by one statement (issue 24)

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

-- The lease token as text (issue 29): an untyped token now resolves to the uuid functions.
DROP FUNCTION jobq.complete(bigint, text, jsonb);
DROP FUNCTION jobq.fail(bigint, text, text, timestamptz);
DROP FUNCTION jobq.heartbeat(bigint, text, interval);
DROP FUNCTION jobq.release(bigint, text);
DROP FUNCTION jobq.snooze(bigint, text, timestamptz);
DROP FUNCTION jobq._lease_token(text);
CREATE OR REPLACE FUNCTION jobq._retry_or_bury(p_job jobq._job, p_attempt integer, p_error text, p_worker text,
                                    p_retry_at timestamptz, p_held boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
    v_run_at timestamptz;
BEGIN
    -- The failed attempt p_attempt of p_job, which the caller has locked
    -- (jobq.fail: under its lease; jobq.fail_held: held by this transaction,
    -- p_held, and this is its attempt): counted, its error (p_error, already
    -- bounded) kept in the job's history under p_worker; then dead letter
    -- when that was its last attempt, else ready again after exponential
    -- backoff with jitter (or at p_retry_at), unleased, and its queue's
    -- workers woken when that helps a claim (below).
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
    WHERE j.id = p_job.id
    RETURNING j.run_at INTO v_run_at;
    -- Wake the queue's workers only when a claim can gain by it: the retry is
    -- due now, or the failure freed a concurrency slot or its serial group's
    -- turn. A retry in backoff waits for the workers' next look (jobq.next_run_at).
    IF v_run_at <= now() OR v_settings.concurrency IS NOT NULL OR p_job.group_key IS NOT NULL THEN
        PERFORM pg_notify('jobq', p_job.queue);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._retry_or_bury(jobq._job, integer, text, text, timestamptz, boolean) IS
    'A failed attempt of a locked job, for fail and fail_held: counted, its error kept, then dead letter or a retry after backoff.';
CREATE OR REPLACE FUNCTION jobq.next_run_at(queues text[]) RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_next timestamptz;
BEGIN
    -- The earliest future run_at among the jobs of these queues scheduled
    -- for later (retries in backoff, delayed jobs; NULL when none): how long
    -- an idle worker may sleep before it claims again. A loose index scan over the
    -- distinct priorities, one seek each, so it stays cheap at any size.
    IF next_run_at.queues IS NULL OR cardinality(next_run_at.queues) NOT BETWEEN 1 AND 100 THEN
        RAISE EXCEPTION 'jobq: queues must be an array of 1 to 100 queue names'
            USING ERRCODE = 'JQ001', HINT = 'Pass e.g. ARRAY[''emails''].';
    END IF;
    IF array_ndims(next_run_at.queues) > 1 THEN
        RAISE EXCEPTION 'jobq: queues must be a one-dimensional array, got % dimensions %',
                array_ndims(next_run_at.queues), array_dims(next_run_at.queues)
            USING ERRCODE = 'JQ001', HINT = 'Pass a list of names, e.g. ARRAY[''emails''].';
    END IF;
    PERFORM jobq._check_queue(u.name, format('queues[%s]', array_lower(next_run_at.queues, 1) + u.ord - 1))
    FROM unnest(next_run_at.queues) WITH ORDINALITY AS u(name, ord);
    WITH RECURSIVE prio AS (
        (SELECT j.queue, j.priority FROM jobq._job AS j
         WHERE j.queue = ANY (next_run_at.queues) AND NOT j.parked AND j.status = 'ready'
         ORDER BY j.queue, j.priority LIMIT 1)
        UNION ALL
        SELECT nxt.queue, nxt.priority
        FROM prio AS p,
             LATERAL (SELECT j.queue, j.priority FROM jobq._job AS j
                      WHERE NOT j.parked AND j.status = 'ready' AND j.queue = ANY (next_run_at.queues)
                        AND (j.queue, j.priority) > (p.queue, p.priority)
                      ORDER BY j.queue, j.priority LIMIT 1) AS nxt
    )
    SELECT min(f.run_at) INTO v_next
    FROM prio AS p,
         LATERAL (SELECT j.run_at FROM jobq._job AS j
                  WHERE j.queue = p.queue AND NOT j.parked AND j.status = 'ready' AND j.priority = p.priority
                    AND j.run_at > now()
                  ORDER BY j.run_at LIMIT 1) AS f;
    RETURN v_next;
END
$$;
COMMENT ON FUNCTION jobq.next_run_at(text[]) IS
    'The next scheduled time in these queues: the earliest future run_at (a retry in backoff, a delayed job; NULL if none), when an idle worker should claim again.';

-- n as bigint (issue 29): a new signature each, so DROP and CREATE (and the GRANTs below).
DROP FUNCTION jobq.claim(text, integer, text, interval);
DROP FUNCTION jobq.claim(text[], integer, text, interval);
DROP FUNCTION jobq.take(text, integer);
DROP FUNCTION jobq.hold(text, integer);
DROP FUNCTION jobq._check_batch(integer, text, integer);
DROP FUNCTION jobq._check_claim_args(text[], integer, interval);
DROP FUNCTION jobq._claim_args_ok(text[], integer, interval, text);
CREATE FUNCTION jobq._check_batch(p_n bigint, p_arg text, p_cap integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ007 unless 0 <= p_n <= p_cap; NULL never means "everything".
    IF p_n IS NULL OR p_n NOT BETWEEN 0 AND p_cap THEN
        RAISE EXCEPTION 'jobq: % must be between 0 and %, got %', p_arg, p_cap, coalesce(p_n::text, 'NULL')
            USING ERRCODE = 'JQ007',
                  HINT = 'Work in batches: call again for more.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_batch(bigint, text, integer) IS 'Raises JQ007 for a NULL, negative or over-cap batch size.';
CREATE FUNCTION jobq._check_claim_args(p_queues text[], p_n bigint, p_lease interval) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue record;
BEGIN
    -- Raise the JQ error of the first bad argument of a claim, take or hold:
    -- not READ COMMITTED, n, lease, or the queue list and each name in it.
    PERFORM jobq._check_read_committed();
    PERFORM jobq._check_batch(p_n, 'n', 1000);
    PERFORM jobq._check_interval(p_lease, 'lease', interval '1 second', interval '1 day');
    IF p_queues IS NULL OR cardinality(p_queues) NOT BETWEEN 1 AND 100 THEN
        RAISE EXCEPTION 'jobq: queues must be an array of 1 to 100 queue names, got %',
                coalesce(cardinality(p_queues)::text || ' elements', 'NULL')
            USING ERRCODE = 'JQ001', HINT = 'Pass e.g. ARRAY[''emails'', ''sms''].';
    END IF;
    IF array_ndims(p_queues) > 1 THEN
        RAISE EXCEPTION 'jobq: queues must be a one-dimensional array, got % dimensions %',
                array_ndims(p_queues), array_dims(p_queues)
            USING ERRCODE = 'JQ001', HINT = 'Pass a list of names, e.g. ARRAY[''emails'', ''sms''].';
    END IF;
    -- By position: arrays may start at any index (a name is named by its subscript).
    FOR v_queue IN SELECT u.name, u.ord FROM unnest(p_queues) WITH ORDINALITY AS u(name, ord) LOOP
        PERFORM jobq._check_queue(v_queue.name, format('queues[%s]', array_lower(p_queues, 1) + v_queue.ord - 1));
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq._check_claim_args(text[], bigint, interval) IS
    'Raises the JQ error of the first bad claim/take/hold argument (isolation, n, lease, queue names).';
CREATE FUNCTION jobq._claim_args_ok(p_queues text[], p_n bigint, p_lease interval, p_worker text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Whether a claim's arguments are all good, in one expression (no
    -- query): the hot path asks this, and only a false sends it through the
    -- checks that name the bad argument (_check_claim_args, _check_worker,
    -- _check_queue), which this must never be more lenient than. Queue names
    -- are joined with spaces, a character no good name has; a bad name with
    -- a space in it shows in the count of spaces.
    RETURN coalesce(
        p_n BETWEEN 0 AND 1000
        AND (p_lease IS NULL
             OR (p_lease BETWEEN interval '1 second' AND interval '1 day'
                 AND date_part('month', p_lease) = 0 AND date_part('year', p_lease) = 0
                 AND date_part('day', p_lease) * (extract(epoch FROM p_lease) - date_part('day', p_lease) * 86400) >= 0))
        AND coalesce(char_length(p_worker), 0) <= 200
        AND cardinality(p_queues) BETWEEN 1 AND 100
        AND array_ndims(p_queues) = 1  -- before array_position, which refuses more dimensions
        AND array_position(p_queues, NULL) IS NULL
        AND array_to_string(p_queues, ' ') ~ '^[A-Za-z0-9_.:-]{1,128}( [A-Za-z0-9_.:-]{1,128})*$'
        AND char_length(array_to_string(p_queues, ' ')) - char_length(replace(array_to_string(p_queues, ' '), ' ', ''))
            = cardinality(p_queues) - 1
        AND current_setting('transaction_isolation') = 'read committed',
        false);
END
$$;
COMMENT ON FUNCTION jobq._claim_args_ok(text[], bigint, interval, text) IS
    'True when every claim argument is valid (the hot path''s one test; the _check functions name a bad one).';
CREATE FUNCTION jobq.claim(
    queue text,
    n bigint DEFAULT 1,
    worker text DEFAULT NULL,
    lease interval DEFAULT NULL
) RETURNS SETOF jobq.job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
BEGIN
    -- Lease up to n ready jobs of one queue: priority, then run_at, then id.
    IF NOT jobq._claim_args_ok(ARRAY[claim.queue], claim.n, claim.lease, claim.worker) THEN
        IF claim.queue LIKE '{%}' THEN
            -- An array literal that came untyped (node-postgres sends every
            -- parameter untyped, and PostgreSQL resolves an untyped argument
            -- to this text overload). No queue name has a brace: claim across
            -- the queues it lists.
            RETURN QUERY SELECT * FROM jobq.claim(jobq._queue_list(claim.queue), claim.n, claim.worker, claim.lease);
            RETURN;
        END IF;
        PERFORM jobq._check_queue(claim.queue, 'queue');
        PERFORM jobq._check_worker(claim.worker);
        PERFORM jobq._check_claim_args(ARRAY[claim.queue], claim.n, claim.lease);
    END IF;
    PERFORM jobq._check_queue_privilege(ARRAY[claim.queue], 'consume')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'consume' AND claim.queue LIKE g.queue_like);
    RETURN QUERY SELECT * FROM jobq._claim(ARRAY[claim.queue], claim.n::integer, claim.worker, claim.lease);
END
$$;
COMMENT ON FUNCTION jobq.claim(text, bigint, text, interval) IS
    'Leases up to n ready jobs of a queue (FOR UPDATE SKIP LOCKED), most urgent first; ''{a,b}'' claims across queues a and b.';
CREATE FUNCTION jobq.claim(
    queues text[],
    n bigint DEFAULT 1,
    worker text DEFAULT NULL,
    lease interval DEFAULT NULL
) RETURNS SETOF jobq.job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
BEGIN
    -- Lease up to n ready jobs across several queues, most urgent first
    -- (priority, run_at, id), each under its queue's lease unless given;
    -- paused queues, concurrency and rate limits and serial groups honoured.
    IF NOT jobq._claim_args_ok(claim.queues, claim.n, claim.lease, claim.worker) THEN
        PERFORM jobq._check_worker(claim.worker);
        PERFORM jobq._check_claim_args(claim.queues, claim.n, claim.lease);
    END IF;
    PERFORM jobq._check_queue_privilege(claim.queues, 'consume')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g, unnest(claim.queues) AS q(name)
                      WHERE g.privilege = 'consume' AND q.name LIKE g.queue_like);
    RETURN QUERY SELECT * FROM jobq._claim(claim.queues, claim.n::integer, claim.worker, claim.lease);
END
$$;
COMMENT ON FUNCTION jobq.claim(text[], bigint, text, interval) IS
    'Leases up to n ready jobs across several queues (FOR UPDATE SKIP LOCKED), most urgent first.';
CREATE FUNCTION jobq.take(queue text, n bigint DEFAULT 1) RETURNS SETOF jobq.job
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
        SELECT * FROM jobq._lock_ready(take.queue, take.n::integer)
    ), done AS (
        SELECT count(*) FROM jobq._finish(p_ids => ARRAY(SELECT h.id FROM held AS h), p_lease_tokens => NULL,
                                               p_status => 'completed', p_error => NULL, p_held => true)
    )
    SELECT h.* FROM held AS h, done ORDER BY h.priority, h.run_at, h.id;
END
$$;
COMMENT ON FUNCTION jobq.take(text, bigint) IS
    'Removes up to n ready jobs inside the caller''s transaction: done on commit, back untouched on rollback.';
CREATE FUNCTION jobq.hold(queue text, n bigint DEFAULT 1) RETURNS SETOF jobq.job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
BEGIN
    -- In-transaction processing, job by job: row-lock up to n ready jobs for
    -- the caller's transaction, writing nothing (no lease). Acknowledge each
    -- before the commit with jobq.complete_held() or jobq.fail_held(); a job
    -- neither acknowledged, and every job of a transaction that rolls back
    -- or crashes, stays ready, untouched. attempts shows this attempt.
    IF NOT jobq._claim_args_ok(ARRAY[hold.queue], hold.n, NULL, NULL) THEN
        PERFORM jobq._check_queue(hold.queue, 'queue');
        PERFORM jobq._check_claim_args(ARRAY[hold.queue], hold.n, NULL);
    END IF;
    PERFORM jobq._check_queue_privilege(ARRAY[hold.queue], 'consume')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'consume' AND hold.queue LIKE g.queue_like);
    RETURN QUERY SELECT * FROM jobq._lock_ready(hold.queue, hold.n::integer);
END
$$;
COMMENT ON FUNCTION jobq.hold(text, bigint) IS
    'Row-locks up to n ready jobs for the caller''s transaction (no lease); acknowledge with complete_held / fail_held.';

-- running jobs (issue 26): a job's progress, on the live row and in the row a claim returns
ALTER TABLE jobq._job ADD COLUMN progress jsonb;
COMMENT ON COLUMN jobq._job.progress IS
    'The last progress its holder reported (jobq.progress: any small JSON value); kept while the job is live, so that a later attempt can resume from it.';
ALTER TYPE jobq.job ADD ATTRIBUTE progress jsonb;
COMMENT ON TYPE jobq.job IS 'A claimed job. Pass lease_token to complete/fail/heartbeat/progress: it fences the lease. progress: the last one reported (by an earlier attempt, after a retry).';

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
           l.timeout, l.progress
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
               j.group_key, j.timeout, j.progress
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
           j.timeout, j.progress
    FROM jobq._job AS j
    WHERE j.id = ANY (v_ids)
    ORDER BY j.priority, j.run_at, j.id;
END
$$;
COMMENT ON FUNCTION jobq._lock_ready(text, integer) IS
    'Row-locks up to n ready jobs of a queue for in-transaction work (take, hold); limits and groups honoured.';
CREATE FUNCTION jobq.progress(id bigint, lease_token uuid, progress jsonb) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_queue text;
    v_held boolean;
    v_cap integer;
BEGIN
    -- Store the progress of a job still held under lease_token: any JSON
    -- value (NULL clears it), shown by jobq.jobs and returned by the next
    -- claim of the job. False, changing nothing, when the lease was lost or
    -- the job is not running (as jobq.heartbeat); JQ003 when the value is
    -- over its queue's max_payload_bytes. It extends no lease.
    PERFORM jobq._check_lease_args(progress.id, progress.lease_token);
    SELECT j.queue, j.lease_token IS NOT DISTINCT FROM progress.lease_token INTO v_queue, v_held
    FROM jobq._job AS j
    WHERE j.id = progress.id;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    v_cap := (jobq._settings(v_queue)).max_payload_bytes;
    IF pg_column_size(progress.progress) > v_cap THEN
        RAISE EXCEPTION 'jobq: progress is % bytes, over the queue''s cap of % bytes',
                pg_column_size(progress.progress), v_cap
            USING ERRCODE = 'JQ003',
                  HINT = 'Report a small value (a count, a percentage, a stage name); keep large data in a table.';
    END IF;
    IF NOT v_held THEN
        RETURN false;
    END IF;
    UPDATE jobq._job AS j
    SET progress = progress.progress
    WHERE j.id = progress.id AND j.lease_token = progress.lease_token;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION jobq.progress(bigint, uuid, jsonb) IS
    'Stores the progress (a small JSON value) of a job held under lease_token; false when the lease was lost.';
CREATE FUNCTION jobq._notify_cancelled(p_ids bigint[], p_lease_tokens uuid[]) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Tell the workers holding these running jobs that they were cancelled:
    -- NOTIFY jobq_cancel, the payload 'id:lease_token' pairs separated by
    -- spaces, up to 100 per notification (a payload holds 8000 bytes). The
    -- token names the lease, so that only its holder acts on it; it is
    -- worthless once this commits (the lease is over). Sent at commit, like
    -- every NOTIFY; a worker that misses it learns at its next heartbeat.
    PERFORM pg_notify('jobq_cancel', c.pairs)
    FROM (SELECT string_agg(u.id::text || ':' || u.token::text, ' ' ORDER BY u.ord) AS pairs
          FROM unnest(p_ids, p_lease_tokens) WITH ORDINALITY AS u(id, token, ord)
          WHERE u.token IS NOT NULL
          GROUP BY (u.ord - 1) / 100) AS c;
END
$$;
COMMENT ON FUNCTION jobq._notify_cancelled(bigint[], uuid[]) IS
    'Sends NOTIFY jobq_cancel with the id:lease_token pairs of cancelled running jobs (100 per notification).';
CREATE OR REPLACE FUNCTION jobq.cancel(id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_token uuid;
    v_done boolean;
BEGIN
    -- Cancel a waiting, ready, scheduled or running job. A running job's
    -- holder is told at once (NOTIFY jobq_cancel at commit, see
    -- jobq._notify_cancelled) and otherwise finds its lease lost at its
    -- next heartbeat; nothing waits for it. Its waiting dependents are
    -- cancelled too (on_parent_failure 'cancel', cancelled_by this job) or
    -- count it as finished ('run'). False for finished and unknown jobs.
    IF cancel.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass a job id.';
    END IF;
    SELECT j.lease_token INTO v_token FROM jobq._job AS j WHERE j.id = cancel.id FOR UPDATE;
    v_done := EXISTS (SELECT FROM jobq._finish(p_ids => ARRAY[cancel.id], p_lease_tokens => NULL,
                                               p_status => 'cancelled', p_error => 'cancelled by ' || session_user));
    IF v_done AND v_token IS NOT NULL THEN
        PERFORM jobq._notify_cancelled(ARRAY[cancel.id], ARRAY[v_token]);
    END IF;
    RETURN v_done;
END
$$;
COMMENT ON FUNCTION jobq.cancel(bigint) IS
    'Cancels a live job (a running job''s holder is notified at commit and loses the lease); false for finished or unknown ids.';
CREATE OR REPLACE FUNCTION jobq.cancel_jobs(queue text, status text DEFAULT NULL, payload_contains jsonb DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_ids bigint[];
    v_tokens uuid[];
    v_gone bigint[];
BEGIN
    -- Cancel the live jobs of a queue, as jobq.cancel() does one by one:
    -- every one (status NULL), or those ready now, scheduled for later,
    -- running or waiting for parents; only those whose payload contains
    -- payload_contains (@>) when given. Running jobs' holders are notified
    -- (jobq._notify_cancelled) and lose their lease; dependents follow as
    -- after jobq.cancel(). Returns how many.
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
    -- Locked in id order (as jobq._finish goes), with the running ones' lease tokens.
    SELECT array_agg(c.id ORDER BY c.id), array_agg(c.lease_token ORDER BY c.id) INTO v_ids, v_tokens
    FROM (SELECT j.id, j.lease_token FROM jobq._job AS j
          WHERE j.queue = cancel_jobs.queue
            AND CASE cancel_jobs.status
                    WHEN 'ready' THEN j.status = 'ready' AND j.run_at <= now()
                    WHEN 'scheduled' THEN j.status = 'ready' AND j.run_at > now()
                    WHEN 'running' THEN j.status = 'running'
                    WHEN 'waiting' THEN j.status = 'waiting'
                    ELSE true END
            AND (cancel_jobs.payload_contains IS NULL OR j.payload @> cancel_jobs.payload_contains)
          ORDER BY j.id
          FOR UPDATE OF j) AS c;
    v_gone := ARRAY(SELECT f.id FROM jobq._finish(p_ids => coalesce(v_ids, '{}'), p_lease_tokens => NULL, p_status => 'cancelled',
                                                  p_error => 'cancelled by ' || session_user) AS f(id));
    IF cardinality(array_remove(v_tokens, NULL)) > 0 THEN
        PERFORM jobq._notify_cancelled(ARRAY(SELECT u.id FROM unnest(v_ids, v_tokens) AS u(id, token)
                                             WHERE u.token IS NOT NULL AND u.id = ANY (v_gone) ORDER BY u.id),
                                       ARRAY(SELECT u.token FROM unnest(v_ids, v_tokens) AS u(id, token)
                                             WHERE u.token IS NOT NULL AND u.id = ANY (v_gone) ORDER BY u.id));
    END IF;
    RETURN cardinality(v_gone);
END
$$;
COMMENT ON FUNCTION jobq.cancel_jobs(text, text, jsonb) IS
    'Cancels the live jobs of a queue (optionally only ready, scheduled, running or waiting ones, or those whose payload contains a filter); returns how many (running ones'' holders are notified).';
CREATE OR REPLACE VIEW jobq.jobs AS
    -- Every job jobq still knows, live or finished, with one status column:
    -- waiting (for parents), ready, scheduled, running, completed, dead or
    -- cancelled. heartbeat_at: the last heartbeat of a running job's lease
    -- (NULL before its first, and for jobs not running). result: what a
    -- completed job reported; cancelled_by: the ancestor whose failure
    -- cancelled it; progress: what a live job last reported (jobq.progress),
    -- NULL once it finished. Paged newest first by id within a queue, both halves
    -- read an index (the primary key, and (queue, id) of the archive).
    -- Jobs of a queue with read grants (jobq.grant_queue) show only to the
    -- roles that hold one and jobq_admin; while no read grant exists, one
    -- look at an empty table decides for every row. The filter stands
    -- outside the UNION ALL: a subquery in a half's WHERE would keep the
    -- planner from merging the halves' index scans.
    SELECT u.*
    FROM (
        SELECT j.id, j.queue, j.payload,
               CASE WHEN j.status = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.status END AS status,
               j.priority::integer AS priority, j.run_at, j.attempts, j.max_attempts, j.job_key, j.worker,
               j.lease_expires_at, j.last_error, j.created_at, j.started_at, NULL::timestamptz AS finished_at,
               j.group_key, j.timeout, j.heartbeat_at, NULL::jsonb AS result, NULL::bigint AS cancelled_by,
               j.progress
        FROM jobq._job AS j
        UNION ALL
        SELECT a.id, a.queue, a.payload, a.status, a.priority::integer, a.run_at, a.attempts, a.max_attempts,
               a.job_key, a.worker, NULL::timestamptz, a.last_error, a.created_at, a.started_at, a.finished_at,
               a.group_key, a.timeout, NULL::timestamptz, a.result, a.cancelled_by, NULL::jsonb
        FROM jobq._job_archive AS a
    ) AS u
    WHERE (SELECT NOT EXISTS (SELECT FROM jobq._queue_grant AS g WHERE g.privilege = 'read'))
       OR coalesce((SELECT bool_or(p.held) FROM jobq._read_pattern AS p
                    WHERE u.queue LIKE p.queue_like), true);
COMMENT ON VIEW jobq.jobs IS 'All live and finished jobs with a single status column (for operators).';

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

GRANT EXECUTE ON FUNCTION jobq.progress(bigint, uuid, jsonb) TO jobq_worker;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    jobq.claim(text, bigint, text, interval),
    jobq.claim(text[], bigint, text, interval),
    jobq.take(text, bigint),
    jobq.hold(text, bigint)
TO jobq_worker;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

-- jobq 0.1.0 → 0.2.0: coordination. One line per change:
--   * serial groups: jobq._job.group_key, enqueue(…, group_key =>): one running job per group, in enqueue order
--   * per-queue concurrency limit, rate limit (job starts per interval), pause/resume: new jobq._queue columns
--   * claim takes its slots under transaction-scoped advisory locks (never waits, cannot leak) — jobq._pick
--   * the claim path runs generic plans (plan_cache_mode) and _settings is PL/pgSQL: no re-planning per call;
--     jit is off there (a generic plan's cost estimate would otherwise JIT-compile every claim, ~30 ms)
--   * jobq.take(): exactly-once processing inside the caller's transaction
--   * jobq.snooze(): a worker reschedules its job without spending an attempt
--   * periodic jobs: jobq.every(), jobq.unschedule(), jobq.enqueue_periodic(), view jobq.schedules (pg_cron)
--   * lock_timeout = 5s pinned on claim, take and the worker functions
--   * finishing a job of a serial group or a concurrency-limited queue wakes the workers (NOTIFY)
--   * new SQLSTATEs: JQ015 (claim/take outside READ COMMITTED), JQ016 (periodic job name)
--   * views jobq.jobs, jobq.queues and jobq.stats gain group_key / the new settings / paused
--   * claim stamps started_at and the lease from clock_timestamp() (not the transaction's start)
--   * fail keeps the head and the tail of a long error; reap keeps the previous error after its own
--   * fail (retry) and snooze wake the workers; finished_at is clock_timestamp()
--   * reset_queue keeps a queue paused; prune also drops expired rate-limit bookkeeping
--   * next_run_at validates its queue names like claim (JQ001)
--
-- Applied by ALTER EXTENSION jobq UPDATE TO '0.2.0', or with psql -f / pyqueue
-- upgrade on a database where the 0.1.0 script was run.

SET search_path TO pg_catalog, pg_temp;

DO $guard$
BEGIN
    IF jobq.version() <> '0.1.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.1.0 to 0.2.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.2.0');

CREATE OR REPLACE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '0.2.0'::text
$$;

---------------------------------------------------------------------------
-- tables
---------------------------------------------------------------------------

ALTER TABLE jobq._job
    ADD COLUMN group_key text,
    ADD CONSTRAINT job_group_key_length CHECK (char_length(group_key) BETWEEN 1 AND 512);
-- Serial groups: find a group's head (lowest id) and its running job.
CREATE INDEX _job_group_idx ON jobq._job (queue, group_key, id)
    WHERE group_key IS NOT NULL;

ALTER TABLE jobq._job_archive ADD COLUMN group_key text;

ALTER TABLE jobq._queue
    ADD COLUMN concurrency integer,
    ADD COLUMN rate_limit integer,
    ADD COLUMN rate_interval interval,
    ADD COLUMN paused boolean,
    ADD CONSTRAINT queue_concurrency_range CHECK (concurrency BETWEEN 1 AND 10000),
    ADD CONSTRAINT queue_rate_limit_range CHECK (rate_limit BETWEEN 1 AND 1000000),
    ADD CONSTRAINT queue_rate_interval_range CHECK (rate_interval BETWEEN interval '1 second' AND interval '1 day');

ALTER TYPE jobq.job ADD ATTRIBUTE group_key text;

-- Job starts of rate-limited queues: one row per claim, kept one interval.
CREATE TABLE jobq._rate_start (
    queue       text NOT NULL,
    started_at  timestamptz NOT NULL,
    n           integer NOT NULL,
    CONSTRAINT rate_start_n_positive CHECK (n > 0)
);
COMMENT ON TABLE jobq._rate_start IS 'Job starts of rate-limited queues within the current window. Private.';
CREATE INDEX _rate_start_idx ON jobq._rate_start (queue, started_at);

-- Periodic jobs registered with jobq.every().
CREATE TABLE jobq._periodic (
    name          text PRIMARY KEY,
    schedule      text NOT NULL,
    queue         text NOT NULL,
    payload       jsonb NOT NULL,
    priority      smallint NOT NULL DEFAULT 0,
    max_attempts  integer,
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT periodic_name_valid CHECK (name ~ '^[A-Za-z0-9_.:-]{1,64}$')
);
COMMENT ON TABLE jobq._periodic IS 'Periodic jobs (jobq.every): pg_cron enqueues them. Private: use jobq.schedules.';

DO $dump$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'jobq') THEN
        PERFORM pg_catalog.pg_extension_config_dump('jobq._periodic', '');
    END IF;
END
$dump$;

---------------------------------------------------------------------------
-- validation and private helpers
---------------------------------------------------------------------------

CREATE FUNCTION jobq._check_periodic_name(p_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ016 unless p_name is a valid periodic job name.
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9_.:-]{1,64}$' THEN
        RAISE EXCEPTION 'jobq: name must be 1 to 64 characters from [A-Za-z0-9_.:-], got %',
                coalesce(pg_catalog.quote_literal(pg_catalog.left(p_name, 100)), 'NULL')
            USING ERRCODE = 'JQ016', HINT = 'Use names such as ''nightly-report''.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_periodic_name(text) IS 'Raises JQ016 for a NULL or badly spelled periodic job name.';

CREATE FUNCTION jobq._check_read_committed() RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ015 unless the transaction runs at READ COMMITTED: claim and
    -- take count running jobs and group heads after taking their locks, which
    -- needs a fresh snapshot per statement.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'jobq: claiming needs READ COMMITTED isolation, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'JQ015',
                  HINT = 'Claim in its own transaction, or SET TRANSACTION ISOLATION LEVEL READ COMMITTED.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_read_committed() IS 'Raises JQ015 outside READ COMMITTED isolation.';

CREATE OR REPLACE FUNCTION jobq._settings(p_queue text) RETURNS jobq._queue
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
BEGIN
    -- The effective settings of a queue: its overrides over the defaults.
    -- The defaults live here and only here. (PL/pgSQL, not SQL: a SQL
    -- function with a SET clause is planned afresh on every call, and every
    -- enqueue, claim and completion asks for settings.)
    SELECT p_queue,
           coalesce(q.max_attempts, 25),
           coalesce(q.backoff_base, interval '2 seconds'),
           coalesce(q.backoff_cap, interval '1 hour'),
           coalesce(q.backoff_jitter, 0.25),
           coalesce(q.lease, interval '5 minutes'),
           coalesce(q.retention, interval '1 day'),
           q.dead_retention,                          -- NULL: dead jobs stay until retried
           coalesce(q.max_payload_bytes, 1048576),
           coalesce(q.updated_at, '-infinity'::timestamptz),
           q.concurrency,                             -- NULL: no limit
           q.rate_limit,                              -- NULL: no limit
           CASE WHEN q.rate_limit IS NOT NULL THEN coalesce(q.rate_interval, interval '1 second') END,
           coalesce(q.paused, false)
    INTO v_settings
    FROM (SELECT) AS one
    LEFT JOIN jobq._queue AS q ON q.queue = p_queue;
    RETURN v_settings;
END
$$;

-- _finish now returns via PL/pgSQL so that it can wake workers.
DROP FUNCTION jobq._finish(bigint[], uuid[], text, text);
CREATE FUNCTION jobq._finish(p_ids bigint[], p_lease_tokens uuid[], p_status text, p_error text)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    v_ids bigint[];
    v_wake text[];
    v_now timestamptz := clock_timestamp();
BEGIN
    -- Move live jobs to the archive as p_status. A non-NULL lease token
    -- fences: the job must be running under exactly that lease. Completed
    -- and cancelled jobs are kept only when their queue's retention > 0.
    -- Finishing a serial-group job or a job of a concurrency-limited queue
    -- frees a slot, so it wakes that queue's workers.
    -- Returns the ids that left the live table.
    WITH gone AS (
        DELETE FROM jobq._job AS j
        USING unnest(p_ids, p_lease_tokens) AS f(id, lease_token)
        WHERE j.id = f.id
          AND (f.lease_token IS NULL OR j.lease_token = f.lease_token)
        RETURNING j.*
    ), settings AS (
        SELECT s.*
        FROM (SELECT DISTINCT g.queue FROM gone AS g) AS q,
             LATERAL jobq._settings(q.queue) AS s
    ), kept AS (
        INSERT INTO jobq._job_archive
            (id, queue, payload, status, priority, run_at, attempts, max_attempts,
             job_key, worker, last_error, created_at, started_at, finished_at, prune_after, group_key)
        SELECT g.id, g.queue, g.payload, p_status, g.priority, g.run_at, g.attempts, g.max_attempts,
               g.job_key, g.worker, coalesce(p_error, g.last_error), g.created_at, g.started_at, v_now,
               v_now + CASE WHEN p_status = 'dead' THEN s.dead_retention ELSE s.retention END,
               g.group_key
        FROM gone AS g
        JOIN settings AS s ON s.queue = g.queue
        WHERE p_status = 'dead' OR s.retention > interval '0'
    )
    SELECT array_agg(g.id),
           array_agg(DISTINCT g.queue) FILTER (WHERE g.group_key IS NOT NULL OR s.concurrency IS NOT NULL)
    INTO v_ids, v_wake
    FROM gone AS g
    JOIN settings AS s ON s.queue = g.queue;
    PERFORM pg_notify('jobq', w.queue) FROM unnest(v_wake) AS w(queue);
    RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
END
$$;
COMMENT ON FUNCTION jobq._finish(bigint[], uuid[], text, text) IS 'Deletes live jobs (fenced by lease token when given) and archives them with the given status.';

DROP FUNCTION jobq._insert_job(text, jsonb, timestamptz, integer, integer, text);
CREATE FUNCTION jobq._insert_job(
    p_queue text, p_payload jsonb, p_run_at timestamptz, p_priority integer, p_max_attempts integer,
    p_job_key text, p_group_key text
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id bigint;
BEGIN
    -- Insert one validated job; with a job_key already held by an active job,
    -- return that job's id instead. Loops when the holder finishes between
    -- the INSERT and the lookup.
    FOR i IN 1..10 LOOP
        INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, job_key, group_key)
        VALUES (p_queue, p_payload, p_run_at, p_priority, p_max_attempts, p_job_key, p_group_key)
        ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
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
COMMENT ON FUNCTION jobq._insert_job(text, jsonb, timestamptz, integer, integer, text, text) IS 'Inserts one validated job, or returns the id of the active job holding its job_key.';

CREATE FUNCTION jobq._taken_in_transaction(p_queue text) RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    -- How many jobs of p_queue this transaction removed with take(): they
    -- run inside it, so they hold concurrency slots until it ends.
    SELECT coalesce((nullif(current_setting('jobq.taken', true), '')::jsonb ->> p_queue)::integer, 0)
$$;
COMMENT ON FUNCTION jobq._taken_in_transaction(text) IS 'Jobs of a queue taken by take() in the current transaction.';

CREATE FUNCTION jobq._pick(p_queues text[], p_n integer, p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, lease interval)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    v_queue record;
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
    -- Choose (and row-lock) up to p_n ready jobs across p_queues, most urgent
    -- first, that may start now: the queue is not paused, has a free
    -- concurrency slot and rate budget, and the job heads its serial group.
    -- Slots are counted under transaction-scoped advisory locks taken with
    -- try-lock (a busy queue or group yields fewer jobs, never a wait, and a
    -- crashed claimer's locks vanish with its transaction); each count runs
    -- in a statement that starts after the lock, so it sees every claim that
    -- committed before. Records the starts of rate-limited queues at p_now,
    -- which the caller also stamps on the jobs as started_at. Jobs taken
    -- earlier in this transaction (take) count as running.
    PERFORM jobq._check_read_committed();
    PERFORM jobq._check_batch(p_n, 'n', 1000);
    PERFORM jobq._check_interval(p_lease, 'lease', interval '1 second', interval '1 day');
    IF p_queues IS NULL OR cardinality(p_queues) NOT BETWEEN 1 AND 100 THEN
        RAISE EXCEPTION 'jobq: queues must be an array of 1 to 100 queue names, got %',
                coalesce(cardinality(p_queues)::text || ' elements', 'NULL')
            USING ERRCODE = 'JQ001', HINT = 'Pass e.g. ARRAY[''emails'', ''sms''].';
    END IF;
    -- Validate by position (arrays may start at any index), then drop repeats.
    FOR v_queue IN SELECT u.name, u.ord FROM unnest(p_queues) WITH ORDINALITY AS u(name, ord) LOOP
        PERFORM jobq._check_queue(v_queue.name, format('queues[%s]', v_queue.ord));
        CONTINUE WHEN v_queue.name = ANY (v_names);
        v_settings := jobq._settings(v_queue.name);
        v_slots := p_n;
        IF v_settings.paused THEN
            v_slots := 0;
        ELSIF v_settings.concurrency IS NOT NULL OR v_settings.rate_limit IS NOT NULL THEN
            IF NOT pg_try_advisory_xact_lock(1785684593, hashtext(v_queue.name)) THEN
                v_slots := 0;   -- another claimer is counting this queue's slots right now
            END IF;
        END IF;
        IF v_slots > 0 AND v_settings.concurrency IS NOT NULL THEN
            SELECT least(v_slots, v_settings.concurrency - count(*)
                                  - jobq._taken_in_transaction(v_queue.name))::integer INTO v_slots
            FROM jobq._job AS j
            WHERE j.queue = v_queue.name AND j.status = 'running';
        END IF;
        IF v_slots > 0 AND v_settings.rate_limit IS NOT NULL THEN
            DELETE FROM jobq._rate_start AS r
            WHERE r.queue = v_queue.name AND r.started_at <= v_now - v_settings.rate_interval;
            SELECT least(v_slots, v_settings.rate_limit - coalesce(sum(r.n), 0))::integer INTO v_slots
            FROM jobq._rate_start AS r
            WHERE r.queue = v_queue.name AND r.started_at > v_now - v_settings.rate_interval;
            v_rated := v_rated || v_queue.name;
        END IF;
        v_names := v_names || v_queue.name;
        v_leases := v_leases || coalesce(p_lease, v_settings.lease);
        v_allow := v_allow || greatest(v_slots, 0);
    END LOOP;

    -- Candidates: per queue, its most urgent unlocked ready rows (one index
    -- scan each); a serial-group job only when it heads its group and this
    -- transaction wins the group's lock.
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
                 WHERE j.queue = q.name AND j.status = 'ready' AND j.run_at <= now()
                   AND (j.group_key IS NULL
                        OR (NOT EXISTS (SELECT FROM jobq._job AS g
                                        WHERE g.queue = j.queue AND g.group_key = j.group_key
                                          AND g.id <> j.id AND (g.id < j.id OR g.status = 'running'))
                            AND pg_try_advisory_xact_lock(1785684594, hashtext(j.queue || chr(31) || j.group_key))))
                 ORDER BY j.priority, j.run_at, j.id
                 LIMIT q.slots
                 FOR UPDATE SKIP LOCKED
             ) AS c
        WHERE q.slots > 0
        ORDER BY c.priority, c.run_at, c.id
        LIMIT p_n
    ) AS c;

    IF v_grouped THEN
        -- Re-check group heads with a snapshot taken after the group locks:
        -- a claim of the same group that committed meanwhile is now visible.
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

---------------------------------------------------------------------------
-- producer API: group_key
---------------------------------------------------------------------------

DROP FUNCTION jobq.enqueue(text, jsonb, timestamptz, integer, integer, text);
CREATE FUNCTION jobq.enqueue(
    queue text,
    payload jsonb,
    run_at timestamptz DEFAULT pg_catalog.now(),
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL,
    job_key text DEFAULT NULL,
    group_key text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
BEGIN
    -- Add one job in the caller's transaction; return its id (or the id of
    -- the active job that already holds job_key). Jobs sharing a group_key
    -- run one at a time, in enqueue order.
    PERFORM jobq._check_queue(enqueue.queue, 'queue');
    v_settings := jobq._settings(enqueue.queue);
    PERFORM jobq._check_payload(enqueue.payload, 'payload', v_settings.max_payload_bytes);
    PERFORM jobq._check_time(enqueue.run_at, 'run_at');
    PERFORM jobq._check_job_options(enqueue.priority, enqueue.max_attempts);
    PERFORM jobq._check_job_key(enqueue.job_key, 'job_key');
    PERFORM jobq._check_job_key(enqueue.group_key, 'group_key');
    RETURN jobq._insert_job(enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
                            coalesce(enqueue.max_attempts, v_settings.max_attempts), enqueue.job_key,
                            enqueue.group_key);
END
$$;
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text) IS
    'Adds one job (inside the caller''s transaction) and returns its id; a job_key held by an active job returns that job''s id instead.';

DROP FUNCTION jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[]);
CREATE FUNCTION jobq.enqueue_many(
    queue text,
    payloads jsonb[],
    run_at timestamptz DEFAULT pg_catalog.now(),
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL,
    job_keys text[] DEFAULT NULL,
    group_key text DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
    v_bad record;
    v_item record;
    v_n integer := coalesce(cardinality(enqueue_many.payloads), -1);
BEGIN
    -- Add many jobs to one queue in one statement; returns one id per
    -- payload, in payload order. With group_key, they join that serial group
    -- in payload order.
    PERFORM jobq._check_queue(enqueue_many.queue, 'queue');
    IF enqueue_many.payloads IS NULL THEN
        RAISE EXCEPTION 'jobq: payloads must not be NULL'
            USING ERRCODE = 'JQ002', HINT = 'Pass an array of JSON objects, e.g. ARRAY[''{"a":1}'']::jsonb[].';
    END IF;
    PERFORM jobq._check_batch(v_n, 'cardinality(payloads)', 100000);
    v_settings := jobq._settings(enqueue_many.queue);
    PERFORM jobq._check_time(enqueue_many.run_at, 'run_at');
    PERFORM jobq._check_job_options(enqueue_many.priority, enqueue_many.max_attempts);
    PERFORM jobq._check_job_key(enqueue_many.group_key, 'group_key');

    SELECT p.payload, p.ord INTO v_bad
    FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, ord)
    WHERE p.payload IS NULL OR jsonb_typeof(p.payload) <> 'object'
       OR pg_column_size(p.payload) > v_settings.max_payload_bytes
    ORDER BY p.ord LIMIT 1;
    IF FOUND THEN
        PERFORM jobq._check_payload(v_bad.payload, format('payloads[%s]', v_bad.ord), v_settings.max_payload_bytes);
    END IF;

    IF enqueue_many.job_keys IS NULL THEN
        -- No keys: one INSERT. Identity values follow the ORDER BY, so
        -- sorting the returned ids gives payload order.
        RETURN QUERY
        WITH ins AS (
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, group_key)
            SELECT enqueue_many.queue, p.payload, enqueue_many.run_at, enqueue_many.priority,
                   coalesce(enqueue_many.max_attempts, v_settings.max_attempts), enqueue_many.group_key
            FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, ord)
            ORDER BY p.ord
            RETURNING id
        )
        SELECT ins.id FROM ins ORDER BY ins.id;
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
        RETURN QUERY SELECT jobq._insert_job(enqueue_many.queue, v_item.payload, enqueue_many.run_at,
                                            enqueue_many.priority,
                                            coalesce(enqueue_many.max_attempts, v_settings.max_attempts),
                                            v_item.job_key, enqueue_many.group_key);
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text) IS
    'Adds one job per payload in one call; returns their ids in payload order (existing ids for job_keys already held).';

---------------------------------------------------------------------------
-- worker API: claim through _pick, take, snooze, lock_timeout
---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq.claim(
    queue text,
    n integer DEFAULT 1,
    worker text DEFAULT NULL,
    lease interval DEFAULT NULL
) RETURNS SETOF jobq.job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
BEGIN
    -- Lease up to n ready jobs of one queue: priority, then run_at, then id.
    PERFORM jobq._check_queue(claim.queue, 'queue');
    RETURN QUERY SELECT * FROM jobq.claim(ARRAY[claim.queue], claim.n, claim.worker, claim.lease);
END
$$;

CREATE OR REPLACE FUNCTION jobq.claim(
    queues text[],
    n integer DEFAULT 1,
    worker text DEFAULT NULL,
    lease interval DEFAULT NULL
) RETURNS SETOF jobq.job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    v_ids bigint[];
    v_leases interval[];
    v_now timestamptz;
BEGIN
    -- Lease up to n ready jobs across several queues, most urgent first
    -- (priority, run_at, id), each under its queue's lease unless given;
    -- paused queues, concurrency and rate limits and serial groups honoured.
    PERFORM jobq._check_worker(claim.worker);
    v_now := clock_timestamp();
    SELECT array_agg(p.id), array_agg(p.lease) INTO v_ids, v_leases
    FROM jobq._pick(claim.queues, claim.n, claim.lease, v_now) AS p;
    RETURN QUERY
    WITH leased AS (
        UPDATE jobq._job AS j
        SET status = 'running',
            attempts = j.attempts + 1,
            lease_token = gen_random_uuid(),
            lease_expires_at = v_now + p.lease,
            worker = claim.worker,
            started_at = v_now
        FROM unnest(v_ids, v_leases) AS p(id, lease)
        WHERE j.id = p.id
        RETURNING j.*
    )
    SELECT l.id, l.queue, l.payload, l.priority::integer, l.attempts, l.max_attempts, l.run_at,
           l.created_at, l.lease_token, l.lease_expires_at, l.worker, l.job_key, l.last_error, l.group_key
    FROM leased AS l
    ORDER BY l.priority, l.run_at, l.id;
END
$$;

CREATE FUNCTION jobq.take(queue text, n integer DEFAULT 1) RETURNS SETOF jobq.job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_ids bigint[];
    v_now timestamptz := clock_timestamp();
BEGIN
    -- Exactly-once processing for work that only touches this database:
    -- remove up to n ready jobs inside the caller's transaction. Commit and
    -- they are done (archived as completed) together with the caller's
    -- writes; roll back and they are back, untouched. The rows stay locked
    -- (and, for limited queues, the queue's slots held) until then.
    PERFORM jobq._check_queue(take.queue, 'queue');
    SELECT coalesce(array_agg(p.id), '{}') INTO v_ids
    FROM jobq._pick(ARRAY[take.queue], take.n, NULL, v_now) AS p;
    -- The attempt is this transaction: record it as a claim would.
    RETURN QUERY
    WITH taken AS (
        UPDATE jobq._job AS j
        SET attempts = j.attempts + 1, worker = session_user, started_at = v_now
        WHERE j.id = ANY (v_ids)
        RETURNING j.*
    )
    SELECT t.id, t.queue, t.payload, t.priority::integer, t.attempts, t.max_attempts, t.run_at,
           t.created_at, NULL::uuid, NULL::timestamptz, t.worker, t.job_key, t.last_error, t.group_key
    FROM taken AS t
    ORDER BY t.priority, t.run_at, t.id;
    PERFORM set_config('jobq.taken',
                       jsonb_set(coalesce(nullif(current_setting('jobq.taken', true), '')::jsonb, '{}'),
                                 ARRAY[take.queue],
                                 to_jsonb(jobq._taken_in_transaction(take.queue) + cardinality(v_ids)))::text,
                       true);
    PERFORM jobq._finish(v_ids, NULL, 'completed', NULL);
END
$$;
COMMENT ON FUNCTION jobq.take(text, integer) IS
    'Removes up to n ready jobs inside the caller''s transaction: done on commit, back untouched on rollback.';

CREATE FUNCTION jobq.snooze(id bigint, lease_token uuid, run_at timestamptz) RETURNS boolean
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
        run_at = snooze.run_at,
        attempts = greatest(j.attempts - 1, 0),
        lease_token = NULL,
        lease_expires_at = NULL
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

CREATE FUNCTION jobq._error_text(p_error text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- An error message bounded to 10,000 characters: a long one (a deep
    -- traceback) keeps its head and its tail, where the exception is.
    SELECT CASE WHEN char_length(p_error) <= 10000 THEN p_error
                ELSE left(p_error, 2000) || E'\n[… ' || (char_length(p_error) - 9900)::text
                     || ' characters cut …]\n' || right(p_error, 7900) END
$$;
COMMENT ON FUNCTION jobq._error_text(text) IS 'Bounds an error message to 10,000 characters, keeping head and tail.';

CREATE FUNCTION jobq._reap_note(p_expired timestamptz, p_worker text, p_previous text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The error a reaped job records: its lease expiry, then its previous error.
    SELECT jobq._error_text(format('lease expired at %s (worker %s)', p_expired, coalesce(p_worker, 'unnamed'))
                            || coalesce(E'\nprevious error: ' || p_previous, ''))
$$;
COMMENT ON FUNCTION jobq._reap_note(timestamptz, text, text) IS 'The last_error of a reaped job: lease expiry, then the previous error.';

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
    -- its attempts are used up. False (and no change) when the lease was lost.
    PERFORM jobq._check_lease_args(fail.id, fail.lease_token);
    IF fail.retry_at IS NOT NULL THEN
        PERFORM jobq._check_time(fail.retry_at, 'retry_at');
    END IF;

    SELECT * INTO v_job FROM jobq._job AS j
    WHERE j.id = fail.id AND j.lease_token = fail.lease_token
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;

    IF v_job.attempts >= v_job.max_attempts THEN
        PERFORM jobq._finish(ARRAY[v_job.id], ARRAY[v_job.lease_token], 'dead', v_error);
        RETURN true;
    END IF;

    v_settings := jobq._settings(v_job.queue);
    UPDATE jobq._job AS j
    SET status = 'ready',
        run_at = coalesce(fail.retry_at,
                          now() + jobq._backoff_delay(v_job.attempts, v_settings.backoff_base,
                                                      v_settings.backoff_cap, v_settings.backoff_jitter,
                                                      random())),
        lease_token = NULL,
        lease_expires_at = NULL,
        last_error = v_error
    WHERE j.id = v_job.id;
    -- A freed concurrency slot or group, or a retry already due: let workers look.
    PERFORM pg_notify('jobq', v_job.queue);
    RETURN true;
END
$$;

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
    -- dead-letter those whose attempts are used up. Concurrent reapers skip
    -- each other's rows, so they never block or deadlock. The job's previous
    -- error is kept after the lease-expiry note.
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

    WITH requeued AS (
        UPDATE jobq._job AS j
        SET status = 'ready',
            run_at = now(),
            lease_token = NULL,
            lease_expires_at = NULL,
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
    RETURN cardinality(v_retry) + cardinality(v_dead);
END
$$;


CREATE OR REPLACE FUNCTION jobq.next_run_at(queues text[]) RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_next timestamptz;
BEGIN
    -- The earliest future run_at among ready jobs of these queues (NULL when
    -- none): how long an idle worker may sleep. A loose index scan over the
    -- distinct priorities, one seek each, so it stays cheap at any size.
    IF next_run_at.queues IS NULL OR cardinality(next_run_at.queues) NOT BETWEEN 1 AND 100 THEN
        RAISE EXCEPTION 'jobq: queues must be an array of 1 to 100 queue names'
            USING ERRCODE = 'JQ001', HINT = 'Pass e.g. ARRAY[''emails''].';
    END IF;
    PERFORM jobq._check_queue(u.name, format('queues[%s]', u.ord))
    FROM unnest(next_run_at.queues) WITH ORDINALITY AS u(name, ord);
    WITH RECURSIVE prio AS (
        (SELECT j.queue, j.priority FROM jobq._job AS j
         WHERE j.queue = ANY (next_run_at.queues) AND j.status = 'ready'
         ORDER BY j.queue, j.priority LIMIT 1)
        UNION ALL
        SELECT nxt.queue, nxt.priority
        FROM prio AS p,
             LATERAL (SELECT j.queue, j.priority FROM jobq._job AS j
                      WHERE j.status = 'ready' AND j.queue = ANY (next_run_at.queues)
                        AND (j.queue, j.priority) > (p.queue, p.priority)
                      ORDER BY j.queue, j.priority LIMIT 1) AS nxt
    )
    SELECT min(f.run_at) INTO v_next
    FROM prio AS p,
         LATERAL (SELECT j.run_at FROM jobq._job AS j
                  WHERE j.queue = p.queue AND j.status = 'ready' AND j.priority = p.priority
                    AND j.run_at > now()
                  ORDER BY j.run_at LIMIT 1) AS f;
    RETURN v_next;
END
$$;

-- No claim or acknowledgement may hang forever behind a stuck lock.
ALTER FUNCTION jobq.complete(bigint, uuid) SET lock_timeout = '5s';
ALTER FUNCTION jobq.complete_many(bigint[], uuid[]) SET lock_timeout = '5s';
ALTER FUNCTION jobq.heartbeat(bigint, uuid, interval) SET lock_timeout = '5s';
ALTER FUNCTION jobq.release(bigint, uuid) SET lock_timeout = '5s';

---------------------------------------------------------------------------
-- operator API
---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq.retry(id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job jobq._job_archive;
    v_queue text;
BEGIN
    -- Run a job again now: a dead or cancelled job comes back with a fresh
    -- attempt budget; a waiting (scheduled or backing-off) job runs now.
    -- False for running, completed and unknown jobs.
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
    BEGIN
        INSERT INTO jobq._job (id, queue, payload, priority, run_at, attempts, max_attempts,
                               job_key, last_error, created_at, group_key)
        VALUES (v_job.id, v_job.queue, v_job.payload, v_job.priority, now(), 0, v_job.max_attempts,
                v_job.job_key, v_job.last_error, v_job.created_at, v_job.group_key);
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'jobq: job % cannot be retried: job_key % is held by an active job',
                v_job.id, pg_catalog.quote_literal(v_job.job_key)
            USING ERRCODE = 'JQ013',
                  HINT = 'Wait for the active job to finish, or cancel it with jobq.cancel(), then retry.';
    END;
    DELETE FROM jobq._job_archive AS a WHERE a.id = v_job.id;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION jobq.retry_dead(queue text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
-- The argument is named queue, like the column in ON CONFLICT (queue, job_key)
-- below: resolve unqualified names to columns (the argument is always
-- written retry_dead.queue).
#variable_conflict use_column
DECLARE
    v_moved integer;
BEGIN
    -- Bring every dead job of a queue back with a fresh attempt budget.
    -- Jobs whose job_key is held by an active job stay dead (see NOTICE).
    PERFORM jobq._check_queue(retry_dead.queue, 'queue');
    WITH dead AS (
        SELECT a.* FROM jobq._job_archive AS a
        WHERE a.queue = retry_dead.queue AND a.status = 'dead'
        ORDER BY a.id
        FOR UPDATE SKIP LOCKED
    ), moved AS (
        INSERT INTO jobq._job (id, queue, payload, priority, run_at, attempts, max_attempts,
                               job_key, last_error, created_at, group_key)
        SELECT d.id, d.queue, d.payload, d.priority, now(), 0, d.max_attempts,
               d.job_key, d.last_error, d.created_at, d.group_key
        FROM dead AS d
        ORDER BY d.id
        ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
        RETURNING id
    ), removed AS (
        DELETE FROM jobq._job_archive AS a USING moved AS m WHERE a.id = m.id
        RETURNING a.id
    )
    SELECT count(*) INTO v_moved FROM removed;
    IF EXISTS (SELECT FROM jobq._job_archive AS a WHERE a.queue = retry_dead.queue AND a.status = 'dead') THEN
        RAISE NOTICE 'jobq: some dead jobs of queue % stay dead: their job_key is held by an active job',
            pg_catalog.quote_literal(retry_dead.queue);
    END IF;
    RETURN v_moved;
END
$$;

DROP FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer);
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
    rate_interval interval DEFAULT NULL
) RETURNS jobq._queue
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_constraint text;
BEGIN
    -- Set the given settings of a queue (NULL arguments leave a setting as
    -- it is; concurrency => 0 or rate_limit => 0 removes that limit);
    -- returns the effective settings. New jobs and new failures use them;
    -- max_attempts is fixed on a job when it is enqueued.
    PERFORM jobq._check_queue(configure_queue.queue, 'queue');
    INSERT INTO jobq._queue AS q (queue, max_attempts, backoff_base, backoff_cap, backoff_jitter,
                                  lease, retention, dead_retention, max_payload_bytes,
                                  concurrency, rate_limit, rate_interval)
    VALUES (configure_queue.queue, configure_queue.max_attempts, configure_queue.backoff_base,
            configure_queue.backoff_cap, configure_queue.backoff_jitter, configure_queue.lease,
            configure_queue.retention, configure_queue.dead_retention, configure_queue.max_payload_bytes,
            nullif(configure_queue.concurrency, 0), nullif(configure_queue.rate_limit, 0),
            configure_queue.rate_interval)
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
        updated_at = now();
    RETURN jobq._settings(configure_queue.queue);
EXCEPTION WHEN check_violation THEN
    GET STACKED DIAGNOSTICS v_constraint := CONSTRAINT_NAME;
    RAISE EXCEPTION 'jobq: setting % is out of range', regexp_replace(v_constraint, '^queue_|_range$', '', 'g')
        USING ERRCODE = 'JQ012',
              HINT = 'Ranges: max_attempts 1..1000, backoff_base 0..1 day, backoff_cap 0..30 days, '
                     'backoff_jitter 0..1, lease 1 s..1 day, retention 0..3650 days, '
                     'dead_retention 1 s..3650 days, max_payload_bytes 1..104857600, '
                     'concurrency 1..10000 (0: no limit), rate_limit 1..1000000 (0: no limit), '
                     'rate_interval 1 s..1 day.';
END
$$;
COMMENT ON FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer, integer, integer, interval)
    IS 'Sets per-queue settings (NULL leaves a setting unchanged, 0 removes a concurrency or rate limit); returns the effective settings.';

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
        rate_limit = NULL, rate_interval = NULL, updated_at = now()
    WHERE q.queue = reset_queue.queue;
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION jobq.prune(n integer DEFAULT 100000) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_pruned integer;
BEGIN
    -- Delete up to n finished jobs whose retention has passed, and the
    -- rate-limit bookkeeping older than any rate window (1 day).
    PERFORM jobq._check_batch(prune.n, 'n', 10000000);
    WITH old AS (
        SELECT a.id FROM jobq._job_archive AS a
        WHERE a.prune_after < now()
        ORDER BY a.prune_after
        LIMIT prune.n
        FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM jobq._job_archive AS a USING old AS o WHERE a.id = o.id RETURNING a.id
    )
    SELECT count(*) INTO v_pruned FROM gone;
    DELETE FROM jobq._rate_start AS r WHERE r.started_at < now() - interval '1 day';
    RETURN v_pruned;
END
$$;

CREATE FUNCTION jobq.pause(queue text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_was boolean;
BEGIN
    -- Stop claims from a queue (running jobs finish; enqueueing goes on).
    -- True when the queue was not paused before.
    PERFORM jobq._check_queue(pause.queue, 'queue');
    SELECT coalesce(q.paused, false) INTO v_was FROM jobq._queue AS q WHERE q.queue = pause.queue FOR UPDATE;
    INSERT INTO jobq._queue AS q (queue, paused) VALUES (pause.queue, true)
    ON CONFLICT ON CONSTRAINT _queue_pkey DO UPDATE SET paused = true, updated_at = now();
    RETURN NOT coalesce(v_was, false);
END
$$;
COMMENT ON FUNCTION jobq.pause(text) IS 'Stops claims from a queue until jobq.resume(); true when it was not paused.';

CREATE FUNCTION jobq.resume(queue text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Let workers claim from a paused queue again, and wake them.
    -- True when the queue was paused.
    PERFORM jobq._check_queue(resume.queue, 'queue');
    UPDATE jobq._queue AS q SET paused = false, updated_at = now()
    WHERE q.queue = resume.queue AND q.paused;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('jobq', resume.queue);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.resume(text) IS 'Lets workers claim from a paused queue again; true when it was paused.';

---------------------------------------------------------------------------
-- periodic jobs
---------------------------------------------------------------------------

CREATE FUNCTION jobq._periodic_save(
    p_name text, p_schedule text, p_queue text, p_payload jsonb, p_priority integer, p_max_attempts integer
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Validate and store a periodic job's definition (for jobq.every, which
    -- runs as its caller so that pg_cron runs the job as that role).
    PERFORM jobq._check_periodic_name(p_name);
    PERFORM jobq._check_queue(p_queue, 'queue');
    PERFORM jobq._check_payload(p_payload, 'payload', (jobq._settings(p_queue)).max_payload_bytes);
    PERFORM jobq._check_job_options(p_priority, p_max_attempts);
    IF p_schedule IS NULL THEN
        RAISE EXCEPTION 'jobq: schedule must not be NULL'
            USING ERRCODE = 'JQ012', HINT = 'Use cron syntax, e.g. ''0 3 * * *'' (03:00 every day).';
    END IF;
    INSERT INTO jobq._periodic AS p (name, schedule, queue, payload, priority, max_attempts)
    VALUES (p_name, p_schedule, p_queue, p_payload, p_priority, p_max_attempts)
    ON CONFLICT ON CONSTRAINT _periodic_pkey DO UPDATE
    SET schedule = excluded.schedule, queue = excluded.queue, payload = excluded.payload,
        priority = excluded.priority, max_attempts = excluded.max_attempts, updated_at = now();
END
$$;
COMMENT ON FUNCTION jobq._periodic_save(text, text, text, jsonb, integer, integer) IS
    'Validates and stores a periodic job definition (used by jobq.every).';

CREATE FUNCTION jobq._periodic_delete(p_name text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Forget a periodic job's definition (for jobq.unschedule); false when unknown.
    PERFORM jobq._check_periodic_name(p_name);
    DELETE FROM jobq._periodic AS p WHERE p.name = p_name;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION jobq._periodic_delete(text) IS 'Deletes a periodic job definition (used by jobq.unschedule).';

CREATE FUNCTION jobq.every(
    name text,
    schedule text,
    queue text,
    payload jsonb DEFAULT '{}'::jsonb,
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_jobid bigint;
BEGIN
    -- Enqueue payload on queue at every tick of a cron schedule, through
    -- pg_cron (re-running with the same name updates it). Each run uses the
    -- job_key 'every:<name>', so a slow worker never piles up copies: while
    -- one is ready, scheduled or running, the next tick adds nothing.
    -- Returns the pg_cron job id. Runs as the calling role.
    PERFORM jobq._require_pg_cron();
    PERFORM jobq._periodic_save(every.name, every.schedule, every.queue, every.payload,
                                every.priority, every.max_attempts);
    BEGIN
        v_jobid := cron.schedule('jobq-every:' || every.name, every.schedule,
                                 format('SELECT jobq.enqueue_periodic(%L)', every.name));
    EXCEPTION WHEN invalid_parameter_value THEN
        RAISE EXCEPTION 'jobq: pg_cron rejected schedule %', pg_catalog.quote_literal(every.schedule)
            USING ERRCODE = 'JQ012', DETAIL = SQLERRM,
                  HINT = 'pg_cron 1.4 takes cron syntax only (five fields, one minute at the finest), e.g. ''*/5 * * * *''.';
    END;
    RETURN v_jobid;
END
$$;
COMMENT ON FUNCTION jobq.every(text, text, text, jsonb, integer, integer) IS
    'Schedules a periodic job with pg_cron (deduplicated: one active copy at a time); returns the pg_cron job id.';

CREATE FUNCTION jobq.unschedule(name text) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Remove a periodic job registered with jobq.every() (jobs it already
    -- enqueued stay). False when no such periodic job exists.
    PERFORM jobq._require_pg_cron();
    IF NOT jobq._periodic_delete(unschedule.name) THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT FROM cron.job AS c WHERE c.jobname = 'jobq-every:' || unschedule.name) THEN
        PERFORM cron.unschedule('jobq-every:' || unschedule.name);
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.unschedule(text) IS 'Removes a periodic job (its pg_cron entry too); false when unknown.';

CREATE FUNCTION jobq.enqueue_periodic(name text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_periodic jobq._periodic;
BEGIN
    -- What pg_cron runs at each tick of a periodic job: enqueue it under the
    -- job_key 'every:<name>'; returns the new job's id, or the id of the copy
    -- that is still active.
    PERFORM jobq._check_periodic_name(enqueue_periodic.name);
    SELECT * INTO v_periodic FROM jobq._periodic AS p WHERE p.name = enqueue_periodic.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'jobq: no periodic job named %', pg_catalog.quote_literal(enqueue_periodic.name)
            USING ERRCODE = 'JQ016', HINT = 'See jobq.schedules; remove stale pg_cron entries with cron.unschedule().';
    END IF;
    RETURN jobq._insert_job(v_periodic.queue, v_periodic.payload, now(), v_periodic.priority,
                            coalesce(v_periodic.max_attempts, (jobq._settings(v_periodic.queue)).max_attempts),
                            'every:' || v_periodic.name, NULL);
END
$$;
COMMENT ON FUNCTION jobq.enqueue_periodic(text) IS
    'Enqueues one run of a periodic job (called by pg_cron); returns the job id, or the id of the run still active.';

---------------------------------------------------------------------------
-- views
---------------------------------------------------------------------------

DROP VIEW jobq.jobs;
CREATE VIEW jobq.jobs AS
    -- Every job jobq still knows, live or finished, with one status column:
    -- ready, scheduled, running, completed, dead or cancelled.
    SELECT j.id, j.queue, j.payload,
           CASE WHEN j.status = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.status END AS status,
           j.priority::integer AS priority, j.run_at, j.attempts, j.max_attempts, j.job_key, j.worker,
           j.lease_expires_at, j.last_error, j.created_at, j.started_at, NULL::timestamptz AS finished_at,
           j.group_key
    FROM jobq._job AS j
    UNION ALL
    SELECT a.id, a.queue, a.payload, a.status, a.priority::integer, a.run_at, a.attempts, a.max_attempts,
           a.job_key, a.worker, NULL::timestamptz, a.last_error, a.created_at, a.started_at, a.finished_at,
           a.group_key
    FROM jobq._job_archive AS a;
COMMENT ON VIEW jobq.jobs IS 'All live and finished jobs with a single status column (for operators).';

DROP VIEW jobq.queues;
CREATE VIEW jobq.queues AS
    -- Effective settings of every configured queue and every queue with jobs.
    SELECT s.*
    FROM (SELECT q.queue FROM jobq._queue AS q
          UNION SELECT j.queue FROM jobq._job AS j
          UNION SELECT a.queue FROM jobq._job_archive AS a WHERE a.status = 'dead') AS n,
         LATERAL jobq._settings(n.queue) AS s;
COMMENT ON VIEW jobq.queues IS 'Effective settings (overrides over defaults) of every known queue.';

DROP VIEW jobq.stats;
CREATE VIEW jobq.stats AS
    -- Per queue: jobs ready now, scheduled for later, running, dead, the
    -- age of the oldest ready job (how far behind the workers are), and
    -- whether the queue is paused.
    WITH live AS (
        SELECT j.queue,
               count(*) FILTER (WHERE j.status = 'ready' AND j.run_at <= now()) AS ready,
               count(*) FILTER (WHERE j.status = 'ready' AND j.run_at > now()) AS scheduled,
               count(*) FILTER (WHERE j.status = 'running') AS running,
               now() - min(j.run_at) FILTER (WHERE j.status = 'ready' AND j.run_at <= now()) AS oldest_ready_age
        FROM jobq._job AS j
        GROUP BY j.queue
    ), dead AS (
        SELECT a.queue, count(*) AS dead
        FROM jobq._job_archive AS a
        WHERE a.status = 'dead'
        GROUP BY a.queue
    ), names AS (
        SELECT l.queue FROM live AS l
        UNION SELECT d.queue FROM dead AS d
        UNION SELECT q.queue FROM jobq._queue AS q
    )
    SELECT n.queue,
           coalesce(l.ready, 0) AS ready,
           coalesce(l.scheduled, 0) AS scheduled,
           coalesce(l.running, 0) AS running,
           coalesce(d.dead, 0) AS dead,
           coalesce(l.oldest_ready_age, interval '0') AS oldest_ready_age,
           coalesce(q.paused, false) AS paused
    FROM names AS n
    LEFT JOIN live AS l ON l.queue = n.queue
    LEFT JOIN dead AS d ON d.queue = n.queue
    LEFT JOIN jobq._queue AS q ON q.queue = n.queue;
COMMENT ON VIEW jobq.stats IS 'Per queue: ready, scheduled, running and dead job counts, the age of the oldest ready job, paused.';

CREATE VIEW jobq.schedules AS
    -- Periodic jobs registered with jobq.every().
    SELECT p.name, p.schedule, p.queue, p.payload, p.priority::integer AS priority, p.max_attempts,
           p.created_at, p.updated_at
    FROM jobq._periodic AS p;
COMMENT ON VIEW jobq.schedules IS 'Periodic jobs registered with jobq.every() (pg_cron enqueues them).';

---------------------------------------------------------------------------
-- privileges (new and re-created objects)
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA jobq FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
    jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text),
    jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text)
TO jobq_producer;

GRANT EXECUTE ON FUNCTION
    jobq.take(text, integer),
    jobq.snooze(bigint, uuid, timestamptz)
TO jobq_worker;

GRANT EXECUTE ON FUNCTION
    jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer, integer, integer, interval),
    jobq.pause(text),
    jobq.resume(text),
    jobq.every(text, text, text, jsonb, integer, integer),
    jobq.unschedule(text),
    jobq.enqueue_periodic(text),
    jobq._periodic_save(text, text, text, jsonb, integer, integer),
    jobq._periodic_delete(text)
TO jobq_admin;
GRANT SELECT ON jobq.stats, jobq.jobs, jobq.queues, jobq.schedules TO jobq_admin;
GRANT SELECT ON jobq._periodic, jobq._rate_start TO jobq_admin;

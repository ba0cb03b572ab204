-- jobq 0.2.0 → 0.3.0: the fast path. One line per change:
--   * claim leases with a HOT update: no index covers status or the lease columns (the lease index is
--     gone, the claim index now excludes only "parked" rows), and _job's fillfactor is 40 so the new,
--     larger row version of a lease fits on its page even when every row of the page is leased
--   * a queue without pause, limits or serial-group jobs is claimed by one set-based statement
--     (jobq._plain_leases decides); the others keep the full path (jobq._pick), which parks its leases
--   * a lease that outlives its first heartbeat, or is held over 10 s when reap looks, is parked
--     (_job.parked): out of the claim index, so claimers never step over long-running jobs
--   * reap finds expired leases by scanning the live table (no lease index to keep up)
--   * claim, take, hold, enqueue and enqueue_many test their arguments in one expression
--     (_claim_args_ok, _enqueue_args_ok); the checks that name a bad argument run when it says no
--   * complete_many and the other finishing calls copy no row when no queue keeps history
--   * completed jobs leave no history unless the queue's retention says so (default retention 0);
--     dead and cancelled jobs are always kept (until retried or past dead_retention)
--   * per-queue counters (jobq._counter: completed, failed, dead per minute), one row per statement,
--     folded by reap/prune; jobq.stats gains completed_total, failed_total, dead_total
--   * take() locks and deletes its jobs without writing them first (no lease, no archive copy by default)
--   * hold() / complete_held() / fail_held(): in-transaction processing job by job — row locks
--     instead of a lease, one acknowledgement per job, commit as the acknowledgement
--   * NOTIFY comes from the inserting functions themselves (the transition-table trigger is gone):
--     still one per queue per statement, payload the queue name
--   * configure_queue parks the queue's current leases when it sets a concurrency limit
--
-- Applied by ALTER EXTENSION jobq UPDATE TO '0.3.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.2.0 is installed.

SET search_path TO pg_catalog, pg_temp;

DO $guard$
BEGIN
    IF jobq.version() <> '0.2.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.2.0 to 0.3.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.3.0');

CREATE OR REPLACE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '0.3.0'::text
$$;

---------------------------------------------------------------------------
-- tables
---------------------------------------------------------------------------

ALTER TABLE jobq._job
    ADD COLUMN parked boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT job_parked_when_running CHECK (NOT parked OR status = 'running');
COMMENT ON COLUMN jobq._job.parked IS
    'A running job kept out of the claim index (its lease outlived a heartbeat, or its queue has limits).';
-- Room on every page for the new row versions of a claim: a leased row is
-- about 45 % larger than a ready one (lease token, expiry, worker, start),
-- so a page whose every row gets leased needs 60 % of it free.
ALTER TABLE jobq._job SET (fillfactor = 40);
-- Leases granted by 0.2.0 are out of its claim index: they stay out.
UPDATE jobq._job SET parked = true WHERE status = 'running';

DROP INDEX jobq._job_claim_idx;
DROP INDEX jobq._job_lease_idx;
-- Exactly the claim query: equality on queue, ORDER BY priority, run_at, id.
-- Fresh leases stay in it (claim writes no indexed column, so its UPDATE is
-- HOT) and are skipped by their status; parked ones leave it.
CREATE INDEX _job_claim_idx ON jobq._job (queue, priority, run_at, id)
    WHERE NOT parked;
-- Running jobs of limited queues (always parked), for their concurrency count.
CREATE INDEX _job_parked_idx ON jobq._job (queue)
    WHERE parked;

-- Finished-job counters: one row per finishing statement and queue, in the
-- minute its transaction started (now()), folded into one row per queue and
-- minute by reap/prune (older than a day: one row per queue at -infinity).
-- Sums are totals.
CREATE TABLE jobq._counter (
    queue      text NOT NULL,
    bucket     timestamptz NOT NULL,
    completed  bigint NOT NULL DEFAULT 0,
    failed     bigint NOT NULL DEFAULT 0,
    dead       bigint NOT NULL DEFAULT 0
) WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE jobq._counter IS 'Completed jobs, failed attempts and dead-lettered jobs per queue and minute. Private: read jobq.stats.';

DO $dump$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'jobq') THEN
        PERFORM pg_catalog.pg_extension_config_dump('jobq._counter', '');
    END IF;
END
$dump$;

-- NOTIFY now comes from the functions that insert jobs.
DROP TRIGGER _900_notify_worker ON jobq._job;
DROP FUNCTION jobq._notify_inserted();

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

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
           coalesce(q.retention, interval '0'),       -- completed jobs leave no history unless asked
           q.dead_retention,                          -- NULL: dead and cancelled jobs stay until retried
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

CREATE FUNCTION jobq._check_claim_args(p_queues text[], p_n integer, p_lease interval) RETURNS void
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
    -- By position: arrays may start at any index.
    FOR v_queue IN SELECT u.name, u.ord FROM unnest(p_queues) WITH ORDINALITY AS u(name, ord) LOOP
        PERFORM jobq._check_queue(v_queue.name, format('queues[%s]', v_queue.ord));
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq._check_claim_args(text[], integer, interval) IS
    'Raises the JQ error of the first bad claim/take/hold argument (isolation, n, lease, queue names).';

CREATE FUNCTION jobq._claim_args_ok(p_queues text[], p_n integer, p_lease interval, p_worker text)
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
        AND (p_lease IS NULL OR p_lease BETWEEN interval '1 second' AND interval '1 day')
        AND coalesce(char_length(p_worker), 0) <= 200
        AND cardinality(p_queues) BETWEEN 1 AND 100
        AND array_position(p_queues, NULL) IS NULL
        AND array_to_string(p_queues, ' ') ~ '^[A-Za-z0-9_.:-]{1,128}( [A-Za-z0-9_.:-]{1,128})*$'
        AND char_length(array_to_string(p_queues, ' ')) - char_length(replace(array_to_string(p_queues, ' '), ' ', ''))
            = cardinality(p_queues) - 1
        AND current_setting('transaction_isolation') = 'read committed',
        false);
END
$$;
COMMENT ON FUNCTION jobq._claim_args_ok(text[], integer, interval, text) IS
    'True when every claim argument is valid (the hot path''s one test; the _check functions name a bad one).';

CREATE FUNCTION jobq._plain_leases(p_queues text[], p_lease interval, OUT names text[], OUT leases interval[])
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
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

CREATE FUNCTION jobq._history_kept() RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Whether any queue keeps completed jobs as history (retention over 0,
    -- by its own setting or by the default): when none does, finishing a
    -- completed job need not copy its row.
    RETURN (jobq._settings(NULL)).retention > interval '0'
        OR EXISTS (SELECT FROM jobq._queue AS q WHERE q.retention > interval '0');
END
$$;
COMMENT ON FUNCTION jobq._history_kept() IS 'Whether any queue keeps completed jobs in the archive (retention > 0).';

DROP FUNCTION jobq._finish(bigint[], uuid[], text, text);
CREATE FUNCTION jobq._finish(p_ids bigint[], p_lease_tokens uuid[], p_status text, p_error text,
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
    v_now timestamptz := clock_timestamp();
BEGIN
    -- Take live jobs out of the live table as p_status (completed, dead or
    -- cancelled). A non-NULL lease token fences: the job must still be held
    -- under exactly that lease. p_held: jobs the caller's transaction holds
    -- without a lease (take, hold): they must be unleased, and this
    -- transaction is their attempt. Every job is counted (one counter row per
    -- queue); history keeps dead and cancelled jobs, and completed ones when
    -- their queue's retention is over 0. Finishing a serial-group job or a job
    -- of a concurrency-limited queue frees a slot, so it wakes that queue's
    -- workers. Returns the ids that left the live table.
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
            RETURNING j.id, j.queue, j.group_key
        )
        SELECT array_agg(g.id), array_agg(g.queue), array_agg(DISTINCT g.queue) FILTER (WHERE g.group_key IS NOT NULL)
        INTO v_ids, v_queues, v_wake
        FROM gone AS g;
        IF v_ids IS NULL THEN
            RETURN;
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
                 job_key, worker, last_error, created_at, started_at, finished_at, prune_after, group_key)
            SELECT g.id, g.queue, g.payload, p_status, g.priority, g.run_at, g.attempts + p_held::integer,
                   g.max_attempts, g.job_key, CASE WHEN p_held THEN session_user ELSE g.worker END,
                   coalesce(p_error, g.last_error), g.created_at,
                   CASE WHEN p_held THEN v_now ELSE g.started_at END,
                   v_now, v_now + CASE WHEN p_status = 'completed' THEN s.retention ELSE s.dead_retention END,
                   g.group_key
            FROM gone AS g
            JOIN settings AS s ON s.queue = g.queue
            WHERE p_status <> 'completed' OR s.retention > interval '0'
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

CREATE OR REPLACE FUNCTION jobq._insert_job(
    p_queue text, p_payload jsonb, p_run_at timestamptz, p_priority integer, p_max_attempts integer,
    p_job_key text, p_group_key text
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id bigint;
BEGIN
    -- Insert one validated job and wake the queue's workers; with a job_key
    -- already held by an active job, return that job's id instead. Loops when
    -- the holder finishes between the INSERT and the lookup.
    FOR i IN 1..10 LOOP
        INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, job_key, group_key)
        VALUES (p_queue, p_payload, p_run_at, p_priority, p_max_attempts, p_job_key, p_group_key)
        ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            PERFORM pg_notify('jobq', p_queue);
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
COMMENT ON FUNCTION jobq._insert_job(text, jsonb, timestamptz, integer, integer, text, text) IS
    'Inserts one validated job (and NOTIFYs), or returns the id of the active job holding its job_key.';

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
    -- its serial group. Slots are counted under transaction-scoped advisory
    -- locks taken with try-lock (a busy queue or group yields fewer jobs,
    -- never a wait, and a crashed claimer's locks vanish with its
    -- transaction); each count runs in a statement that starts after the
    -- lock, so it sees every claim that committed before. The jobs this path
    -- leases are parked, so the count of a queue's running jobs is an index
    -- scan. Records the starts of rate-limited queues at p_now, which the
    -- caller also stamps on the jobs as started_at. Jobs taken earlier in
    -- this transaction (take) count as running.
    PERFORM jobq._check_claim_args(p_queues, p_n, p_lease);
    FOR v_queue IN SELECT DISTINCT ON (u.name) u.name FROM unnest(p_queues) WITH ORDINALITY AS u(name, ord)
                   ORDER BY u.name, u.ord LOOP
        v_settings := jobq._settings(v_queue);
        v_slots := p_n;
        IF v_settings.paused THEN
            v_slots := 0;
        ELSIF v_settings.concurrency IS NOT NULL OR v_settings.rate_limit IS NOT NULL THEN
            IF NOT pg_try_advisory_xact_lock(1785684593, hashtext(v_queue)) THEN
                v_slots := 0;   -- another claimer is counting this queue's slots right now
            END IF;
        END IF;
        IF v_slots > 0 AND v_settings.concurrency IS NOT NULL THEN
            SELECT least(v_slots, v_settings.concurrency - count(*)
                                  - jobq._taken_in_transaction(v_queue))::integer INTO v_slots
            FROM jobq._job AS j
            WHERE j.queue = v_queue AND j.parked;
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
                 WHERE j.queue = q.name AND NOT j.parked AND j.status = 'ready' AND j.run_at <= now()
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

CREATE FUNCTION jobq._enqueue_args_ok(
    p_queue text, p_run_at timestamptz, p_priority integer, p_max_attempts integer, p_job_key text, p_group_key text
) RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Whether an enqueue's arguments (all but the payloads) are good, in one
    -- expression (no query): only a false sends the call through the checks
    -- that name the bad argument (_check_queue, _check_time,
    -- _check_job_options, _check_job_key), which this must never be more
    -- lenient than.
    RETURN coalesce(
        p_queue ~ '^[A-Za-z0-9_.:-]{1,128}$'
        AND isfinite(p_run_at) AND p_run_at BETWEEN now() - interval '10 years' AND now() + interval '10 years'
        AND p_priority BETWEEN -32768 AND 32767
        AND (p_max_attempts IS NULL OR p_max_attempts BETWEEN 1 AND 1000)
        AND (p_job_key IS NULL OR char_length(p_job_key) BETWEEN 1 AND 512)
        AND (p_group_key IS NULL OR char_length(p_group_key) BETWEEN 1 AND 512),
        false);
END
$$;
COMMENT ON FUNCTION jobq._enqueue_args_ok(text, timestamptz, integer, integer, text, text) IS
    'True when an enqueue''s arguments are valid (the hot path''s one test; the _check functions name a bad one).';

CREATE OR REPLACE FUNCTION jobq.enqueue(
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
    v_settings := jobq._settings(enqueue.queue);
    IF NOT (jobq._enqueue_args_ok(enqueue.queue, enqueue.run_at, enqueue.priority, enqueue.max_attempts,
                                  enqueue.job_key, enqueue.group_key)
            AND coalesce(jsonb_typeof(enqueue.payload) = 'object'
                         AND pg_column_size(enqueue.payload) <= v_settings.max_payload_bytes, false)) THEN
        PERFORM jobq._check_queue(enqueue.queue, 'queue');
        PERFORM jobq._check_payload(enqueue.payload, 'payload', v_settings.max_payload_bytes);
        PERFORM jobq._check_time(enqueue.run_at, 'run_at');
        PERFORM jobq._check_job_options(enqueue.priority, enqueue.max_attempts);
        PERFORM jobq._check_job_key(enqueue.job_key, 'job_key');
        PERFORM jobq._check_job_key(enqueue.group_key, 'group_key');
    END IF;
    RETURN jobq._insert_job(enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
                            coalesce(enqueue.max_attempts, v_settings.max_attempts), enqueue.job_key,
                            enqueue.group_key);
END
$$;

CREATE OR REPLACE FUNCTION jobq.enqueue_many(
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
    -- payload, in payload order, and wakes the queue's workers once. With
    -- group_key, they join that serial group in payload order.
    IF NOT (jobq._enqueue_args_ok(enqueue_many.queue, enqueue_many.run_at, enqueue_many.priority,
                                  enqueue_many.max_attempts, NULL, enqueue_many.group_key)
            AND v_n BETWEEN 0 AND 100000) THEN
        PERFORM jobq._check_queue(enqueue_many.queue, 'queue');
        IF enqueue_many.payloads IS NULL THEN
            RAISE EXCEPTION 'jobq: payloads must not be NULL'
                USING ERRCODE = 'JQ002', HINT = 'Pass an array of JSON objects, e.g. ARRAY[''{"a":1}'']::jsonb[].';
        END IF;
        PERFORM jobq._check_batch(v_n, 'cardinality(payloads)', 100000);
        PERFORM jobq._check_time(enqueue_many.run_at, 'run_at');
        PERFORM jobq._check_job_options(enqueue_many.priority, enqueue_many.max_attempts);
        PERFORM jobq._check_job_key(enqueue_many.group_key, 'group_key');
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
        PERFORM pg_notify('jobq', enqueue_many.queue);
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


CREATE FUNCTION jobq._claim(p_queues text[], p_n integer, p_worker text, p_lease interval)
RETURNS SETOF jobq.job
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    v_plain record;
    v_ids bigint[];
    v_leases interval[];
    v_now timestamptz;
BEGIN
    -- What both claim() overloads do once their arguments are checked:
    -- lease up to p_n ready jobs across p_queues, most urgent first
    -- (priority, run_at, id), each under its queue's lease unless given;
    -- paused queues, concurrency and rate limits and serial groups honoured.
    v_now := clock_timestamp();
    v_plain := jobq._plain_leases(p_queues, p_lease);
    IF v_plain.names IS NOT NULL THEN
        -- Plain queues: one statement picks (an index scan per queue) and
        -- leases. The lease writes no indexed column: a HOT update on the
        -- row's own page; the row stays in the claim index, and claims skip
        -- it by its status.
        RETURN QUERY
        WITH leased AS (
            UPDATE jobq._job AS j
            SET status = 'running',
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
               l.created_at, l.lease_token, l.lease_expires_at, l.worker, l.job_key, l.last_error, l.group_key
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
           l.created_at, l.lease_token, l.lease_expires_at, l.worker, l.job_key, l.last_error, l.group_key
    FROM leased AS l
    ORDER BY l.priority, l.run_at, l.id;
END
$$;
COMMENT ON FUNCTION jobq._claim(text[], integer, text, interval) IS
    'The claim itself (arguments already checked): fast path for plain queues, jobq._pick otherwise.';

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
    IF NOT jobq._claim_args_ok(ARRAY[claim.queue], claim.n, claim.lease, claim.worker) THEN
        PERFORM jobq._check_queue(claim.queue, 'queue');
        PERFORM jobq._check_worker(claim.worker);
        PERFORM jobq._check_claim_args(ARRAY[claim.queue], claim.n, claim.lease);
    END IF;
    RETURN QUERY SELECT * FROM jobq._claim(ARRAY[claim.queue], claim.n, claim.worker, claim.lease);
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
AS $$
BEGIN
    -- Lease up to n ready jobs across several queues, most urgent first
    -- (priority, run_at, id), each under its queue's lease unless given;
    -- paused queues, concurrency and rate limits and serial groups honoured.
    IF NOT jobq._claim_args_ok(claim.queues, claim.n, claim.lease, claim.worker) THEN
        PERFORM jobq._check_worker(claim.worker);
        PERFORM jobq._check_claim_args(claim.queues, claim.n, claim.lease);
    END IF;
    RETURN QUERY SELECT * FROM jobq._claim(claim.queues, claim.n, claim.worker, claim.lease);
END
$$;

CREATE FUNCTION jobq._lock_ready(p_queue text, p_n integer) RETURNS SETOF jobq.job
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    -- Row-lock up to n ready jobs of one queue for work inside the caller's
    -- transaction (take, hold), most urgent first, as that transaction sees
    -- them: no lease, this attempt counted. One index scan on a plain queue,
    -- the full path (jobq._pick) otherwise; then the jobs hold their queue's
    -- concurrency slots until the transaction ends. Arguments are already
    -- validated.
    IF (jobq._plain_leases(ARRAY[p_queue], NULL)).names IS NOT NULL THEN
        RETURN QUERY
        SELECT j.id, j.queue, j.payload, j.priority::integer, j.attempts + 1, j.max_attempts, j.run_at,
               j.created_at, NULL::uuid, NULL::timestamptz, session_user::text, j.job_key, j.last_error,
               j.group_key
        FROM jobq._job AS j
        WHERE j.queue = p_queue AND NOT j.parked AND j.status = 'ready' AND j.run_at <= now()
          AND j.group_key IS NULL
        ORDER BY j.priority, j.run_at, j.id
        LIMIT p_n
        FOR UPDATE SKIP LOCKED;
        RETURN;
    END IF;
    SELECT array_agg(p.id) INTO v_ids FROM jobq._pick(ARRAY[p_queue], p_n, NULL, clock_timestamp()) AS p;
    PERFORM set_config('jobq.taken',
                       jsonb_set(coalesce(nullif(current_setting('jobq.taken', true), '')::jsonb, '{}'),
                                 ARRAY[p_queue],
                                 to_jsonb(jobq._taken_in_transaction(p_queue) + coalesce(cardinality(v_ids), 0)))::text,
                       true);
    RETURN QUERY
    SELECT j.id, j.queue, j.payload, j.priority::integer, j.attempts + 1, j.max_attempts, j.run_at,
           j.created_at, NULL::uuid, NULL::timestamptz, session_user::text, j.job_key, j.last_error, j.group_key
    FROM jobq._job AS j
    WHERE j.id = ANY (v_ids)
    ORDER BY j.priority, j.run_at, j.id;
END
$$;
COMMENT ON FUNCTION jobq._lock_ready(text, integer) IS
    'Row-locks up to n ready jobs of a queue for in-transaction work (take, hold); limits and groups honoured.';

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
    RETURN QUERY
    WITH held AS (
        SELECT * FROM jobq._lock_ready(take.queue, take.n)
    ), done AS (
        SELECT count(*) FROM jobq._finish(ARRAY(SELECT h.id FROM held AS h), NULL, 'completed', NULL, true)
    )
    SELECT h.* FROM held AS h, done ORDER BY h.priority, h.run_at, h.id;
END
$$;

CREATE FUNCTION jobq.hold(queue text, n integer DEFAULT 1) RETURNS SETOF jobq.job
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
    RETURN QUERY SELECT * FROM jobq._lock_ready(hold.queue, hold.n);
END
$$;
COMMENT ON FUNCTION jobq.hold(text, integer) IS
    'Row-locks up to n ready jobs for the caller''s transaction (no lease); acknowledge with complete_held / fail_held.';

CREATE FUNCTION jobq.complete_held(ids bigint[]) RETURNS integer
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
    -- alone (never waited for).
    IF complete_held.ids IS NULL OR array_position(complete_held.ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: ids must be an array of job ids without NULL'
            USING ERRCODE = 'JQ010', HINT = 'Pass the ids of the jobs jobq.hold() returned.';
    END IF;
    PERFORM jobq._check_batch(cardinality(complete_held.ids), 'cardinality(ids)', 10000);
    SELECT count(*) INTO v_done FROM jobq._finish(complete_held.ids, NULL, 'completed', NULL, true);
    RETURN v_done;
END
$$;
COMMENT ON FUNCTION jobq.complete_held(bigint[]) IS
    'Marks jobs held by this transaction done (on commit); returns how many; never waits for another holder.';

CREATE FUNCTION jobq.fail_held(id bigint, error text, retry_at timestamptz DEFAULT NULL) RETURNS boolean
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
    -- its attempts are used up, as jobq.fail() does for a leased job. False
    -- (and no change) when the job is not ready and due (hold took only
    -- those; a job failed once already waits for its retry), or another
    -- transaction holds it.
    IF fail_held.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL'
            USING ERRCODE = 'JQ010', HINT = 'Pass the id of a job jobq.hold() returned.';
    END IF;
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
    INSERT INTO jobq._counter (queue, bucket, failed) VALUES (v_job.queue, date_trunc('minute', now()), 1);

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
        last_error = v_error
    WHERE j.id = v_job.id;
    -- A freed concurrency slot or group, or a retry already due: let workers look.
    PERFORM pg_notify('jobq', v_job.queue);
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION jobq.heartbeat(id bigint, lease_token uuid, extend interval DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_queue text;
BEGIN
    -- Extend the lease of a job still held under lease_token to now() +
    -- extend (default: the queue's lease). False when the lease was lost.
    -- A job that lives to be heart-beaten is long-running: it is parked (out
    -- of the claim index), so claims do not step over it while it runs.
    PERFORM jobq._check_lease_args(heartbeat.id, heartbeat.lease_token);
    PERFORM jobq._check_interval(heartbeat.extend, 'extend', interval '1 second', interval '1 day');
    UPDATE jobq._job AS j
    SET lease_expires_at = clock_timestamp()
                           + coalesce(heartbeat.extend, (jobq._settings(j.queue)).lease),
        parked = true
    WHERE j.id = heartbeat.id AND j.lease_token = heartbeat.lease_token
    RETURNING j.queue INTO v_queue;
    RETURN v_queue IS NOT NULL;
END
$$;

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
        lease_expires_at = NULL
    WHERE j.id = release.id AND j.lease_token = release.lease_token
    RETURNING j.queue INTO v_queue;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('jobq', v_queue);
    RETURN true;
END
$$;

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

CREATE FUNCTION jobq._fold_counters() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Fold the per-statement counter rows into one row per queue and minute;
    -- rows older than a day into one row per queue at -infinity. One folder
    -- at a time (the others skip); rows committed meanwhile wait for the next.
    IF NOT pg_try_advisory_xact_lock(1785684595, 0) THEN
        RETURN;
    END IF;
    WITH counted AS (
        SELECT c.ctid AS row_id, c.queue, c.bucket AS was,
               CASE WHEN c.bucket < now() - interval '1 day' THEN '-infinity'::timestamptz ELSE c.bucket END AS bucket
        FROM jobq._counter AS c
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
    -- lease-expiry note. No index covers the lease (claims stay HOT): this
    -- scans the live table, which holds only live jobs. Leases held for
    -- over 10 seconds are parked (out of the claim index). Also folds the
    -- counters, so they stay small where pg_cron does not run prune().
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

    WITH requeued AS (
        UPDATE jobq._job AS j
        SET status = 'ready',
            parked = false,
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
    -- Leases held for over 10 seconds (a worker that never heart-beats)
    -- leave the claim index too, so claims do not step over them.
    -- Rows busy elsewhere are skipped, never waited for.
    UPDATE jobq._job AS j SET parked = true
    WHERE j.id IN (SELECT l.id FROM jobq._job AS l
                   WHERE l.status = 'running' AND NOT l.parked AND l.started_at < now() - interval '10 seconds'
                   FOR UPDATE SKIP LOCKED);
    PERFORM jobq._fold_counters();
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
    PERFORM pg_notify('jobq', v_job.queue);
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
    IF v_moved > 0 THEN
        PERFORM pg_notify('jobq', retry_dead.queue);
    END IF;
    IF EXISTS (SELECT FROM jobq._job_archive AS a WHERE a.queue = retry_dead.queue AND a.status = 'dead') THEN
        RAISE NOTICE 'jobq: some dead jobs of queue % stay dead: their job_key is held by an active job',
            pg_catalog.quote_literal(retry_dead.queue);
    END IF;
    RETURN v_moved;
END
$$;

CREATE OR REPLACE FUNCTION jobq.prune(n integer DEFAULT 100000) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_pruned integer;
BEGIN
    -- Delete up to n finished jobs whose retention has passed and the
    -- rate-limit bookkeeping older than any rate window (1 day); fold the
    -- counters.
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
    PERFORM jobq._fold_counters();
    RETURN v_pruned;
END
$$;

CREATE OR REPLACE FUNCTION jobq.configure_queue(
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
    -- max_attempts is fixed on a job when it is enqueued. A new concurrency
    -- limit counts the jobs running now; a claim already under way when it
    -- commits may still lease past it once.
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
                     'rate_interval 1 s..1 day.';
END
$$;

---------------------------------------------------------------------------
-- views
---------------------------------------------------------------------------

CREATE OR REPLACE VIEW jobq.stats AS
    -- Per queue: jobs ready now, scheduled for later, running, dead, the
    -- age of the oldest ready job (how far behind the workers are), whether
    -- the queue is paused, and the totals of completed jobs, failed attempts
    -- and dead-lettered jobs (from the counters: history is never scanned).
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
           coalesce(l.oldest_ready_age, interval '0') AS oldest_ready_age,
           coalesce(q.paused, false) AS paused,
           coalesce(t.completed, 0) AS completed_total,
           coalesce(t.failed, 0) AS failed_total,
           coalesce(t.dead, 0) AS dead_total
    FROM names AS n
    LEFT JOIN live AS l ON l.queue = n.queue
    LEFT JOIN dead AS d ON d.queue = n.queue
    LEFT JOIN jobq._queue AS q ON q.queue = n.queue
    LEFT JOIN totals AS t ON t.queue = n.queue;
COMMENT ON VIEW jobq.stats IS
    'Per queue: ready, scheduled, running and dead job counts, the age of the oldest ready job, paused, and completed/failed/dead totals.';

---------------------------------------------------------------------------
-- privileges (new and re-created objects)
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA jobq FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
    jobq.hold(text, integer),
    jobq.complete_held(bigint[]),
    jobq.fail_held(bigint, text, timestamptz)
TO jobq_worker;
GRANT SELECT ON jobq._counter TO jobq_admin;

-- jobq 0.10.0 → 0.11.0. One line per change:
--   complete, fail, heartbeat, release, snooze: the lease token is a uuid only; the text-token
--     overloads are dropped (with jobq._lease_token), so a driver that prepares `jobq.complete($1, $2)`
--     (asyncpg, postgres.js) is asked for a uuid and can pass back what claim returned (issue 29).
--   _retry_or_bury (fail, fail_held): NOTIFY only when the retry is due now or a slot or group is freed,
--     not while it waits out its backoff (issue 29).
--   next_run_at: its COMMENT says the next scheduled time (it said "ready") (issue 29).

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

---------------------------------------------------------------------------
-- 4. private helpers
---------------------------------------------------------------------------

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
           false AS paused,
           interval '1 day' AS result_retention;     -- a completed job's result, at the least
COMMENT ON VIEW jobq._queue_defaults IS 'Built-in defaults of the queue settings (one row). Private: read jobq.queues.';

CREATE FUNCTION jobq._settings(p_queue text) RETURNS jobq._queue
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
           coalesce(q.result_retention, d.result_retention),
           coalesce(q.fair, false),                   -- fair: claimed round-robin across fair keys
           q.fair_weights,                            -- NULL: every key weight 1
           q.per_key_concurrency,                     -- NULL: no limit per key
           q.fair_cursor,
           q.fair_turns
    INTO v_settings
    FROM jobq._queue_defaults AS d
    LEFT JOIN jobq._queue AS q ON q.queue = p_queue;
    RETURN v_settings;
END
$$;
COMMENT ON FUNCTION jobq._settings(text) IS 'Effective settings of a queue (overrides from jobq._queue over built-in defaults).';

CREATE FUNCTION jobq._backoff_delay(
    p_attempt integer, p_base interval, p_cap interval, p_jitter double precision, p_random double precision
) RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- Delay after the p_attempt-th failure: min(base * 2^(attempt-1), cap)
    -- scaled by a jitter factor in [1 - jitter, 1] (p_random in [0, 1)).
    -- The exponent is clamped, so no attempt count can overflow.
    SELECT make_interval(secs =>
        least(extract(epoch FROM p_base)::double precision
                  * power(2::double precision, (least(greatest(p_attempt, 1), 64) - 1)::double precision),
              extract(epoch FROM p_cap)::double precision)
        * (1 - p_jitter * p_random))
$$;
COMMENT ON FUNCTION jobq._backoff_delay(integer, interval, interval, double precision, double precision)
    IS 'Backoff delay: min(base * 2^(attempt-1), cap) * (1 - jitter * random). Overflow-proof.';

CREATE FUNCTION jobq._history_kept() RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Whether any queue keeps completed jobs as history (retention over 0,
    -- by its own setting or by the default): when none does, finishing a
    -- completed job need not copy its row. (The default read from
    -- jobq._queue_defaults directly: no jobq._settings call per finish.)
    RETURN (SELECT d.retention FROM jobq._queue_defaults AS d) > interval '0'
        OR EXISTS (SELECT FROM jobq._queue AS q WHERE q.retention > interval '0');
END
$$;
COMMENT ON FUNCTION jobq._history_kept() IS 'Whether any queue keeps completed jobs in the archive (retention > 0).';

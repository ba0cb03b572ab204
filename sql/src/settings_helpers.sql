---------------------------------------------------------------------------
-- 4. private helpers
---------------------------------------------------------------------------

CREATE FUNCTION jobq._settings(p_queue text) RETURNS jobq._queue
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
           coalesce(q.paused, false),
           q.timeout                                  -- NULL: handlers run as long as they take
    INTO v_settings
    FROM (SELECT) AS one
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
    -- completed job need not copy its row.
    RETURN (jobq._settings(NULL)).retention > interval '0'
        OR EXISTS (SELECT FROM jobq._queue AS q WHERE q.retention > interval '0');
END
$$;
COMMENT ON FUNCTION jobq._history_kept() IS 'Whether any queue keeps completed jobs in the archive (retention > 0).';

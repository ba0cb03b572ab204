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

CREATE FUNCTION jobq._record_errors(p_ids bigint[], p_attempts integer[], p_errors text[], p_workers text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
BEGIN
    -- Keep the error of each failed attempt (job, attempt, error, worker, one
    -- per array position) in jobq._job_error, and of each of these jobs only
    -- the last 25: a job failing for days keeps a bounded history. By the
    -- jobs' ids only (index paths), whatever size the table had when the
    -- session planned these statements.
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

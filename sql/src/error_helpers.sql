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

---------------------------------------------------------------------------
-- 3. validation helpers
---------------------------------------------------------------------------

CREATE FUNCTION jobq._check_queue(p_queue text, p_arg text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ001 unless p_queue is a valid queue name; p_arg names the argument.
    IF p_queue IS NULL OR p_queue !~ '^[A-Za-z0-9_.:-]{1,128}$' THEN
        RAISE EXCEPTION 'jobq: % must be a queue name of 1 to 128 characters from [A-Za-z0-9_.:-], got %',
                p_arg, coalesce(pg_catalog.quote_literal(pg_catalog.left(p_queue, 200)), 'NULL')
            USING ERRCODE = 'JQ001',
                  HINT = 'Use names such as ''emails'' or ''billing.invoices''.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_queue(text, text) IS 'Raises JQ001 for a NULL, empty, too long or badly spelled queue name.';

CREATE FUNCTION jobq._check_payload(p_payload jsonb, p_arg text, p_max_bytes integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ002/JQ003 unless p_payload is a JSON object within the size cap.
    IF p_payload IS NULL OR jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'jobq: % must be a JSON object, got %', p_arg,
                coalesce(jsonb_typeof(p_payload), 'NULL')
            USING ERRCODE = 'JQ002',
                  HINT = 'Wrap the value in an object, e.g. ''{"value": 42}''::jsonb.';
    END IF;
    IF pg_column_size(p_payload) > p_max_bytes THEN
        RAISE EXCEPTION 'jobq: % is % bytes, over the queue''s cap of % bytes',
                p_arg, pg_column_size(p_payload), p_max_bytes
            USING ERRCODE = 'JQ003',
                  HINT = 'Store large data in a table and enqueue its key, or raise max_payload_bytes with jobq.configure_queue().';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_payload(jsonb, text, integer) IS 'Raises JQ002 for a payload that is not a JSON object, JQ003 when over the size cap.';

CREATE FUNCTION jobq._check_meta(p_meta jsonb, p_arg text, p_max_bytes integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ002/JQ003 unless p_meta (a job's meta) is NULL (none) or a JSON
    -- object within the size cap (the queue's max_payload_bytes, as a payload).
    IF p_meta IS NULL THEN
        RETURN;
    END IF;
    IF jsonb_typeof(p_meta) <> 'object' THEN
        RAISE EXCEPTION 'jobq: % must be a JSON object, got %', p_arg, jsonb_typeof(p_meta)
            USING ERRCODE = 'JQ002',
                  HINT = 'Pass tags as an object, e.g. ''{"tenant": "acme"}''::jsonb, or NULL for none.';
    END IF;
    IF pg_column_size(p_meta) > p_max_bytes THEN
        RAISE EXCEPTION 'jobq: % is % bytes, over the queue''s cap of % bytes',
                p_arg, pg_column_size(p_meta), p_max_bytes
            USING ERRCODE = 'JQ003',
                  HINT = 'Keep meta small (tags, trace context): store large data in a table, or raise max_payload_bytes with jobq.configure_queue().';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_meta(jsonb, text, integer) IS 'Raises JQ002 for a meta that is neither NULL nor a JSON object, JQ003 when over the size cap.';

CREATE FUNCTION jobq._check_time(p_value timestamptz, p_arg text) RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ006 unless p_value is a finite time within 10 years of now.
    IF p_value IS NULL OR NOT isfinite(p_value)
       OR p_value > now() + interval '10 years' OR p_value < now() - interval '10 years' THEN
        RAISE EXCEPTION 'jobq: % must be a finite time within 10 years of now, got %',
                p_arg, coalesce(p_value::text, 'NULL')
            USING ERRCODE = 'JQ006',
                  HINT = 'Omit it to run now, or pass e.g. now() + interval ''5 minutes''.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_time(timestamptz, text) IS 'Raises JQ006 for a NULL, infinite or absurdly distant time.';

CREATE FUNCTION jobq._check_job_options(p_priority integer, p_max_attempts integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ004/JQ005 for a priority or max_attempts out of range.
    IF p_priority IS NULL OR p_priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'jobq: priority must be between -32768 and 32767, got %',
                coalesce(p_priority::text, 'NULL')
            USING ERRCODE = 'JQ004',
                  HINT = 'Lower numbers run first; 0 is the default.';
    END IF;
    IF p_max_attempts IS NOT NULL AND p_max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'jobq: max_attempts must be between 1 and 1000, got %', p_max_attempts
            USING ERRCODE = 'JQ005',
                  HINT = 'Pass NULL to use the queue''s max_attempts setting.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_job_options(integer, integer) IS 'Raises JQ004 or JQ005 for a priority or max_attempts out of range.';

CREATE FUNCTION jobq._check_job_key(p_job_key text, p_arg text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ009 for an empty or too long job key (NULL means "no key").
    IF p_job_key IS NOT NULL AND char_length(p_job_key) NOT BETWEEN 1 AND 512 THEN
        RAISE EXCEPTION 'jobq: % must be NULL or 1 to 512 characters, got % characters',
                p_arg, char_length(p_job_key)
            USING ERRCODE = 'JQ009',
                  HINT = 'Use a short natural key such as ''invoice:42''; pass NULL for no uniqueness.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_job_key(text, text) IS 'Raises JQ009 for an empty or over-long job key.';

CREATE FUNCTION jobq._check_unique_for(p_unique_for interval, p_keyed boolean, p_key_arg text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ008 for a unique_for that is not a duration of 1 second to
    -- 366 days, JQ009 when it comes without a job key (p_keyed false).
    PERFORM jobq._check_interval(p_unique_for, 'unique_for', interval '1 second', interval '366 days');
    IF p_unique_for IS NOT NULL AND NOT p_keyed THEN
        RAISE EXCEPTION 'jobq: unique_for needs % (it deduplicates jobs by their key)', p_key_arg
            USING ERRCODE = 'JQ009',
                  HINT = 'Pass a job key too, e.g. job_key => ''report:daily'', unique_for => interval ''1 hour''.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_unique_for(interval, boolean, text) IS
    'Raises JQ008 for a unique_for out of range, JQ009 for a unique_for without a job key.';

CREATE FUNCTION jobq._check_on_duplicate(p_on_duplicate text, p_keyed boolean, p_key_arg text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ017 unless p_on_duplicate is 'keep', 'replace' or
    -- 'replace_payload', JQ009 when it is not 'keep' and comes without a job
    -- key (p_keyed false: p_key_arg names the missing argument).
    IF p_on_duplicate IS NULL OR p_on_duplicate NOT IN ('keep', 'replace', 'replace_payload') THEN
        RAISE EXCEPTION 'jobq: on_duplicate must be ''keep'', ''replace'' or ''replace_payload'', got %',
                coalesce(pg_catalog.quote_literal(pg_catalog.left(p_on_duplicate, 100)), 'NULL')
            USING ERRCODE = 'JQ017',
                  HINT = '''keep'' (the default) returns the job holding the key; ''replace'' gives it the new '
                         'payload, run_at and priority (debounce); ''replace_payload'' only the payload (throttle).';
    END IF;
    IF p_on_duplicate <> 'keep' AND NOT p_keyed THEN
        RAISE EXCEPTION 'jobq: on_duplicate % needs % (it replaces the job holding that key)',
                pg_catalog.quote_literal(p_on_duplicate), p_key_arg
            USING ERRCODE = 'JQ009',
                  HINT = 'Pass a job key too (job_keys, one per payload, for enqueue_many), e.g. '
                         'job_key => ''reindex:42'', on_duplicate => ''replace''.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_on_duplicate(text, boolean, text) IS
    'Raises JQ017 for an on_duplicate other than keep, replace or replace_payload, JQ009 for replace without a job key.';

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

CREATE FUNCTION jobq._fixed_length(p_value interval) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- Whether an interval is as long as it looks whenever it is added: no
    -- month or year part (a month is 28 to 31 days) and its days and time of
    -- one sign (a day is 23 to 25 hours across a DST change, so
    -- '1 day -23:59:59' can be negative). NULL counts as fixed.
    SELECT p_value IS NULL
        OR (date_part('year', p_value) = 0 AND date_part('month', p_value) = 0
            AND date_part('day', p_value) * (extract(epoch FROM p_value) - date_part('day', p_value) * 86400) >= 0)
$$;
COMMENT ON FUNCTION jobq._fixed_length(interval) IS
    'True when an interval has no month or year part and its days and time have one sign (a true duration).';

CREATE FUNCTION jobq._check_interval(p_value interval, p_arg text, p_min interval, p_max interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ008 unless p_value is a duration (see _fixed_length) with
    -- p_min <= p_value <= p_max (NULL is allowed: the caller defaults it).
    IF p_value IS NOT NULL AND p_value NOT BETWEEN p_min AND p_max THEN
        RAISE EXCEPTION 'jobq: % must be between % and %, got %', p_arg, p_min, p_max, p_value
            USING ERRCODE = 'JQ008',
                  HINT = 'Pass NULL to use the queue''s setting.';
    END IF;
    IF NOT jobq._fixed_length(p_value) THEN
        RAISE EXCEPTION 'jobq: % must be a duration without months or years, its days and time of one sign, got %',
                p_arg, p_value
            USING ERRCODE = 'JQ008',
                  HINT = 'Write it in seconds, minutes, hours or days, e.g. interval ''30 minutes''; '
                         'a month is not a fixed length.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_interval(interval, text, interval, interval) IS
    'Raises JQ008 for an interval argument out of range, or not a fixed length (months, mixed signs).';

CREATE FUNCTION jobq._check_lease_args(p_id bigint, p_lease_token uuid) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ010 when the job id or its lease token is NULL.
    IF p_id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL'
            USING ERRCODE = 'JQ010', HINT = 'Pass the id of a job returned by jobq.claim().';
    END IF;
    IF p_lease_token IS NULL THEN
        RAISE EXCEPTION 'jobq: lease_token must not be NULL'
            USING ERRCODE = 'JQ010',
                  HINT = 'Pass the lease_token from the row jobq.claim() returned; it fences the lease. Operators use jobq.cancel() or jobq.retry().';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_lease_args(bigint, uuid) IS 'Raises JQ010 for a NULL id or lease token.';

CREATE FUNCTION jobq._check_error(p_error text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ017 for a NULL error text: a failure records why.
    IF p_error IS NULL THEN
        RAISE EXCEPTION 'jobq: error must not be NULL'
            USING ERRCODE = 'JQ017',
                  HINT = 'Pass why the attempt failed, e.g. the exception and its traceback (an empty string is allowed).';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_error(text) IS 'Raises JQ017 for a NULL error text.';

CREATE FUNCTION jobq._check_worker(p_worker text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ011 for a worker name longer than 200 characters (NULL is allowed).
    IF char_length(p_worker) > 200 THEN
        RAISE EXCEPTION 'jobq: worker must be at most 200 characters, got %', char_length(p_worker)
            USING ERRCODE = 'JQ011', HINT = 'Use something like ''host:pid'' or NULL.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_worker(text) IS 'Raises JQ011 for an over-long worker name.';

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

CREATE FUNCTION jobq._check_dependencies(p_ids bigint[], p_arg text, p_on_parent_failure text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_bad record;
BEGIN
    -- Raise JQ018 unless p_ids (depends_on, members) is a list (one
    -- dimension, any lower bound: an element is named by its own subscript,
    -- lower bound + ordinality - 1) of at most 100,000 distinct job ids
    -- without NULL, and JQ017 unless
    -- p_on_parent_failure is 'cancel' or 'run'. Whether the ids are known is
    -- jobq._check_parents_issued's question.
    IF p_on_parent_failure IS NULL OR p_on_parent_failure NOT IN ('cancel', 'run') THEN
        RAISE EXCEPTION 'jobq: on_parent_failure must be ''cancel'' or ''run'', got %',
                coalesce(pg_catalog.quote_literal(pg_catalog.left(p_on_parent_failure, 100)), 'NULL')
            USING ERRCODE = 'JQ017',
                  HINT = '''cancel'' (the default) cancels the job when a parent is dead or cancelled; '
                         '''run'' runs it once every parent has finished, however.';
    END IF;
    IF p_ids IS NULL THEN
        RAISE EXCEPTION 'jobq: % must be an array of job ids, got NULL', p_arg
            USING ERRCODE = 'JQ018', HINT = 'Pass e.g. ARRAY[41, 42]::bigint[].';
    END IF;
    IF array_ndims(p_ids) > 1 THEN
        RAISE EXCEPTION 'jobq: % must be a one-dimensional array, got % dimensions %',
                p_arg, array_ndims(p_ids), array_dims(p_ids)
            USING ERRCODE = 'JQ018',
                  HINT = 'Pass a list of job ids, e.g. ARRAY[41, 42]::bigint[]; ARRAY(SELECT unnest(a)) flattens a '
                         'nested array a.';
    END IF;
    IF cardinality(p_ids) > 100000 THEN
        RAISE EXCEPTION 'jobq: % has % ids, over the cap of 100000', p_arg, cardinality(p_ids)
            USING ERRCODE = 'JQ018',
                  HINT = 'Make a tree: callbacks of up to 100000 jobs each, and one callback depending on those.';
    END IF;
    SELECT u.id, u.ord INTO v_bad
    FROM unnest(p_ids) WITH ORDINALITY AS u(id, ord)
    WHERE u.id IS NULL
    ORDER BY u.ord LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'jobq: %[%] is NULL', p_arg, array_lower(p_ids, 1) + v_bad.ord - 1
            USING ERRCODE = 'JQ018', HINT = 'Pass the id of every job this one depends on, without NULL.';
    END IF;
    SELECT u.id, count(*) AS n INTO v_bad
    FROM unnest(p_ids) AS u(id)
    GROUP BY u.id HAVING count(*) > 1
    ORDER BY u.id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'jobq: % names job % % times', p_arg, v_bad.id, v_bad.n
            USING ERRCODE = 'JQ018', HINT = 'Name each job once, e.g. ARRAY(SELECT DISTINCT unnest(ids)).';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_dependencies(bigint[], text, text) IS
    'Raises JQ018 for a NULL, oversized, NULL-holding or repeating list of parent ids, JQ017 for a bad on_parent_failure.';

CREATE FUNCTION jobq._check_results(p_ids bigint[], p_results jsonb[]) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_bad record;
BEGIN
    -- Raise JQ010 unless p_results is a list that pairs with p_ids, and
    -- JQ003 for a result over its job's queue's max_payload_bytes (jobs not
    -- live are left to the completion, which ignores them).
    IF array_ndims(p_results) > 1 THEN
        RAISE EXCEPTION 'jobq: results must be a one-dimensional array, got % dimensions %',
                array_ndims(p_results), array_dims(p_results)
            USING ERRCODE = 'JQ010', HINT = 'Pass one result (or NULL) per job id, in a one-dimensional array.';
    END IF;
    IF cardinality(p_results) <> cardinality(p_ids) THEN
        RAISE EXCEPTION 'jobq: results has % elements but ids has %', cardinality(p_results), cardinality(p_ids)
            USING ERRCODE = 'JQ010', HINT = 'Pass one result (or NULL) per job id, in the same order.';
    END IF;
    IF cardinality(array_remove(p_results, NULL)) = 0 THEN
        RETURN;
    END IF;
    SELECT r.id, r.ord, pg_column_size(r.result) AS size, (jobq._settings(j.queue)).max_payload_bytes AS cap
    INTO v_bad
    FROM unnest(p_ids, p_results) WITH ORDINALITY AS r(id, result, ord)
    JOIN jobq._job AS j ON j.id = r.id
    WHERE r.result IS NOT NULL AND pg_column_size(r.result) > (jobq._settings(j.queue)).max_payload_bytes
    ORDER BY r.ord LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'jobq: the result of job % is % bytes, over the queue''s cap of % bytes', v_bad.id, v_bad.size, v_bad.cap
            USING ERRCODE = 'JQ003',
                  HINT = 'Store large results in a table and return its key, or raise max_payload_bytes with jobq.configure_queue().';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_results(bigint[], jsonb[]) IS
    'Raises JQ010 when results does not pair with ids, JQ003 for a result over its queue''s payload cap.';

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

CREATE FUNCTION jobq._insert_job(
    p_queue text, p_payload jsonb, p_run_at timestamptz, p_priority integer, p_max_attempts integer,
    p_job_key text, p_group_key text, p_timeout interval, p_unique_for interval, p_waiting boolean DEFAULT false,
    p_meta jsonb DEFAULT NULL,
    p_fair_key text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id bigint;
BEGIN
    -- Insert one validated job and wake the queue's workers; with a job_key
    -- already held by an active job, return that job's id instead, and with
    -- p_unique_for also the id of the job of that key completed within
    -- p_unique_for. Loops when the holder finishes between the INSERT and
    -- the lookup. p_waiting: the job waits for parents (jobq._attach links
    -- it): status waiting, parked, and no wake-up yet. p_meta: its meta.
    -- p_fair_key: the job's fair key; none in a fair queue is '' (the
    -- keyless jobs' turn).
    IF p_unique_for IS NOT NULL THEN
        SELECT j.id INTO v_id FROM jobq._job AS j WHERE j.queue = p_queue AND j.job_key = p_job_key;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
        SELECT k.job_id INTO v_id FROM jobq._key_done AS k
        WHERE k.queue = p_queue AND k.job_key = p_job_key AND k.finished_at > clock_timestamp() - p_unique_for;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END IF;
    FOR i IN 1..10 LOOP
        IF p_waiting THEN
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, job_key, group_key, timeout,
                                   status, parked, has_parents, meta, fair_key)
            VALUES (p_queue, p_payload, p_run_at, p_priority, p_max_attempts, p_job_key, p_group_key, p_timeout,
                    'waiting', true, true, p_meta,
                    coalesce(p_fair_key, (SELECT '' FROM jobq._queue AS q WHERE q.queue = p_queue AND q.fair)))
            ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
            RETURNING id INTO v_id;
        ELSE
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, job_key, group_key, timeout,
                                   meta, fair_key)
            VALUES (p_queue, p_payload, p_run_at, p_priority, p_max_attempts, p_job_key, p_group_key, p_timeout,
                    p_meta, coalesce(p_fair_key, (SELECT '' FROM jobq._queue AS q WHERE q.queue = p_queue AND q.fair)))
            ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
            RETURNING id INTO v_id;
        END IF;
        IF v_id IS NOT NULL THEN
            IF NOT p_waiting THEN
                PERFORM pg_notify('jobq', p_queue);
            END IF;
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
COMMENT ON FUNCTION jobq._insert_job(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, boolean, jsonb, text) IS
    'Inserts one validated job (ready, and NOTIFYs; or waiting for parents), or returns the id of the active (or, with unique_for, recently completed) job holding its job_key.';

CREATE FUNCTION jobq._replace_job(
    p_queue text, p_payload jsonb, p_run_at timestamptz, p_priority integer, p_max_attempts integer,
    p_job_key text, p_group_key text, p_timeout interval, p_unique_for interval, p_waiting boolean,
    p_payload_only boolean, p_meta jsonb, p_fair_key text
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id bigint;
    v_status text;
BEGIN
    -- Enqueue with on_duplicate 'replace' (p_payload_only false) or
    -- 'replace_payload' (true) and a validated job_key: the waiting, ready
    -- or scheduled job holding the key takes the new payload and meta (p_meta,
    -- which goes with the payload: the trace context of the last enqueue;
    -- it keeps its fair key, p_fair_key being a new job's)
    -- (and, with 'replace', run_at and priority; its id, attempts, max_attempts,
    -- group_key, timeout and parents stay); else a new job is inserted as
    -- jobq._insert_job does. A running holder is never changed but for one
    -- thing: it hands the key over (its job_key becomes NULL), so that the
    -- new job can hold it. With p_unique_for and no live holder, a job of
    -- the key completed within p_unique_for is returned and nothing changes.
    -- The INSERT ... ON CONFLICT locks the holder, so a claim racing with it
    -- either leases the job first (then the key moves to a new job) or sees
    -- the replaced row (it skips the locked one until this commits).
    IF p_unique_for IS NOT NULL
       AND NOT EXISTS (SELECT FROM jobq._job AS j WHERE j.queue = p_queue AND j.job_key = p_job_key) THEN
        SELECT k.job_id INTO v_id FROM jobq._key_done AS k
        WHERE k.queue = p_queue AND k.job_key = p_job_key AND k.finished_at > clock_timestamp() - p_unique_for;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END IF;
    FOR i IN 1..10 LOOP
        INSERT INTO jobq._job AS j (queue, payload, run_at, priority, max_attempts, job_key, group_key, timeout,
                                    status, parked, has_parents, meta, fair_key)
        VALUES (p_queue, p_payload, p_run_at, p_priority, p_max_attempts, p_job_key, p_group_key, p_timeout,
                CASE WHEN p_waiting THEN 'waiting' ELSE 'ready' END, p_waiting, p_waiting, p_meta,
                coalesce(p_fair_key, (SELECT '' FROM jobq._queue AS q WHERE q.queue = p_queue AND q.fair)))
        ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO UPDATE
            SET payload = excluded.payload,
                meta = excluded.meta,
                run_at = CASE WHEN p_payload_only THEN j.run_at ELSE excluded.run_at END,
                priority = CASE WHEN p_payload_only THEN j.priority ELSE excluded.priority END
            WHERE j.status <> 'running'
        RETURNING j.id, j.status INTO v_id, v_status;
        IF v_id IS NOT NULL THEN
            IF v_status = 'ready' THEN
                PERFORM pg_notify('jobq', p_queue);
            END IF;
            RETURN v_id;
        END IF;
        -- The holder is running: it lets go of the key, and the next turn inserts.
        UPDATE jobq._job AS j SET job_key = NULL
        WHERE j.queue = p_queue AND j.job_key = p_job_key AND j.status = 'running';
    END LOOP;
    RAISE EXCEPTION 'jobq: job_key % kept changing hands while enqueueing', pg_catalog.quote_literal(p_job_key)
        USING ERRCODE = '40001', HINT = 'Retry the transaction.';
END
$$;
COMMENT ON FUNCTION jobq._replace_job(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, boolean, boolean, jsonb, text) IS
    'Enqueue with on_duplicate replace/replace_payload: updates the waiting, ready or scheduled job holding the key, else inserts (a running holder hands the key over).';

CREATE FUNCTION jobq._check_enqueue_many_args(
    p_queue text, p_payloads jsonb[], p_run_at timestamptz, p_priority integer, p_max_attempts integer,
    p_job_keys text[], p_group_key text, p_timeout interval, p_unique_for interval, p_depends_on bigint[],
    p_on_parent_failure text
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise the JQ error of the first bad argument of jobq.enqueue_many, all
    -- but the payloads' elements and the job keys (checked where they are
    -- used): the checks that name the bad argument, which enqueue_many runs
    -- only when its fast check (jobq._enqueue_args_ok and the rest of its
    -- one expression) says no.
    PERFORM jobq._check_queue(p_queue, 'queue');
    IF p_payloads IS NULL THEN
        RAISE EXCEPTION 'jobq: payloads must not be NULL'
            USING ERRCODE = 'JQ002', HINT = 'Pass an array of JSON objects, e.g. ARRAY[''{"a":1}'']::jsonb[].';
    END IF;
    IF array_ndims(p_payloads) > 1 THEN
        RAISE EXCEPTION 'jobq: payloads must be a one-dimensional array, got % dimensions %',
                array_ndims(p_payloads), array_dims(p_payloads)
            USING ERRCODE = 'JQ002',
                  HINT = 'Pass a list of JSON objects, e.g. ARRAY[''{"a":1}'', ''{"a":2}'']::jsonb[].';
    END IF;
    PERFORM jobq._check_batch(cardinality(p_payloads), 'cardinality(payloads)', 100000);
    PERFORM jobq._check_time(p_run_at, 'run_at');
    PERFORM jobq._check_job_options(p_priority, p_max_attempts);
    PERFORM jobq._check_job_key(p_group_key, 'group_key');
    PERFORM jobq._check_interval(p_timeout, 'timeout', interval '1 second', interval '1 day');
    PERFORM jobq._check_unique_for(p_unique_for, p_job_keys IS NOT NULL, 'job_keys');
    PERFORM jobq._check_dependencies(coalesce(p_depends_on, '{}'), 'depends_on', p_on_parent_failure);
END
$$;
COMMENT ON FUNCTION jobq._check_enqueue_many_args(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text) IS
    'Raises the JQ error of the first bad argument of enqueue_many (but payload elements and job keys).';

CREATE FUNCTION jobq._check_job_keys(p_job_keys text[], p_n integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_item record;
BEGIN
    -- Raise JQ009 unless p_job_keys is a list of p_n keys (or NULLs), each
    -- NULL or 1 to 512 characters; a bad key is named by its own subscript
    -- (arrays may start at another index than 1, e.g. '[0:1]={...}').
    IF array_ndims(p_job_keys) > 1 THEN
        RAISE EXCEPTION 'jobq: job_keys must be a one-dimensional array, got % dimensions %',
                array_ndims(p_job_keys), array_dims(p_job_keys)
            USING ERRCODE = 'JQ009', HINT = 'Pass a list of keys (or NULLs), one per payload.';
    END IF;
    IF cardinality(p_job_keys) <> p_n THEN
        RAISE EXCEPTION 'jobq: job_keys has % elements but payloads has %', cardinality(p_job_keys), p_n
            USING ERRCODE = 'JQ009', HINT = 'Pass one key (or NULL) per payload, or job_keys => NULL.';
    END IF;
    FOR v_item IN SELECT x.job_key, x.ord FROM unnest(p_job_keys) WITH ORDINALITY AS x(job_key, ord) LOOP
        PERFORM jobq._check_job_key(v_item.job_key, format('job_keys[%s]', array_lower(p_job_keys, 1) + v_item.ord - 1));
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq._check_job_keys(text[], integer) IS
    'Raises JQ009 for job_keys that are not one key (or NULL) per payload, each NULL or 1 to 512 characters.';

CREATE FUNCTION jobq._check_metas(p_metas jsonb[], p_n integer, p_max_bytes integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_bad record;
BEGIN
    -- Raise JQ002/JQ003 unless p_metas (enqueue_many's metas, not NULL) is a
    -- list of p_n JSON objects, each within p_max_bytes; a bad one is named
    -- by its own subscript (arrays may start at another index than 1).
    IF array_ndims(p_metas) > 1 THEN
        RAISE EXCEPTION 'jobq: metas must be a one-dimensional array, got % dimensions %',
                array_ndims(p_metas), array_dims(p_metas)
            USING ERRCODE = 'JQ002', HINT = 'Pass a list of JSON objects, one per payload, or metas => NULL.';
    END IF;
    IF cardinality(p_metas) <> p_n THEN
        RAISE EXCEPTION 'jobq: metas has % elements but payloads has %', cardinality(p_metas), p_n
            USING ERRCODE = 'JQ002', HINT = 'Pass one JSON object (''{}'' for none) per payload, or metas => NULL.';
    END IF;
    SELECT m.meta, m.ord INTO v_bad
    FROM unnest(p_metas) WITH ORDINALITY AS m(meta, ord)
    WHERE m.meta IS NULL OR jsonb_typeof(m.meta) <> 'object' OR pg_column_size(m.meta) > p_max_bytes
    ORDER BY m.ord LIMIT 1;
    IF FOUND THEN
        IF v_bad.meta IS NULL THEN
            RAISE EXCEPTION 'jobq: metas[%] must be a JSON object, got NULL', array_lower(p_metas, 1) + v_bad.ord - 1
                USING ERRCODE = 'JQ002', HINT = 'Pass ''{}'' for a job without meta, or metas => NULL for none.';
        END IF;
        PERFORM jobq._check_meta(v_bad.meta, format('metas[%s]', array_lower(p_metas, 1) + v_bad.ord - 1), p_max_bytes);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_metas(jsonb[], integer, integer) IS
    'Raises JQ002 for metas that are not one JSON object per payload, JQ003 for one over the size cap.';

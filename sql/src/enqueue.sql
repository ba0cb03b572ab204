---------------------------------------------------------------------------
-- 5. producer API
---------------------------------------------------------------------------

CREATE FUNCTION jobq.enqueue(
    queue text,
    payload jsonb,
    run_at timestamptz DEFAULT pg_catalog.now(),
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL,
    job_key text DEFAULT NULL,
    group_key text DEFAULT NULL,
    timeout interval DEFAULT NULL,
    unique_for interval DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
BEGIN
    -- Add one job in the caller's transaction; return its id (or the id of
    -- the active job that already holds job_key; with unique_for, also of
    -- the job of that key completed within unique_for). Jobs sharing a
    -- group_key run one at a time, in enqueue order. timeout (else the
    -- queue's timeout setting, fixed now) is how long a worker lets its
    -- handler run.
    v_settings := jobq._settings(enqueue.queue);
    IF NOT (jobq._enqueue_args_ok(enqueue.queue, enqueue.run_at, enqueue.priority, enqueue.max_attempts,
                                  enqueue.job_key, enqueue.group_key)
            AND coalesce(jsonb_typeof(enqueue.payload) = 'object'
                         AND pg_column_size(enqueue.payload) <= v_settings.max_payload_bytes, false)
            AND enqueue.timeout IS NULL AND enqueue.unique_for IS NULL) THEN
        PERFORM jobq._check_queue(enqueue.queue, 'queue');
        PERFORM jobq._check_payload(enqueue.payload, 'payload', v_settings.max_payload_bytes);
        PERFORM jobq._check_time(enqueue.run_at, 'run_at');
        PERFORM jobq._check_job_options(enqueue.priority, enqueue.max_attempts);
        PERFORM jobq._check_job_key(enqueue.job_key, 'job_key');
        PERFORM jobq._check_job_key(enqueue.group_key, 'group_key');
        PERFORM jobq._check_interval(enqueue.timeout, 'timeout', interval '1 second', interval '1 day');
        PERFORM jobq._check_unique_for(enqueue.unique_for, enqueue.job_key IS NOT NULL, 'job_key');
    END IF;
    RETURN jobq._insert_job(enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
                            coalesce(enqueue.max_attempts, v_settings.max_attempts), enqueue.job_key,
                            enqueue.group_key, coalesce(enqueue.timeout, v_settings.timeout), enqueue.unique_for);
END
$$;
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval) IS
    'Adds one job (inside the caller''s transaction) and returns its id; a job_key held by an active job (or, with unique_for, completed within it) returns that job''s id instead.';

CREATE FUNCTION jobq.enqueue_many(
    queue text,
    payloads jsonb[],
    run_at timestamptz DEFAULT pg_catalog.now(),
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL,
    job_keys text[] DEFAULT NULL,
    group_key text DEFAULT NULL,
    timeout interval DEFAULT NULL,
    unique_for interval DEFAULT NULL
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
    -- group_key, they join that serial group in payload order. timeout and
    -- unique_for apply to every job, as in jobq.enqueue (unique_for to
    -- those with a key).
    IF NOT (jobq._enqueue_args_ok(enqueue_many.queue, enqueue_many.run_at, enqueue_many.priority,
                                  enqueue_many.max_attempts, NULL, enqueue_many.group_key)
            AND v_n BETWEEN 0 AND 100000
            AND enqueue_many.timeout IS NULL AND enqueue_many.unique_for IS NULL) THEN
        PERFORM jobq._check_queue(enqueue_many.queue, 'queue');
        IF enqueue_many.payloads IS NULL THEN
            RAISE EXCEPTION 'jobq: payloads must not be NULL'
                USING ERRCODE = 'JQ002', HINT = 'Pass an array of JSON objects, e.g. ARRAY[''{"a":1}'']::jsonb[].';
        END IF;
        PERFORM jobq._check_batch(v_n, 'cardinality(payloads)', 100000);
        PERFORM jobq._check_time(enqueue_many.run_at, 'run_at');
        PERFORM jobq._check_job_options(enqueue_many.priority, enqueue_many.max_attempts);
        PERFORM jobq._check_job_key(enqueue_many.group_key, 'group_key');
        PERFORM jobq._check_interval(enqueue_many.timeout, 'timeout', interval '1 second', interval '1 day');
        PERFORM jobq._check_unique_for(enqueue_many.unique_for, enqueue_many.job_keys IS NOT NULL, 'job_keys');
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
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, group_key, timeout)
            SELECT enqueue_many.queue, p.payload, enqueue_many.run_at, enqueue_many.priority,
                   coalesce(enqueue_many.max_attempts, v_settings.max_attempts), enqueue_many.group_key,
                   coalesce(enqueue_many.timeout, v_settings.timeout)
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
                                            v_item.job_key, enqueue_many.group_key,
                                            coalesce(enqueue_many.timeout, v_settings.timeout),
                                            enqueue_many.unique_for);
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval) IS
    'Adds one job per payload in one call; returns their ids in payload order (existing ids for job_keys already held).';

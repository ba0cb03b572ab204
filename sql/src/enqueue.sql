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
    unique_for interval DEFAULT NULL,
    depends_on bigint[] DEFAULT NULL,
    on_parent_failure text DEFAULT 'cancel',
    meta jsonb DEFAULT NULL,
    fair_key text DEFAULT NULL,
    on_duplicate text DEFAULT 'keep'
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
    v_id bigint;
BEGIN
    -- Add one job in the caller's transaction; return its id (or the id of
    -- the active job that already holds job_key; with unique_for, also of
    -- the job of that key completed within unique_for). Jobs sharing a
    -- group_key run one at a time, in enqueue order. timeout (else the
    -- queue's timeout setting, fixed now) is how long a worker lets its
    -- handler run. depends_on: the job waits until those jobs completed;
    -- when one is dead or cancelled, on_parent_failure 'cancel' cancels it
    -- (and its own dependents), 'run' runs it once all have finished.
    -- meta: a JSON object kept beside the payload (tags, trace context),
    -- capped like it. fair_key: the key (tenant) a fair queue serves
    -- round-robin.
    -- on_duplicate (with job_key): 'keep' returns the holder of the key as
    -- said; 'replace' gives a waiting, ready or scheduled holder the new
    -- payload, meta, run_at and priority (debounce), 'replace_payload' only the
    -- payload and meta (throttle); a running holder is left as it is and hands the
    -- key to a new job (jobq._replace_job). A replaced job keeps its fair key.
    IF enqueue.job_key IS NULL AND enqueue.group_key IS NULL AND enqueue.timeout IS NULL
       AND enqueue.unique_for IS NULL AND enqueue.depends_on IS NULL
       AND enqueue.on_parent_failure IS NOT DISTINCT FROM 'cancel'
       AND enqueue.on_duplicate IS NOT DISTINCT FROM 'keep'
       AND jsonb_typeof(enqueue.payload) IS NOT DISTINCT FROM 'object'
       AND (enqueue.meta IS NULL OR jsonb_typeof(enqueue.meta) = 'object')
       AND jobq._enqueue_args_ok(enqueue.queue, enqueue.run_at, enqueue.priority, enqueue.max_attempts,
                                 NULL, NULL)
       AND (enqueue.fair_key IS NULL OR char_length(enqueue.fair_key) BETWEEN 1 AND 512) THEN
        -- The common case (no key, group, timeout or parents) in one
        -- statement: the queue's settings read in it, and no row when the
        -- payload (or meta) is over the queue's max_payload_bytes or some per-queue
        -- produce grant matches the queue; then the general path below
        -- raises the error, or checks the privilege and inserts. No key:
        -- nothing to conflict with. (Each helper call saved is a function
        -- call with pinned settings; a single-job enqueue pays them all.)
        INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, timeout, meta, fair_key)
        SELECT enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
               coalesce(enqueue.max_attempts, q.max_attempts, d.max_attempts), q.timeout, enqueue.meta,
               coalesce(enqueue.fair_key, CASE WHEN q.fair THEN '' END)
        FROM jobq._queue_defaults AS d
        LEFT JOIN jobq._queue AS q ON q.queue = enqueue.queue
        WHERE pg_column_size(enqueue.payload) <= coalesce(q.max_payload_bytes, d.max_payload_bytes)
          AND coalesce(pg_column_size(enqueue.meta), 0) <= coalesce(q.max_payload_bytes, d.max_payload_bytes)
          AND NOT EXISTS (SELECT FROM jobq._queue_grant AS g
                          WHERE g.privilege = 'produce' AND enqueue.queue LIKE g.queue_like)
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            PERFORM pg_notify('jobq', enqueue.queue);
            RETURN v_id;
        END IF;
    END IF;
    v_settings := jobq._settings(enqueue.queue);
    IF NOT (jobq._enqueue_args_ok(enqueue.queue, enqueue.run_at, enqueue.priority, enqueue.max_attempts,
                                  enqueue.job_key, enqueue.group_key)
            AND coalesce(jsonb_typeof(enqueue.payload) = 'object'
                         AND pg_column_size(enqueue.payload) <= v_settings.max_payload_bytes, false)
            AND (enqueue.meta IS NULL
                 OR coalesce(jsonb_typeof(enqueue.meta) = 'object'
                             AND pg_column_size(enqueue.meta) <= v_settings.max_payload_bytes, false))
            AND enqueue.timeout IS NULL AND enqueue.unique_for IS NULL
            AND enqueue.depends_on IS NULL AND enqueue.on_parent_failure IS NOT DISTINCT FROM 'cancel'
            AND (enqueue.fair_key IS NULL OR char_length(enqueue.fair_key) BETWEEN 1 AND 512)
            AND NOT (v_settings.fair AND enqueue.group_key IS NOT NULL)
            AND coalesce(enqueue.on_duplicate = 'keep'
                         OR (enqueue.on_duplicate IN ('replace', 'replace_payload') AND enqueue.job_key IS NOT NULL),
                         false)) THEN
        PERFORM jobq._check_queue(enqueue.queue, 'queue');
        PERFORM jobq._check_payload(enqueue.payload, 'payload', v_settings.max_payload_bytes);
        PERFORM jobq._check_meta(enqueue.meta, 'meta', v_settings.max_payload_bytes);
        PERFORM jobq._check_time(enqueue.run_at, 'run_at');
        PERFORM jobq._check_job_options(enqueue.priority, enqueue.max_attempts);
        PERFORM jobq._check_job_key(enqueue.job_key, 'job_key');
        PERFORM jobq._check_job_key(enqueue.group_key, 'group_key');
        PERFORM jobq._check_interval(enqueue.timeout, 'timeout', interval '1 second', interval '1 day');
        PERFORM jobq._check_unique_for(enqueue.unique_for, enqueue.job_key IS NOT NULL, 'job_key');
        PERFORM jobq._check_dependencies(coalesce(enqueue.depends_on, '{}'), 'depends_on', enqueue.on_parent_failure);
        PERFORM jobq._check_fair_key(enqueue.fair_key, 'fair_key');
        PERFORM jobq._check_fair_grouping(v_settings.fair, enqueue.group_key);
        PERFORM jobq._check_on_duplicate(enqueue.on_duplicate, enqueue.job_key IS NOT NULL, 'job_key');
    END IF;
    PERFORM jobq._check_queue_privilege(ARRAY[enqueue.queue], 'produce')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'produce' AND enqueue.queue LIKE g.queue_like);
    IF enqueue.on_duplicate <> 'keep' THEN
        -- Replace (a keyed job): the holder of the key changes unless it
        -- runs; depends_on applies only to a job inserted here (the
        -- parents of a replaced one stay, as with 'keep').
        IF coalesce(cardinality(enqueue.depends_on), 0) > 0 THEN
            PERFORM jobq._check_readable_jobs(enqueue.depends_on, 'depends_on');
            PERFORM jobq._check_parents_issued(enqueue.depends_on, 'depends_on');
        END IF;
        v_id := jobq._replace_job(enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
                                  coalesce(enqueue.max_attempts, v_settings.max_attempts), enqueue.job_key,
                                  enqueue.group_key, coalesce(enqueue.timeout, v_settings.timeout),
                                  enqueue.unique_for, coalesce(cardinality(enqueue.depends_on), 0) > 0,
                                  enqueue.on_duplicate = 'replace_payload', enqueue.meta, enqueue.fair_key);
        IF coalesce(cardinality(enqueue.depends_on), 0) > 0 THEN
            PERFORM jobq._attach(ARRAY[v_id], enqueue.depends_on, enqueue.on_parent_failure, false);
        END IF;
        RETURN v_id;
    END IF;
    IF coalesce(cardinality(enqueue.depends_on), 0) = 0 THEN
        RETURN jobq._insert_job(enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
                                coalesce(enqueue.max_attempts, v_settings.max_attempts), enqueue.job_key,
                                enqueue.group_key, coalesce(enqueue.timeout, v_settings.timeout), enqueue.unique_for,
                                false, enqueue.meta, enqueue.fair_key);
    END IF;
    PERFORM jobq._check_readable_jobs(enqueue.depends_on, 'depends_on');
    PERFORM jobq._check_parents_issued(enqueue.depends_on, 'depends_on');
    v_id := jobq._insert_job(enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
                             coalesce(enqueue.max_attempts, v_settings.max_attempts), enqueue.job_key,
                             enqueue.group_key, coalesce(enqueue.timeout, v_settings.timeout), enqueue.unique_for,
                             true, enqueue.meta, enqueue.fair_key);
    PERFORM jobq._attach(ARRAY[v_id], enqueue.depends_on, enqueue.on_parent_failure, false);
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text, jsonb, text, text) IS
    'Adds one job (inside the caller''s transaction) and returns its id; a job_key held by an active job (or, with unique_for, completed within it) returns that job''s id instead, on_duplicate replace/replace_payload updating it unless it runs; depends_on makes it wait for those jobs; meta is a JSON object kept beside the payload; fair_key the key a fair queue serves round-robin.';

CREATE FUNCTION jobq.enqueue_many(
    queue text,
    payloads jsonb[],
    run_at timestamptz DEFAULT pg_catalog.now(),
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL,
    job_keys text[] DEFAULT NULL,
    group_key text DEFAULT NULL,
    timeout interval DEFAULT NULL,
    unique_for interval DEFAULT NULL,
    depends_on bigint[] DEFAULT NULL,
    on_parent_failure text DEFAULT 'cancel',
    metas jsonb[] DEFAULT NULL,
    fair_keys text[] DEFAULT NULL,
    on_duplicate text DEFAULT 'keep'
) RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
    v_bad record;
    v_item record;
    v_n integer := coalesce(cardinality(enqueue_many.payloads), -1);
    v_ids bigint[] := '{}';
    v_waiting boolean := coalesce(cardinality(enqueue_many.depends_on), 0) > 0;
BEGIN
    -- Add many jobs to one queue in one statement; returns one id per
    -- payload, in payload order, and wakes the queue's workers once. With
    -- group_key, they join that serial group in payload order. timeout,
    -- unique_for, depends_on and on_parent_failure apply to every job, as in
    -- jobq.enqueue (unique_for to those with a key): with depends_on, every
    -- job waits for the same parents. metas: NULL, or one JSON object per
    -- payload, each job's meta (as jobq.enqueue's). fair_keys: one fair key
    -- (or NULL) per payload. on_duplicate applies to every job with a key,
    -- as in jobq.enqueue; a key repeated in one call: the last wins.
    IF NOT (jobq._enqueue_args_ok(enqueue_many.queue, enqueue_many.run_at, enqueue_many.priority,
                                  enqueue_many.max_attempts, NULL, enqueue_many.group_key)
            AND v_n BETWEEN 0 AND 100000 AND coalesce(array_ndims(enqueue_many.payloads), 1) = 1
            AND enqueue_many.timeout IS NULL AND enqueue_many.unique_for IS NULL
            AND enqueue_many.depends_on IS NULL AND enqueue_many.on_parent_failure IS NOT DISTINCT FROM 'cancel') THEN
        PERFORM jobq._check_enqueue_many_args(
            p_queue => enqueue_many.queue, p_payloads => enqueue_many.payloads, p_run_at => enqueue_many.run_at,
            p_priority => enqueue_many.priority, p_max_attempts => enqueue_many.max_attempts,
            p_job_keys => enqueue_many.job_keys, p_group_key => enqueue_many.group_key,
            p_timeout => enqueue_many.timeout, p_unique_for => enqueue_many.unique_for,
            p_depends_on => enqueue_many.depends_on, p_on_parent_failure => enqueue_many.on_parent_failure);
    END IF;
    IF enqueue_many.on_duplicate IS DISTINCT FROM 'keep' THEN
        PERFORM jobq._check_on_duplicate(enqueue_many.on_duplicate, enqueue_many.job_keys IS NOT NULL, 'job_keys');
    END IF;
    v_settings := jobq._settings(enqueue_many.queue);
    IF enqueue_many.fair_keys IS NOT NULL THEN
        PERFORM jobq._check_fair_keys(p_fair_keys => enqueue_many.fair_keys, p_n => v_n);
    END IF;
    IF v_settings.fair AND enqueue_many.group_key IS NOT NULL THEN
        PERFORM jobq._check_fair_grouping(v_settings.fair, enqueue_many.group_key);
    END IF;
    PERFORM jobq._check_queue_privilege(ARRAY[enqueue_many.queue], 'produce')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'produce' AND enqueue_many.queue LIKE g.queue_like);

    SELECT p.payload, p.ord INTO v_bad
    FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, ord)
    WHERE p.payload IS NULL OR jsonb_typeof(p.payload) <> 'object'
       OR pg_column_size(p.payload) > v_settings.max_payload_bytes
    ORDER BY p.ord LIMIT 1;
    IF FOUND THEN
        PERFORM jobq._check_payload(v_bad.payload,  -- named by its own subscript
                                    format('payloads[%s]', array_lower(enqueue_many.payloads, 1) + v_bad.ord - 1),
                                    v_settings.max_payload_bytes);
    END IF;
    IF enqueue_many.metas IS NOT NULL THEN
        PERFORM jobq._check_metas(enqueue_many.metas, v_n, v_settings.max_payload_bytes);
    END IF;

    IF v_waiting THEN
        PERFORM jobq._check_readable_jobs(enqueue_many.depends_on, 'depends_on');
        PERFORM jobq._check_parents_issued(enqueue_many.depends_on, 'depends_on');
    END IF;
    IF enqueue_many.job_keys IS NULL AND NOT v_waiting THEN
        -- No keys: one INSERT. Identity values follow the ORDER BY, so
        -- sorting the returned ids gives payload order.
        RETURN QUERY
        WITH ins AS (
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, group_key, timeout, meta, fair_key)
            SELECT enqueue_many.queue, p.payload, enqueue_many.run_at, enqueue_many.priority,
                   coalesce(enqueue_many.max_attempts, v_settings.max_attempts), enqueue_many.group_key,
                   coalesce(enqueue_many.timeout, v_settings.timeout), p.meta,
                   coalesce(enqueue_many.fair_keys[array_lower(enqueue_many.fair_keys, 1) + p.ord - 1],
                            (SELECT '' FROM jobq._queue AS q WHERE q.queue = enqueue_many.queue AND q.fair))
            FROM unnest(enqueue_many.payloads, enqueue_many.metas) WITH ORDINALITY AS p(payload, meta, ord)
            ORDER BY p.ord
            RETURNING id
        )
        SELECT ins.id FROM ins ORDER BY ins.id;
        PERFORM pg_notify('jobq', enqueue_many.queue);
        RETURN;
    END IF;
    IF enqueue_many.job_keys IS NULL THEN
        -- No keys, with parents: one INSERT of waiting jobs, then their links.
        WITH ins AS (
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, group_key, timeout,
                                   status, parked, has_parents, meta, fair_key)
            SELECT enqueue_many.queue, p.payload, enqueue_many.run_at, enqueue_many.priority,
                   coalesce(enqueue_many.max_attempts, v_settings.max_attempts), enqueue_many.group_key,
                   coalesce(enqueue_many.timeout, v_settings.timeout), 'waiting', true, true, p.meta,
                   coalesce(enqueue_many.fair_keys[array_lower(enqueue_many.fair_keys, 1) + p.ord - 1],
                            (SELECT '' FROM jobq._queue AS q WHERE q.queue = enqueue_many.queue AND q.fair))
            FROM unnest(enqueue_many.payloads, enqueue_many.metas) WITH ORDINALITY AS p(payload, meta, ord)
            ORDER BY p.ord
            RETURNING id
        )
        SELECT coalesce(array_agg(ins.id ORDER BY ins.id), '{}') INTO v_ids FROM ins;
        PERFORM jobq._attach(v_ids, enqueue_many.depends_on, enqueue_many.on_parent_failure, false);
        RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
        RETURN;
    END IF;

    PERFORM jobq._check_job_keys(p_job_keys => enqueue_many.job_keys, p_n => v_n);
    FOR v_item IN
        SELECT x.payload, x.job_key, x.meta,
               enqueue_many.fair_keys[array_lower(enqueue_many.fair_keys, 1) + x.ord - 1] AS fair_key
        FROM unnest(enqueue_many.payloads, enqueue_many.job_keys, enqueue_many.metas)
             WITH ORDINALITY AS x(payload, job_key, meta, ord)
        ORDER BY x.ord
    LOOP
        IF enqueue_many.on_duplicate = 'keep' OR v_item.job_key IS NULL THEN
            v_ids := v_ids || jobq._insert_job(enqueue_many.queue, v_item.payload, enqueue_many.run_at,
                                               enqueue_many.priority,
                                               coalesce(enqueue_many.max_attempts, v_settings.max_attempts),
                                               v_item.job_key, enqueue_many.group_key,
                                               coalesce(enqueue_many.timeout, v_settings.timeout),
                                               enqueue_many.unique_for, v_waiting, v_item.meta, v_item.fair_key);
        ELSE
            v_ids := v_ids || jobq._replace_job(enqueue_many.queue, v_item.payload, enqueue_many.run_at,
                                                enqueue_many.priority,
                                                coalesce(enqueue_many.max_attempts, v_settings.max_attempts),
                                                v_item.job_key, enqueue_many.group_key,
                                                coalesce(enqueue_many.timeout, v_settings.timeout),
                                                enqueue_many.unique_for, v_waiting,
                                                enqueue_many.on_duplicate = 'replace_payload', v_item.meta,
                                                v_item.fair_key);
        END IF;
    END LOOP;
    IF v_waiting THEN
        PERFORM jobq._attach(v_ids, enqueue_many.depends_on, enqueue_many.on_parent_failure, false);
    END IF;
    RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
END
$$;
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text, jsonb[], text[], text) IS
    'Adds one job per payload in one call; returns their ids in payload order (existing ids for job_keys already held, updated with on_duplicate replace/replace_payload unless running); depends_on makes every one wait for those jobs; metas gives each its meta, fair_keys its fair key.';

CREATE FUNCTION jobq.enqueue_callback(
    queue text,
    payload jsonb,
    members bigint[],
    run_at timestamptz DEFAULT pg_catalog.now(),
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL,
    meta jsonb DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
    v_id bigint;
BEGIN
    -- Add a batch callback: a job that waits until every one of members
    -- (jobs of any queues) has finished — completed, dead or cancelled — and
    -- then becomes ready exactly once, its payload with "batch": {members,
    -- completed, dead, cancelled} (jobq's counts replace a "batch" key of
    -- the payload). Returns its id. A member retried (or restored by a
    -- retry) while the callback is released but not yet claimed puts it
    -- back to waiting, to be released once more with the new counts; once
    -- a worker has claimed it, a retried member does not release it again.
    -- meta: as jobq.enqueue's.
    v_settings := jobq._settings(enqueue_callback.queue);
    PERFORM jobq._check_queue(enqueue_callback.queue, 'queue');
    PERFORM jobq._check_payload(enqueue_callback.payload, 'payload', v_settings.max_payload_bytes);
    PERFORM jobq._check_meta(enqueue_callback.meta, 'meta', v_settings.max_payload_bytes);
    PERFORM jobq._check_time(enqueue_callback.run_at, 'run_at');
    PERFORM jobq._check_job_options(enqueue_callback.priority, enqueue_callback.max_attempts);
    PERFORM jobq._check_dependencies(enqueue_callback.members, 'members', 'run');
    PERFORM jobq._check_queue_privilege(ARRAY[enqueue_callback.queue], 'produce')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'produce' AND enqueue_callback.queue LIKE g.queue_like);
    PERFORM jobq._check_readable_jobs(enqueue_callback.members, 'members');
    PERFORM jobq._check_parents_issued(enqueue_callback.members, 'members');
    v_id := jobq._insert_job(enqueue_callback.queue, enqueue_callback.payload, enqueue_callback.run_at,
                             enqueue_callback.priority,
                             coalesce(enqueue_callback.max_attempts, v_settings.max_attempts), NULL, NULL,
                             v_settings.timeout, NULL, true, enqueue_callback.meta);
    PERFORM jobq._attach(ARRAY[v_id], enqueue_callback.members, 'run', true);
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION jobq.enqueue_callback(text, jsonb, bigint[], timestamptz, integer, integer, jsonb) IS
    'Adds a batch callback: a job released exactly once when all members have finished, with their completed/dead/cancelled counts in its payload.';

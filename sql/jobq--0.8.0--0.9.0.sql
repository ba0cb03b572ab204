-- jobq 0.8.0 → 0.9.0: a producer's open transaction no longer freezes the jobs it names. One line per change:
--   workflows, watch and cascades (issue 25, items 1-3):
--   plans that do not depend on statistics, costs that do not grow with the backlog (issue 24):
--   per-queue privileges (issue 25, item 4):
--   smaller fixes (issue 25, item 5):
--     jobq.every(..., runner => 'workers') and jobq.unschedule work for a role without USAGE on schema cron
--       (new jobq._cron_unschedule_own: only the caller's own pg_cron job, and only when it may use pg_cron);
--       jobq._require_pg_cron raises JQ014 naming the missing USAGE, with a HINT, instead of a bare 42501.
--     array arguments are lists: more than one dimension is refused with the argument's JQ SQLSTATE, and an
--       element is named by its own subscript in errors (depends_on, members, payloads, job_keys, queues, ids,
--       lease_tokens, results): _check_dependencies, _check_results, _check_claim_args, _claim_args_ok,
--       enqueue_many, complete_held, complete_many, next_run_at.
--
-- Applied by ALTER EXTENSION jobq UPDATE TO '0.9.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.8.0 is installed.

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
    IF jobq.version() <> '0.8.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.8.0 to 0.9.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.9.0');

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '0.9.0'::text
$$;
COMMENT ON FUNCTION jobq.version() IS 'Installed jobq version (semver text).';

-- tables (new or changed), each section its own

-- workflows, watch and cascades (issue 25, items 1-3)

-- plans and costs (issue 24)

-- per-queue privileges (issue 25, item 4)

-- smaller fixes (issue 25, item 5)
CREATE FUNCTION jobq._cron_unschedule_own(p_jobname text) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Remove the calling role's pg_cron job of that name; false when it has
    -- none. A pg_cron job belongs to the role that scheduled it: cron.job
    -- shows a role its own (a superuser all) and cron.unschedule(name) finds
    -- only the caller's. A role without USAGE on schema cron cannot have
    -- scheduled one, and may not even read cron.job: nothing to remove.
    -- Nested IFs: cron.job must not be parsed where pg_cron is missing.
    IF NOT jobq._pg_cron_installed() THEN
        RETURN false;
    END IF;
    IF NOT pg_catalog.has_schema_privilege('cron', 'USAGE') THEN
        RETURN false;
    END IF;
    IF NOT EXISTS (SELECT FROM cron.job AS c
                   WHERE c.jobname = p_jobname AND c.username = current_user::text) THEN
        RETURN false;
    END IF;
    PERFORM cron.unschedule(p_jobname);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq._cron_unschedule_own(text) IS
    'Removes the calling role''s pg_cron job of that name; false when it has none (or may not use pg_cron).';
CREATE OR REPLACE FUNCTION jobq._require_pg_cron() RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ014 unless the calling role can use pg_cron here: the
    -- extension is installed in this database, and the role has USAGE on
    -- its schema (which pg_cron grants to nobody: a superuser grants it).
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
        RAISE EXCEPTION 'jobq: pg_cron is not installed in database %', pg_catalog.quote_ident(current_database())
            USING ERRCODE = 'JQ014',
                  HINT = 'Add pg_cron to shared_preload_libraries, set cron.database_name to this database and '
                         'CREATE EXTENSION pg_cron; or call jobq.reap() and jobq.prune() from your own scheduler '
                         '(pyqueue workers also reap on their own).';
    END IF;
    IF NOT pg_catalog.has_schema_privilege('cron', 'USAGE') THEN
        RAISE EXCEPTION 'jobq: role % may not use pg_cron: it has no USAGE on schema cron',
                pg_catalog.quote_ident(current_user)
            USING ERRCODE = 'JQ014',
                  HINT = pg_catalog.format('A superuser can GRANT USAGE ON SCHEMA cron TO %I. Without pg_cron, '
                                           'jobq.every(..., runner => ''workers'') has pyqueue workers run a '
                                           'periodic job, and they reap and prune on their own.', current_user);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._require_pg_cron() IS
    'Raises JQ014 when pg_cron is not installed in this database, or the calling role may not use it.';
CREATE OR REPLACE FUNCTION jobq.every(
    name text,
    schedule text,
    queue text,
    payload jsonb DEFAULT '{}'::jsonb,
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL,
    runner text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_jobid bigint;
    v_runner text := coalesce(every.runner, CASE WHEN jobq._pg_cron_installed() THEN 'pg_cron' ELSE 'workers' END);
BEGIN
    -- Enqueue payload on queue at every tick of a cron schedule (re-running
    -- with the same name updates it). runner 'pg_cron' has pg_cron run it
    -- (returns the pg_cron job id); 'workers' has pyqueue workers run it
    -- through jobq.run_schedules() (returns NULL); NULL picks pg_cron when
    -- it is installed. Each run uses the job_key 'every:<name>', so a slow
    -- worker never piles up copies: while one is ready, scheduled or
    -- running, the next tick adds nothing. Runs as the calling role.
    IF v_runner NOT IN ('pg_cron', 'workers') THEN
        RAISE EXCEPTION 'jobq: runner must be NULL, ''pg_cron'' or ''workers'', got %',
                pg_catalog.quote_literal(pg_catalog.left(v_runner, 100))
            USING ERRCODE = 'JQ017', HINT = 'NULL uses pg_cron when it is installed, the workers otherwise.';
    END IF;
    IF v_runner = 'workers' THEN
        PERFORM jobq._periodic_save(every.name, every.schedule, every.queue, every.payload,
                                    every.priority, every.max_attempts, 'workers');
        -- It may have moved from pg_cron to the workers (needs no privilege on pg_cron).
        PERFORM jobq._cron_unschedule_own('jobq-every:' || every.name);
        RETURN NULL;
    END IF;
    PERFORM jobq._require_pg_cron();
    PERFORM jobq._periodic_save(every.name, every.schedule, every.queue, every.payload,
                                every.priority, every.max_attempts, 'pg_cron');
    BEGIN
        v_jobid := cron.schedule('jobq-every:' || every.name, every.schedule,
                                 format('SELECT jobq.enqueue_periodic(%L)', every.name));
    EXCEPTION WHEN invalid_parameter_value THEN
        RAISE EXCEPTION 'jobq: pg_cron rejected schedule %', pg_catalog.quote_literal(every.schedule)
            USING ERRCODE = 'JQ012', DETAIL = SQLERRM,
                  HINT = 'pg_cron 1.4 takes cron syntax only (five fields, one minute at the finest), e.g. ''*/5 * * * *''.';
    END;
    RETURN v_jobid;
END
$$;
COMMENT ON FUNCTION jobq.every(text, text, text, jsonb, integer, integer, text) IS
    'Schedules a periodic job, run by pg_cron (returns its job id) or by the workers (returns NULL); one active copy at a time.';
CREATE OR REPLACE FUNCTION jobq.unschedule(name text) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Remove a periodic job registered with jobq.every() (jobs it already
    -- enqueued stay), and its pg_cron entry if it has one. False when no
    -- such periodic job exists.
    IF NOT jobq._periodic_delete(unschedule.name) THEN
        RETURN false;
    END IF;
    PERFORM jobq._cron_unschedule_own('jobq-every:' || unschedule.name);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.unschedule(text) IS 'Removes a periodic job (its pg_cron entry too); false when unknown.';
CREATE OR REPLACE FUNCTION jobq._check_dependencies(p_ids bigint[], p_arg text, p_on_parent_failure text) RETURNS void
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
    -- jobq._lock_parents' question.
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
CREATE OR REPLACE FUNCTION jobq._check_results(p_ids bigint[], p_results jsonb[]) RETURNS void
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
CREATE OR REPLACE FUNCTION jobq._check_claim_args(p_queues text[], p_n integer, p_lease interval) RETURNS void
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
    IF array_ndims(p_queues) > 1 THEN
        RAISE EXCEPTION 'jobq: queues must be a one-dimensional array, got % dimensions %',
                array_ndims(p_queues), array_dims(p_queues)
            USING ERRCODE = 'JQ001', HINT = 'Pass a list of names, e.g. ARRAY[''emails'', ''sms''].';
    END IF;
    -- By position: arrays may start at any index (a name is named by its subscript).
    FOR v_queue IN SELECT u.name, u.ord FROM unnest(p_queues) WITH ORDINALITY AS u(name, ord) LOOP
        PERFORM jobq._check_queue(v_queue.name, format('queues[%s]', array_lower(p_queues, 1) + v_queue.ord - 1));
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq._check_claim_args(text[], integer, interval) IS
    'Raises the JQ error of the first bad claim/take/hold argument (isolation, n, lease, queue names).';
CREATE OR REPLACE FUNCTION jobq._claim_args_ok(p_queues text[], p_n integer, p_lease interval, p_worker text)
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
        AND (p_lease IS NULL
             OR (p_lease BETWEEN interval '1 second' AND interval '1 day'
                 AND date_part('month', p_lease) = 0 AND date_part('year', p_lease) = 0
                 AND date_part('day', p_lease) * (extract(epoch FROM p_lease) - date_part('day', p_lease) * 86400) >= 0))
        AND coalesce(char_length(p_worker), 0) <= 200
        AND cardinality(p_queues) BETWEEN 1 AND 100
        AND array_ndims(p_queues) = 1  -- before array_position, which refuses more dimensions
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
CREATE OR REPLACE FUNCTION jobq.enqueue_many(
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
    on_parent_failure text DEFAULT 'cancel'
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
    -- job waits for the same parents.
    IF NOT (jobq._enqueue_args_ok(enqueue_many.queue, enqueue_many.run_at, enqueue_many.priority,
                                  enqueue_many.max_attempts, NULL, enqueue_many.group_key)
            AND v_n BETWEEN 0 AND 100000 AND coalesce(array_ndims(enqueue_many.payloads), 1) = 1
            AND enqueue_many.timeout IS NULL AND enqueue_many.unique_for IS NULL
            AND enqueue_many.depends_on IS NULL AND enqueue_many.on_parent_failure IS NOT DISTINCT FROM 'cancel') THEN
        PERFORM jobq._check_queue(enqueue_many.queue, 'queue');
        IF enqueue_many.payloads IS NULL THEN
            RAISE EXCEPTION 'jobq: payloads must not be NULL'
                USING ERRCODE = 'JQ002', HINT = 'Pass an array of JSON objects, e.g. ARRAY[''{"a":1}'']::jsonb[].';
        END IF;
        IF array_ndims(enqueue_many.payloads) > 1 THEN
            RAISE EXCEPTION 'jobq: payloads must be a one-dimensional array, got % dimensions %',
                    array_ndims(enqueue_many.payloads), array_dims(enqueue_many.payloads)
                USING ERRCODE = 'JQ002',
                      HINT = 'Pass a list of JSON objects, e.g. ARRAY[''{"a":1}'', ''{"a":2}'']::jsonb[].';
        END IF;
        PERFORM jobq._check_batch(v_n, 'cardinality(payloads)', 100000);
        PERFORM jobq._check_time(enqueue_many.run_at, 'run_at');
        PERFORM jobq._check_job_options(enqueue_many.priority, enqueue_many.max_attempts);
        PERFORM jobq._check_job_key(enqueue_many.group_key, 'group_key');
        PERFORM jobq._check_interval(enqueue_many.timeout, 'timeout', interval '1 second', interval '1 day');
        PERFORM jobq._check_unique_for(enqueue_many.unique_for, enqueue_many.job_keys IS NOT NULL, 'job_keys');
        PERFORM jobq._check_dependencies(coalesce(enqueue_many.depends_on, '{}'), 'depends_on',
                                         enqueue_many.on_parent_failure);
    END IF;
    v_settings := jobq._settings(enqueue_many.queue);

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

    IF v_waiting THEN
        PERFORM jobq._lock_parents(enqueue_many.depends_on, 'depends_on');
    END IF;
    IF enqueue_many.job_keys IS NULL AND NOT v_waiting THEN
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
    IF enqueue_many.job_keys IS NULL THEN
        -- No keys, with parents: one INSERT of waiting jobs, then their links.
        WITH ins AS (
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, group_key, timeout,
                                   status, parked, has_parents)
            SELECT enqueue_many.queue, p.payload, enqueue_many.run_at, enqueue_many.priority,
                   coalesce(enqueue_many.max_attempts, v_settings.max_attempts), enqueue_many.group_key,
                   coalesce(enqueue_many.timeout, v_settings.timeout), 'waiting', true, true
            FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, ord)
            ORDER BY p.ord
            RETURNING id
        )
        SELECT coalesce(array_agg(ins.id ORDER BY ins.id), '{}') INTO v_ids FROM ins;
        PERFORM jobq._attach(v_ids, enqueue_many.depends_on, enqueue_many.on_parent_failure, false);
        RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
        RETURN;
    END IF;

    IF array_ndims(enqueue_many.job_keys) > 1 THEN
        RAISE EXCEPTION 'jobq: job_keys must be a one-dimensional array, got % dimensions %',
                array_ndims(enqueue_many.job_keys), array_dims(enqueue_many.job_keys)
            USING ERRCODE = 'JQ009', HINT = 'Pass a list of keys (or NULLs), one per payload.';
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
        PERFORM jobq._check_job_key(v_item.job_key,
                                    format('job_keys[%s]', array_lower(enqueue_many.job_keys, 1) + v_item.ord - 1));
    END LOOP;
    FOR v_item IN
        SELECT x.payload, x.job_key
        FROM unnest(enqueue_many.payloads, enqueue_many.job_keys) WITH ORDINALITY AS x(payload, job_key, ord)
        ORDER BY x.ord
    LOOP
        v_ids := v_ids || jobq._insert_job(enqueue_many.queue, v_item.payload, enqueue_many.run_at,
                                           enqueue_many.priority,
                                           coalesce(enqueue_many.max_attempts, v_settings.max_attempts),
                                           v_item.job_key, enqueue_many.group_key,
                                           coalesce(enqueue_many.timeout, v_settings.timeout),
                                           enqueue_many.unique_for, v_waiting);
    END LOOP;
    IF v_waiting THEN
        PERFORM jobq._attach(v_ids, enqueue_many.depends_on, enqueue_many.on_parent_failure, false);
    END IF;
    RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
END
$$;
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text) IS
    'Adds one job per payload in one call; returns their ids in payload order (existing ids for job_keys already held); depends_on makes every one wait for those jobs.';
CREATE OR REPLACE FUNCTION jobq.complete_held(ids bigint[], results jsonb[] DEFAULT NULL) RETURNS integer
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
    -- alone (never waited for). results: each job's result (or NULL), as
    -- in jobq.complete_many.
    IF array_ndims(complete_held.ids) > 1 THEN
        RAISE EXCEPTION 'jobq: ids must be a one-dimensional array, got % dimensions %',
                array_ndims(complete_held.ids), array_dims(complete_held.ids)
            USING ERRCODE = 'JQ010', HINT = 'Pass a list of the ids jobq.hold() returned.';
    END IF;
    IF complete_held.ids IS NULL OR array_position(complete_held.ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: ids must be an array of job ids without NULL'
            USING ERRCODE = 'JQ010', HINT = 'Pass the ids of the jobs jobq.hold() returned.';
    END IF;
    PERFORM jobq._check_batch(cardinality(complete_held.ids), 'cardinality(ids)', 10000);
    IF complete_held.results IS NOT NULL THEN
        PERFORM jobq._check_results(complete_held.ids, complete_held.results);
    END IF;
    SELECT count(*) INTO v_done
    FROM jobq._finish(complete_held.ids, NULL, 'completed', NULL, true, complete_held.results);
    RETURN v_done;
END
$$;
COMMENT ON FUNCTION jobq.complete_held(bigint[], jsonb[]) IS
    'Marks jobs held by this transaction done (on commit), with their results; returns how many; never waits for another holder.';
CREATE OR REPLACE FUNCTION jobq.complete_many(ids bigint[], lease_tokens uuid[], results jsonb[] DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_done integer;
BEGIN
    -- Acknowledge many jobs in one statement; returns how many were still
    -- held under their lease tokens (the others are left alone). results:
    -- one result (or NULL) per job, as in jobq.complete; JQ003 (and nothing
    -- completed) when one is over its queue's max_payload_bytes.
    IF array_ndims(complete_many.ids) > 1 THEN
        RAISE EXCEPTION 'jobq: ids must be a one-dimensional array, got % dimensions %',
                array_ndims(complete_many.ids), array_dims(complete_many.ids)
            USING ERRCODE = 'JQ010', HINT = 'Pass the id and lease_token of each claimed job, as two lists.';
    END IF;
    IF array_ndims(complete_many.lease_tokens) > 1 THEN
        RAISE EXCEPTION 'jobq: lease_tokens must be a one-dimensional array, got % dimensions %',
                array_ndims(complete_many.lease_tokens), array_dims(complete_many.lease_tokens)
            USING ERRCODE = 'JQ010', HINT = 'Pass the id and lease_token of each claimed job, as two lists.';
    END IF;
    IF complete_many.ids IS NULL OR complete_many.lease_tokens IS NULL
       OR cardinality(complete_many.ids) <> cardinality(complete_many.lease_tokens) THEN
        RAISE EXCEPTION 'jobq: ids and lease_tokens must be arrays of the same length'
            USING ERRCODE = 'JQ010', HINT = 'Pass the id and lease_token of each claimed job, in the same order.';
    END IF;
    PERFORM jobq._check_batch(cardinality(complete_many.ids), 'cardinality(ids)', 10000);
    IF array_position(complete_many.ids, NULL) IS NOT NULL
       OR array_position(complete_many.lease_tokens, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: ids and lease_tokens must not contain NULL'
            USING ERRCODE = 'JQ010', HINT = 'Pass the id and lease_token of each claimed job.';
    END IF;
    IF complete_many.results IS NOT NULL THEN
        PERFORM jobq._check_results(complete_many.ids, complete_many.results);
    END IF;
    SELECT count(*) INTO v_done
    FROM jobq._finish(complete_many.ids, complete_many.lease_tokens, 'completed', NULL, false, complete_many.results);
    RETURN v_done;
END
$$;
COMMENT ON FUNCTION jobq.complete_many(bigint[], uuid[], jsonb[]) IS
    'Marks many jobs done in one statement (with their results); returns how many were still held under their lease tokens.';
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
    'Earliest future run_at of ready jobs in these queues (NULL if none): when an idle worker should look again.';

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
-- smaller fixes (issue 25, item 5)
GRANT EXECUTE ON FUNCTION jobq._cron_unschedule_own(text) TO jobq_admin;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

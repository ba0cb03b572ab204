CREATE FUNCTION jobq._pg_cron_installed() RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    -- Whether the pg_cron extension is installed in this database.
    SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron')
$$;
COMMENT ON FUNCTION jobq._pg_cron_installed() IS 'True when pg_cron is installed in this database.';

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

CREATE FUNCTION jobq._cron_field(p_field text, p_min integer, p_max integer, p_names text[]) RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_item text;
    v_parts text[];
    v_ends text[];
    v_bounds integer[];
    v_step integer;
    v_out integer[] := '{}';
BEGIN
    -- The values one field of a cron schedule allows, sorted; NULL when the
    -- field is not valid. A field is a comma list of items: *, a value, or a
    -- range a-b, each optionally with a step /n (a/n: from a to the end).
    -- Values are numbers, or names when p_names lists them (jan.., sun..).
    FOREACH v_item IN ARRAY string_to_array(lower(p_field), ',') LOOP
        v_parts := string_to_array(v_item, '/');
        IF cardinality(v_parts) NOT IN (1, 2) OR (cardinality(v_parts) = 2 AND v_parts[2] !~ '^[0-9]{1,2}$') THEN
            RETURN NULL;
        END IF;
        v_step := coalesce(v_parts[2]::integer, 1);
        IF v_step = 0 THEN
            RETURN NULL;
        END IF;
        IF v_parts[1] = '*' THEN
            v_bounds := ARRAY[p_min, p_max];
        ELSE
            v_ends := string_to_array(v_parts[1], '-');
            IF cardinality(v_ends) NOT IN (1, 2) THEN
                RETURN NULL;
            END IF;
            SELECT array_agg(CASE WHEN e.value ~ '^[0-9]{1,2}$' THEN e.value::integer
                                  ELSE array_position(p_names, e.value) + p_min - 1 END ORDER BY e.ord)
            INTO v_bounds
            FROM unnest(v_ends) WITH ORDINALITY AS e(value, ord);
            IF cardinality(v_ends) = 1 THEN
                v_bounds := ARRAY[v_bounds[1], CASE WHEN cardinality(v_parts) = 2 THEN p_max ELSE v_bounds[1] END];
            END IF;
        END IF;
        IF v_bounds[1] IS NULL OR v_bounds[2] IS NULL OR v_bounds[1] < p_min OR v_bounds[2] > p_max
           OR v_bounds[1] > v_bounds[2] THEN
            RETURN NULL;
        END IF;
        v_out := v_out || ARRAY(SELECT generate_series(v_bounds[1], v_bounds[2], v_step));
    END LOOP;
    IF cardinality(v_out) = 0 THEN
        RETURN NULL;
    END IF;
    RETURN ARRAY(SELECT DISTINCT u.v FROM unnest(v_out) AS u(v) ORDER BY u.v);
END
$$;
COMMENT ON FUNCTION jobq._cron_field(text, integer, integer, text[]) IS
    'The sorted values one cron field allows (*, a, a-b, /step, lists, names); NULL when invalid.';

CREATE FUNCTION jobq._cron_next(p_schedule text, p_after timestamptz) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_fields text[];
    v_minutes integer[];
    v_hours integer[];
    v_doms integer[];
    v_months integer[];
    v_dows integer[];
    v_from timestamp;
    v_day date;
    v_at timestamp;
BEGIN
    -- The first tick of a cron schedule after p_after, in UTC (as pg_cron
    -- by default); NULL when the schedule is not valid or never fires.
    -- Five fields (minute hour day-of-month month day-of-week, Sunday 0 or
    -- 7) or @hourly, @daily, @midnight, @weekly, @monthly, @yearly,
    -- @annually. As in cron, when both day fields are restricted a day
    -- matching either runs.
    v_fields := regexp_split_to_array(btrim(CASE lower(btrim(p_schedule))
        WHEN '@hourly' THEN '0 * * * *' WHEN '@daily' THEN '0 0 * * *' WHEN '@midnight' THEN '0 0 * * *'
        WHEN '@weekly' THEN '0 0 * * 0' WHEN '@monthly' THEN '0 0 1 * *' WHEN '@yearly' THEN '0 0 1 1 *'
        WHEN '@annually' THEN '0 0 1 1 *' ELSE p_schedule END), '\s+');
    IF cardinality(v_fields) <> 5 THEN
        RETURN NULL;
    END IF;
    v_minutes := jobq._cron_field(v_fields[1], 0, 59, NULL);
    v_hours := jobq._cron_field(v_fields[2], 0, 23, NULL);
    v_doms := jobq._cron_field(v_fields[3], 1, 31, NULL);
    v_months := jobq._cron_field(v_fields[4], 1, 12,
                                 '{jan,feb,mar,apr,may,jun,jul,aug,sep,oct,nov,dec}');
    v_dows := jobq._cron_field(v_fields[5], 0, 7, '{sun,mon,tue,wed,thu,fri,sat}');
    IF v_minutes IS NULL OR v_hours IS NULL OR v_doms IS NULL OR v_months IS NULL OR v_dows IS NULL
       OR p_after IS NULL OR NOT isfinite(p_after) THEN
        RETURN NULL;
    END IF;
    v_dows := array_replace(v_dows, 7, 0);
    v_from := date_trunc('minute', p_after AT TIME ZONE 'UTC') + interval '1 minute';
    -- Day by day (February 29th may be eight years away), then the first
    -- hour and minute of a matching day not before v_from.
    FOR i IN 0..2930 LOOP
        v_day := v_from::date + i;
        CONTINUE WHEN NOT (extract(month FROM v_day)::integer = ANY (v_months));
        CONTINUE WHEN NOT CASE
            WHEN left(v_fields[3], 1) = '*' AND left(v_fields[5], 1) = '*' THEN true
            WHEN left(v_fields[3], 1) = '*' THEN extract(dow FROM v_day)::integer = ANY (v_dows)
            WHEN left(v_fields[5], 1) = '*' THEN extract(day FROM v_day)::integer = ANY (v_doms)
            ELSE extract(day FROM v_day)::integer = ANY (v_doms) OR extract(dow FROM v_day)::integer = ANY (v_dows)
        END;
        SELECT min(v_day + make_interval(hours => h.v, mins => m.v)) INTO v_at
        FROM unnest(v_hours) AS h(v), unnest(v_minutes) AS m(v)
        WHERE v_day + make_interval(hours => h.v, mins => m.v) >= v_from;
        IF v_at IS NOT NULL THEN
            RETURN v_at AT TIME ZONE 'UTC';
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION jobq._cron_next(text, timestamptz) IS
    'The first tick (UTC) of a cron schedule after a time; NULL when the schedule is invalid or never fires.';

CREATE FUNCTION jobq._enqueue_tick(p_periodic jobq._periodic) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue := jobq._settings(p_periodic.queue);
BEGIN
    -- Enqueue one run of a periodic job under the job_key 'every:<name>':
    -- the new job's id, or the id of the run still active.
    RETURN jobq._insert_job(p_periodic.queue, p_periodic.payload, now(), p_periodic.priority,
                            coalesce(p_periodic.max_attempts, v_settings.max_attempts),
                            'every:' || p_periodic.name, NULL, v_settings.timeout, NULL);
END
$$;
COMMENT ON FUNCTION jobq._enqueue_tick(jobq._periodic) IS 'Enqueues one run of a periodic job (job_key every:<name>).';

CREATE FUNCTION jobq._periodic_save(
    p_name text, p_schedule text, p_queue text, p_payload jsonb, p_priority integer, p_max_attempts integer,
    p_runner text
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_next timestamptz;
BEGIN
    -- Validate and store a periodic job's definition (for jobq.every, which
    -- runs as its caller so that pg_cron runs the job as that role). Under
    -- the workers (p_runner 'workers') the schedule must be one jobq can
    -- read, and its next tick is stored for jobq.run_schedules().
    PERFORM jobq._check_periodic_name(p_name);
    PERFORM jobq._check_queue(p_queue, 'queue');
    PERFORM jobq._check_payload(p_payload, 'payload', (jobq._settings(p_queue)).max_payload_bytes);
    PERFORM jobq._check_job_options(p_priority, p_max_attempts);
    IF p_schedule IS NULL THEN
        RAISE EXCEPTION 'jobq: schedule must not be NULL'
            USING ERRCODE = 'JQ012', HINT = 'Use cron syntax, e.g. ''0 3 * * *'' (03:00 every day).';
    END IF;
    IF p_runner = 'workers' THEN
        v_next := jobq._cron_next(p_schedule, now());
        IF v_next IS NULL THEN
            RAISE EXCEPTION 'jobq: schedule % is not a cron schedule that ever fires',
                    pg_catalog.quote_literal(pg_catalog.left(p_schedule, 100))
                USING ERRCODE = 'JQ012',
                      HINT = 'Five fields, minute hour day-of-month month day-of-week, each *, a number, a range '
                             'a-b, a step /n, a list or a name (jan, mon), e.g. ''*/15 * * * *''; or @hourly, '
                             '@daily, @weekly, @monthly, @yearly. Times are UTC, one minute at the finest.';
        END IF;
    END IF;
    INSERT INTO jobq._periodic AS p (name, schedule, queue, payload, priority, max_attempts, runner, next_run_at)
    VALUES (p_name, p_schedule, p_queue, p_payload, p_priority, p_max_attempts, p_runner, v_next)
    ON CONFLICT ON CONSTRAINT _periodic_pkey DO UPDATE
    SET schedule = excluded.schedule, queue = excluded.queue, payload = excluded.payload,
        priority = excluded.priority, max_attempts = excluded.max_attempts, runner = excluded.runner,
        next_run_at = excluded.next_run_at, updated_at = now();
END
$$;
COMMENT ON FUNCTION jobq._periodic_save(text, text, text, jsonb, integer, integer, text) IS
    'Validates and stores a periodic job definition and, for the workers, its next tick (used by jobq.every).';

CREATE FUNCTION jobq._periodic_delete(p_name text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Forget a periodic job's definition (for jobq.unschedule); false when unknown.
    PERFORM jobq._check_periodic_name(p_name);
    DELETE FROM jobq._periodic AS p WHERE p.name = p_name;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION jobq._periodic_delete(text) IS 'Deletes a periodic job definition (used by jobq.unschedule).';

CREATE FUNCTION jobq.every(
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

CREATE FUNCTION jobq.unschedule(name text) RETURNS boolean
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

CREATE FUNCTION jobq.enqueue_periodic(name text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_periodic jobq._periodic;
BEGIN
    -- What pg_cron runs at each tick of a periodic job: enqueue it under the
    -- job_key 'every:<name>'; returns the new job's id, or the id of the copy
    -- that is still active. Records the tick as the schedule's last run.
    PERFORM jobq._check_periodic_name(enqueue_periodic.name);
    SELECT * INTO v_periodic FROM jobq._periodic AS p WHERE p.name = enqueue_periodic.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'jobq: no periodic job named %', pg_catalog.quote_literal(enqueue_periodic.name)
            USING ERRCODE = 'JQ016', HINT = 'See jobq.schedules; remove stale pg_cron entries with cron.unschedule().';
    END IF;
    UPDATE jobq._periodic AS p SET last_run_at = now() WHERE p.name = v_periodic.name;
    RETURN jobq._enqueue_tick(v_periodic);
END
$$;
COMMENT ON FUNCTION jobq.enqueue_periodic(text) IS
    'Enqueues one run of a periodic job (called by pg_cron); returns the job id, or the id of the run still active.';

CREATE FUNCTION jobq.run_schedules() RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_due jobq._periodic;
    v_next timestamptz;
BEGIN
    -- What workers call where pg_cron does not run the periodic jobs:
    -- enqueue each due tick of the schedules the workers run, and return
    -- when the next tick is due (NULL when the workers run none). Each tick
    -- is enqueued exactly once however many sessions call this at once: the
    -- schedule's row is locked (SKIP LOCKED) and moved to its next tick in
    -- the enqueueing transaction. A tick missed while nobody called this
    -- runs once, late; the ones before it are skipped (the next tick is the
    -- first after now). A tick that cannot be enqueued (e.g. its payload is
    -- now over the queue's cap) is skipped with a WARNING.
    FOR v_due IN
        SELECT p.* FROM jobq._periodic AS p
        WHERE p.runner = 'workers' AND p.next_run_at <= now()
        ORDER BY p.next_run_at
        FOR UPDATE SKIP LOCKED
    LOOP
        BEGIN
            PERFORM jobq._enqueue_tick(v_due);
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'jobq: periodic job % skipped its tick at %: %', pg_catalog.quote_literal(v_due.name),
                v_due.next_run_at, SQLERRM;
        END;
        UPDATE jobq._periodic AS p
        SET last_run_at = v_due.next_run_at,
            next_run_at = jobq._cron_next(p.schedule, greatest(clock_timestamp(), v_due.next_run_at))
        WHERE p.name = v_due.name;
    END LOOP;
    SELECT min(p.next_run_at) INTO v_next FROM jobq._periodic AS p WHERE p.runner = 'workers';
    RETURN v_next;
END
$$;
COMMENT ON FUNCTION jobq.run_schedules() IS
    'Enqueues each due tick of the worker-run periodic jobs exactly once; returns when the next tick is due (NULL: none).';

CREATE FUNCTION jobq.configure_queue(
    queue text,
    max_attempts integer DEFAULT NULL,
    backoff_base interval DEFAULT NULL,
    backoff_cap interval DEFAULT NULL,
    backoff_jitter double precision DEFAULT NULL,
    lease interval DEFAULT NULL,
    retention interval DEFAULT NULL,
    dead_retention interval DEFAULT NULL,
    max_payload_bytes integer DEFAULT NULL,
    concurrency integer DEFAULT NULL,
    rate_limit integer DEFAULT NULL,
    rate_interval interval DEFAULT NULL,
    timeout interval DEFAULT NULL,
    result_retention interval DEFAULT NULL,
    fair boolean DEFAULT NULL,
    fair_weights jsonb DEFAULT NULL,
    per_key_concurrency integer DEFAULT NULL
) RETURNS jobq._queue
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_constraint text;
    v_setting record;
BEGIN
    -- Set the given settings of a queue (NULL arguments leave a setting as
    -- it is; concurrency => 0, rate_limit => 0 or timeout => interval '0'
    -- removes that limit); returns the effective settings. New jobs and new
    -- failures use them; max_attempts and timeout are fixed on a job when it
    -- is enqueued. A new concurrency limit counts the jobs running now; a
    -- claim already under way when it commits may still lease past it once.
    -- The short durations (backoff, lease, rate interval, timeout) must be
    -- fixed lengths: no months, days and time of one sign. result_retention:
    -- how long a completed job with a result stays readable (jobq.result),
    -- at the least; retention when that is longer. fair => true: claims
    -- serve the queue's fair keys round-robin (fair_weights: more turns for
    -- some keys, '{}' removes them; per_key_concurrency: at most that many
    -- running jobs per key, 0 removes it); fair => false drops those too.
    -- A fair queue has no serial groups (JQ012 while it has grouped jobs).
    PERFORM jobq._check_queue(configure_queue.queue, 'queue');
    PERFORM jobq._check_fair_weights(configure_queue.fair_weights);
    IF (configure_queue.fair_weights IS NOT NULL OR configure_queue.per_key_concurrency > 0)
       AND NOT coalesce(configure_queue.fair, (jobq._settings(configure_queue.queue)).fair) THEN
        RAISE EXCEPTION 'jobq: setting % applies to fair queues only, and queue % is not one',
                CASE WHEN configure_queue.fair_weights IS NOT NULL THEN 'fair_weights' ELSE 'per_key_concurrency' END,
                pg_catalog.quote_literal(configure_queue.queue)
            USING ERRCODE = 'JQ012', HINT = 'Pass fair => true with it (or first).';
    END IF;
    IF configure_queue.fair AND NOT coalesce((jobq._settings(configure_queue.queue)).fair, false) THEN
        -- Turning fair on: no job may be written meanwhile. A fair queue's
        -- claims read jobq._job_fair_idx, which holds jobs with a fair key,
        -- and below the queue's keyless jobs get ''. An enqueue that read
        -- the queue as not fair and commits after that UPDATE ran would
        -- leave a keyless job no fair claim ever finds. So wait for every
        -- transaction that wrote (or row-locked) jobs, and hold back the
        -- next ones until this one commits: they then read the queue as
        -- fair (each enqueue decides a job's key in its INSERT, whose
        -- snapshot is taken after the table lock). Plain reads (views) go on.
        LOCK TABLE jobq._job IN EXCLUSIVE MODE;
    END IF;
    IF configure_queue.fair AND EXISTS (SELECT FROM jobq._job AS g
                                         WHERE g.queue = configure_queue.queue AND g.group_key IS NOT NULL) THEN
        RAISE EXCEPTION 'jobq: setting fair cannot be turned on while queue % has jobs of serial groups',
                pg_catalog.quote_literal(configure_queue.queue)
            USING ERRCODE = 'JQ012',
                  HINT = 'A fair queue has no serial groups: let the grouped jobs finish (or cancel them) first, '
                         'or use another queue.';
    END IF;
    FOR v_setting IN
        SELECT d.name, d.value
        FROM (VALUES ('backoff_base', configure_queue.backoff_base), ('backoff_cap', configure_queue.backoff_cap),
                     ('lease', configure_queue.lease), ('rate_interval', configure_queue.rate_interval),
                     ('timeout', configure_queue.timeout)) AS d(name, value)
        WHERE NOT jobq._fixed_length(d.value)
    LOOP
        RAISE EXCEPTION 'jobq: setting % must be a duration without months or years, its days and time of one sign, got %',
                v_setting.name, v_setting.value
            USING ERRCODE = 'JQ012', HINT = 'Write it in seconds, minutes, hours or days, e.g. interval ''30 seconds''.';
    END LOOP;
    INSERT INTO jobq._queue AS q (queue, max_attempts, backoff_base, backoff_cap, backoff_jitter,
                                  lease, retention, dead_retention, max_payload_bytes,
                                  concurrency, rate_limit, rate_interval, timeout, result_retention,
                                  fair, fair_weights, per_key_concurrency)
    VALUES (configure_queue.queue, configure_queue.max_attempts, configure_queue.backoff_base,
            configure_queue.backoff_cap, configure_queue.backoff_jitter, configure_queue.lease,
            configure_queue.retention, configure_queue.dead_retention, configure_queue.max_payload_bytes,
            nullif(configure_queue.concurrency, 0), nullif(configure_queue.rate_limit, 0),
            configure_queue.rate_interval, nullif(configure_queue.timeout, interval '0'),
            configure_queue.result_retention, nullif(configure_queue.fair, false),
            CASE WHEN configure_queue.fair_weights <> '{}' THEN configure_queue.fair_weights END,
            nullif(configure_queue.per_key_concurrency, 0))
    ON CONFLICT ON CONSTRAINT _queue_pkey DO UPDATE
    SET max_attempts = coalesce(excluded.max_attempts, q.max_attempts),
        backoff_base = coalesce(excluded.backoff_base, q.backoff_base),
        backoff_cap = coalesce(excluded.backoff_cap, q.backoff_cap),
        backoff_jitter = coalesce(excluded.backoff_jitter, q.backoff_jitter),
        lease = coalesce(excluded.lease, q.lease),
        retention = coalesce(excluded.retention, q.retention),
        dead_retention = coalesce(excluded.dead_retention, q.dead_retention),
        max_payload_bytes = coalesce(excluded.max_payload_bytes, q.max_payload_bytes),
        concurrency = CASE WHEN configure_queue.concurrency = 0 THEN NULL
                           ELSE coalesce(excluded.concurrency, q.concurrency) END,
        rate_limit = CASE WHEN configure_queue.rate_limit = 0 THEN NULL
                          ELSE coalesce(excluded.rate_limit, q.rate_limit) END,
        rate_interval = coalesce(excluded.rate_interval, q.rate_interval),
        timeout = CASE WHEN configure_queue.timeout = interval '0' THEN NULL
                       ELSE coalesce(excluded.timeout, q.timeout) END,
        result_retention = coalesce(excluded.result_retention, q.result_retention),
        fair = CASE WHEN configure_queue.fair IS NULL THEN q.fair ELSE excluded.fair END,
        fair_weights = CASE WHEN NOT configure_queue.fair OR configure_queue.fair_weights = '{}' THEN NULL
                            ELSE coalesce(excluded.fair_weights, q.fair_weights) END,
        per_key_concurrency = CASE WHEN NOT configure_queue.fair OR configure_queue.per_key_concurrency = 0 THEN NULL
                                   ELSE coalesce(excluded.per_key_concurrency, q.per_key_concurrency) END,
        fair_cursor = CASE WHEN NOT configure_queue.fair THEN NULL ELSE q.fair_cursor END,
        fair_turns = CASE WHEN NOT configure_queue.fair THEN NULL ELSE q.fair_turns END,
        updated_at = now();
    IF configure_queue.fair THEN
        -- A fair queue claims from jobq._job_fair_idx, which holds jobs with
        -- a fair key: the live ones without get '' (the keyless jobs' turn).
        UPDATE jobq._job AS j SET fair_key = ''
        WHERE j.queue = configure_queue.queue AND j.fair_key IS NULL;
    END IF;
    IF configure_queue.fair IS NOT NULL OR configure_queue.per_key_concurrency > 0
       OR configure_queue.concurrency > 0 THEN
        -- A limited queue counts its running jobs (per key with
        -- per_key_concurrency) by the parked index: park the leases granted
        -- before the limit. So does a queue that turns fair, or plain: the
        -- leases granted in place before are found where the claims of its
        -- old kind left them (the head of the claim index, or of a fair key).
        UPDATE jobq._job AS j SET parked = true
        WHERE j.queue = configure_queue.queue AND NOT j.parked AND j.status = 'running';
    END IF;
    RETURN jobq._settings(configure_queue.queue);
EXCEPTION WHEN check_violation THEN
    GET STACKED DIAGNOSTICS v_constraint := CONSTRAINT_NAME;
    RAISE EXCEPTION 'jobq: setting % is out of range', regexp_replace(v_constraint, '^queue_|_range$', '', 'g')
        USING ERRCODE = 'JQ012',
              HINT = 'Ranges: max_attempts 1..1000, backoff_base 0..1 day, backoff_cap 0..30 days, '
                     'backoff_jitter 0..1, lease 1 s..1 day, retention 0..3650 days, '
                     'dead_retention 1 s..3650 days, max_payload_bytes 1..104857600, '
                     'concurrency 1..10000 (0: no limit), rate_limit 1..1000000 (0: no limit), '
                     'rate_interval 1 s..1 day, timeout 1 s..1 day (0: none), result_retention 0..3650 days, '
                     'per_key_concurrency 1..10000 (0: no limit).';
END
$$;
COMMENT ON FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer, integer, integer, interval, interval, interval, boolean, jsonb, integer)
    IS 'Sets per-queue settings (NULL leaves a setting unchanged, 0 removes a concurrency or rate limit or a timeout; fair => true serves fair keys round-robin); returns the effective settings.';

CREATE FUNCTION jobq.reset_queue(queue text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Drop every setting override of a queue: it goes back to the defaults.
    -- A paused queue stays paused (use jobq.resume()).
    PERFORM jobq._check_queue(reset_queue.queue, 'queue');
    DELETE FROM jobq._queue AS q WHERE q.queue = reset_queue.queue AND NOT coalesce(q.paused, false);
    IF FOUND THEN
        RETURN true;
    END IF;
    UPDATE jobq._queue AS q
    SET max_attempts = NULL, backoff_base = NULL, backoff_cap = NULL, backoff_jitter = NULL, lease = NULL,
        retention = NULL, dead_retention = NULL, max_payload_bytes = NULL, concurrency = NULL,
        rate_limit = NULL, rate_interval = NULL, timeout = NULL, result_retention = NULL, fair = NULL,
        fair_weights = NULL, per_key_concurrency = NULL, fair_cursor = NULL, fair_turns = NULL,
        updated_at = now()
    WHERE q.queue = reset_queue.queue;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION jobq.reset_queue(text) IS 'Removes a queue''s setting overrides; false when it had none.';

CREATE FUNCTION jobq.pause(queue text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_was boolean;
BEGIN
    -- Stop claims from a queue (running jobs finish; enqueueing goes on).
    -- True when the queue was not paused before.
    PERFORM jobq._check_queue(pause.queue, 'queue');
    SELECT coalesce(q.paused, false) INTO v_was FROM jobq._queue AS q WHERE q.queue = pause.queue FOR UPDATE;
    INSERT INTO jobq._queue AS q (queue, paused) VALUES (pause.queue, true)
    ON CONFLICT ON CONSTRAINT _queue_pkey DO UPDATE SET paused = true, updated_at = now();
    RETURN NOT coalesce(v_was, false);
END
$$;
COMMENT ON FUNCTION jobq.pause(text) IS 'Stops claims from a queue until jobq.resume(); true when it was not paused.';

CREATE FUNCTION jobq.resume(queue text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Let workers claim from a paused queue again, and wake them.
    -- True when the queue was paused.
    PERFORM jobq._check_queue(resume.queue, 'queue');
    UPDATE jobq._queue AS q SET paused = false, updated_at = now()
    WHERE q.queue = resume.queue AND q.paused;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('jobq', resume.queue);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.resume(text) IS 'Lets workers claim from a paused queue again; true when it was paused.';

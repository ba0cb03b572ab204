CREATE FUNCTION jobq.complete_held(ids bigint[], results jsonb[] DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_done integer;
    v_ids bigint[] := complete_held.ids;
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
    IF EXISTS (SELECT FROM jobq._queue_grant AS g WHERE g.privilege = 'consume') THEN
        -- A job of a queue the caller may not consume is left alone, as an unknown id is.
        v_ids := ARRAY(SELECT CASE WHEN jobq._job_allowed(u.id, 'consume') THEN u.id END
                       FROM unnest(complete_held.ids) WITH ORDINALITY AS u(id, ord) ORDER BY u.ord);
    END IF;
    SELECT count(*) INTO v_done
    FROM jobq._finish(p_ids => v_ids, p_lease_tokens => NULL, p_status => 'completed', p_error => NULL,
                      p_held => true, p_results => complete_held.results);
    RETURN v_done;
END
$$;
COMMENT ON FUNCTION jobq.complete_held(bigint[], jsonb[]) IS
    'Marks jobs held by this transaction done (on commit), with their results; returns how many; never waits for another holder.';

CREATE FUNCTION jobq._retry_or_bury(p_job jobq._job, p_attempt integer, p_error text, p_worker text,
                                    p_retry_at timestamptz, p_held boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
    v_run_at timestamptz;
BEGIN
    -- The failed attempt p_attempt of p_job, which the caller has locked
    -- (jobq.fail: under its lease; jobq.fail_held: held by this transaction,
    -- p_held, and this is its attempt): counted, its error (p_error, already
    -- bounded) kept in the job's history under p_worker; then dead letter
    -- when that was its last attempt, else ready again after exponential
    -- backoff with jitter (or at p_retry_at), unleased, and its queue's
    -- workers woken when that helps a claim (below).
    INSERT INTO jobq._counter (queue, bucket, failed) VALUES (p_job.queue, date_trunc('minute', now()), 1);
    PERFORM jobq._record_errors(p_ids => ARRAY[p_job.id], p_attempts => ARRAY[p_attempt],
                                p_errors => ARRAY[p_error], p_workers => ARRAY[p_worker]);
    IF p_attempt >= p_job.max_attempts THEN
        PERFORM jobq._finish(p_ids => ARRAY[p_job.id], p_lease_tokens => ARRAY[p_job.lease_token],
                             p_status => 'dead', p_error => p_error, p_held => p_held);
        RETURN;
    END IF;
    v_settings := jobq._settings(p_job.queue);
    UPDATE jobq._job AS j
    SET status = 'ready',
        parked = false,
        attempts = p_attempt,
        run_at = coalesce(p_retry_at,
                          now() + jobq._backoff_delay(p_attempt, v_settings.backoff_base,
                                                      v_settings.backoff_cap, v_settings.backoff_jitter,
                                                      random())),
        lease_token = NULL,
        lease_expires_at = NULL,
        heartbeat_at = NULL,
        last_error = p_error,
        worker = p_worker,
        started_at = CASE WHEN p_held THEN clock_timestamp() ELSE j.started_at END
    WHERE j.id = p_job.id
    RETURNING j.run_at INTO v_run_at;
    -- Wake the queue's workers only when a claim can gain by it: the retry is
    -- due now, or the failure freed a concurrency slot or its serial group's
    -- turn. A retry in backoff waits for the workers' next look (jobq.next_run_at).
    IF v_run_at <= now() OR v_settings.concurrency IS NOT NULL OR p_job.group_key IS NOT NULL THEN
        PERFORM pg_notify('jobq', p_job.queue);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._retry_or_bury(jobq._job, integer, text, text, timestamptz, boolean) IS
    'A failed attempt of a locked job, for fail and fail_held: counted, its error kept, then dead letter or a retry after backoff.';

CREATE FUNCTION jobq.fail_held(id bigint, error text, retry_at timestamptz DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_job jobq._job;
    v_error text := jobq._error_text(fail_held.error);
BEGIN
    -- Record a failed attempt of a job this transaction holds (jobq.hold):
    -- it retries after backoff (or at retry_at), or goes to dead letter when
    -- its attempts are used up, as jobq.fail() does for a leased job (the
    -- error joins the job's error history, worker session_user). False
    -- (and no change) when the job is not ready and due (hold took only
    -- those; a job failed once already waits for its retry), or another
    -- transaction holds it.
    IF fail_held.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL'
            USING ERRCODE = 'JQ010', HINT = 'Pass the id of a job jobq.hold() returned.';
    END IF;
    PERFORM jobq._check_error(fail_held.error);
    IF fail_held.retry_at IS NOT NULL THEN
        PERFORM jobq._check_time(fail_held.retry_at, 'retry_at');
    END IF;
    IF NOT jobq._job_allowed(fail_held.id, 'consume') THEN
        RETURN false;   -- a job of a queue the caller may not consume: as if another transaction held it
    END IF;
    BEGIN
        SELECT * INTO v_job FROM jobq._job AS j
        WHERE j.id = fail_held.id AND j.status = 'ready' AND j.run_at <= now()
        FOR UPDATE NOWAIT;
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;
    END;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM jobq._retry_or_bury(p_job => v_job, p_attempt => v_job.attempts + 1, p_error => v_error,
                                p_worker => session_user, p_retry_at => fail_held.retry_at, p_held => true);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.fail_held(bigint, text, timestamptz) IS
    'Records a failed attempt of a job held by this transaction (backoff or dead letter); false when not held.';

CREATE FUNCTION jobq.complete(id bigint, lease_token uuid, result jsonb DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
BEGIN
    -- Acknowledge success of a job still held under lease_token, with its
    -- result (any JSON value; jobq.result() returns it, the job's children
    -- read it with jobq.parent_results()). False (and no change) when the
    -- lease was lost or the id is unknown; JQ003 for a result over the
    -- queue's max_payload_bytes.
    PERFORM jobq._check_lease_args(complete.id, complete.lease_token);
    IF complete.result IS NULL THEN
        RETURN EXISTS (
            SELECT FROM jobq._finish(p_ids => ARRAY[complete.id], p_lease_tokens => ARRAY[complete.lease_token],
                                     p_status => 'completed', p_error => NULL));
    END IF;
    PERFORM jobq._check_results(ARRAY[complete.id], ARRAY[complete.result]);
    RETURN EXISTS (
        SELECT FROM jobq._finish(p_ids => ARRAY[complete.id], p_lease_tokens => ARRAY[complete.lease_token],
                                 p_status => 'completed', p_error => NULL, p_results => ARRAY[complete.result]));
END
$$;
COMMENT ON FUNCTION jobq.complete(bigint, uuid, jsonb) IS
    'Marks a job done (with its result) if still held under lease_token; false when the lease was lost or the id is unknown.';

CREATE FUNCTION jobq.complete_many(ids bigint[], lease_tokens uuid[], results jsonb[] DEFAULT NULL) RETURNS integer
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
    IF cardinality(complete_many.ids) > 10000 THEN
        PERFORM jobq._check_batch(cardinality(complete_many.ids), 'cardinality(ids)', 10000);
    END IF;
    IF array_position(complete_many.ids, NULL) IS NOT NULL
       OR array_position(complete_many.lease_tokens, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: ids and lease_tokens must not contain NULL'
            USING ERRCODE = 'JQ010', HINT = 'Pass the id and lease_token of each claimed job.';
    END IF;
    IF complete_many.results IS NOT NULL THEN
        PERFORM jobq._check_results(complete_many.ids, complete_many.results);
    END IF;
    SELECT count(*) INTO v_done
    FROM jobq._finish(p_ids => complete_many.ids, p_lease_tokens => complete_many.lease_tokens, p_status => 'completed',
                      p_error => NULL, p_results => complete_many.results);
    RETURN v_done;
END
$$;
COMMENT ON FUNCTION jobq.complete_many(bigint[], uuid[], jsonb[]) IS
    'Marks many jobs done in one statement (with their results); returns how many were still held under their lease tokens.';

CREATE FUNCTION jobq.fail(id bigint, error text, lease_token uuid, retry_at timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_job jobq._job;
    v_error text := jobq._error_text(fail.error);
BEGIN
    -- Record a failed attempt of a job held under lease_token: retry after
    -- exponential backoff with jitter (or at retry_at), or dead-letter it when
    -- its attempts are used up. The error joins the job's error history
    -- (jobq.job_errors). False (and no change) when the lease was lost.
    PERFORM jobq._check_lease_args(fail.id, fail.lease_token);
    PERFORM jobq._check_error(fail.error);
    IF fail.retry_at IS NOT NULL THEN
        PERFORM jobq._check_time(fail.retry_at, 'retry_at');
    END IF;

    SELECT * INTO v_job FROM jobq._job AS j
    WHERE j.id = fail.id AND j.lease_token = fail.lease_token
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM jobq._retry_or_bury(p_job => v_job, p_attempt => v_job.attempts, p_error => v_error,
                                p_worker => v_job.worker, p_retry_at => fail.retry_at, p_held => false);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.fail(bigint, text, uuid, timestamptz) IS
    'Records a failure: retries after backoff (or at retry_at) or dead-letters when out of attempts; false when the lease was lost.';

CREATE FUNCTION jobq.heartbeat(id bigint, lease_token uuid, extend interval DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_queue text;
BEGIN
    -- Extend the lease of a job still held under lease_token to now() +
    -- extend (default: the queue's lease), and note the time (heartbeat_at).
    -- False when the lease was lost. A job that lives to be heart-beaten is
    -- long-running: it is parked (out of the claim index), so claims do not
    -- step over it while it runs.
    PERFORM jobq._check_lease_args(heartbeat.id, heartbeat.lease_token);
    PERFORM jobq._check_interval(heartbeat.extend, 'extend', interval '1 second', interval '1 day');
    UPDATE jobq._job AS j
    SET lease_expires_at = clock_timestamp()
                           + coalesce(heartbeat.extend, (jobq._settings(j.queue)).lease),
        heartbeat_at = clock_timestamp(),
        parked = true
    WHERE j.id = heartbeat.id AND j.lease_token = heartbeat.lease_token
    RETURNING j.queue INTO v_queue;
    RETURN v_queue IS NOT NULL;
END
$$;
COMMENT ON FUNCTION jobq.heartbeat(bigint, uuid, interval) IS
    'Extends a lease held under lease_token; false when the lease was lost.';

CREATE FUNCTION jobq.progress(id bigint, lease_token uuid, progress jsonb) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_queue text;
    v_held boolean;
    v_cap integer;
BEGIN
    -- Store the progress of a job still held under lease_token: any JSON
    -- value (NULL clears it), shown by jobq.jobs and returned by the next
    -- claim of the job. False, changing nothing, when the lease was lost or
    -- the job is not running (as jobq.heartbeat); JQ003 when the value is
    -- over its queue's max_payload_bytes. It extends no lease.
    PERFORM jobq._check_lease_args(progress.id, progress.lease_token);
    SELECT j.queue, j.lease_token IS NOT DISTINCT FROM progress.lease_token INTO v_queue, v_held
    FROM jobq._job AS j
    WHERE j.id = progress.id;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    v_cap := (jobq._settings(v_queue)).max_payload_bytes;
    IF pg_column_size(progress.progress) > v_cap THEN
        RAISE EXCEPTION 'jobq: progress is % bytes, over the queue''s cap of % bytes',
                pg_column_size(progress.progress), v_cap
            USING ERRCODE = 'JQ003',
                  HINT = 'Report a small value (a count, a percentage, a stage name); keep large data in a table.';
    END IF;
    IF NOT v_held THEN
        RETURN false;
    END IF;
    UPDATE jobq._job AS j
    SET progress = progress.progress
    WHERE j.id = progress.id AND j.lease_token = progress.lease_token;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION jobq.progress(bigint, uuid, jsonb) IS
    'Stores the progress (a small JSON value) of a job held under lease_token; false when the lease was lost.';

CREATE FUNCTION jobq.release(id bigint, lease_token uuid) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_queue text;
BEGIN
    -- Hand a claimed job back untouched (a worker shutting down with jobs it
    -- never started): ready again at its old run_at, the attempt not spent.
    -- False when the lease was lost.
    PERFORM jobq._check_lease_args(release.id, release.lease_token);
    UPDATE jobq._job AS j
    SET status = 'ready',
        parked = false,
        attempts = greatest(j.attempts - 1, 0),
        lease_token = NULL,
        lease_expires_at = NULL,
        heartbeat_at = NULL
    WHERE j.id = release.id AND j.lease_token = release.lease_token
    RETURNING j.queue INTO v_queue;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('jobq', v_queue);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.release(bigint, uuid) IS
    'Returns a claimed job to the queue without spending an attempt; false when the lease was lost.';

CREATE FUNCTION jobq.snooze(id bigint, lease_token uuid, run_at timestamptz) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_queue text;
BEGIN
    -- A worker reschedules the job it holds to run_at, without spending an
    -- attempt (not a failure: e.g. "the report is not ready yet").
    -- False when the lease was lost.
    PERFORM jobq._check_lease_args(snooze.id, snooze.lease_token);
    PERFORM jobq._check_time(snooze.run_at, 'run_at');
    UPDATE jobq._job AS j
    SET status = 'ready',
        parked = false,
        run_at = snooze.run_at,
        attempts = greatest(j.attempts - 1, 0),
        lease_token = NULL,
        lease_expires_at = NULL,
        heartbeat_at = NULL
    WHERE j.id = snooze.id AND j.lease_token = snooze.lease_token
    RETURNING j.queue INTO v_queue;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    -- A freed slot or group, or a run_at already due: let workers look.
    PERFORM pg_notify('jobq', v_queue);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.snooze(bigint, uuid, timestamptz) IS
    'Reschedules a held job to run_at without spending an attempt; false when the lease was lost.';

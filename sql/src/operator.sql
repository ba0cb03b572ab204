---------------------------------------------------------------------------
-- 7. operator API
---------------------------------------------------------------------------

CREATE FUNCTION jobq.retry(id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job jobq._job_archive;
    v_queue text;
    v_waits boolean;
BEGIN
    -- Run a job again now: a dead or cancelled job comes back with a fresh
    -- attempt budget, and the descendants its failure cancelled wait for it
    -- again; a scheduled or backing-off job runs now. A job with parents
    -- goes through its gate again: ready when they have completed, waiting
    -- for those live again, or cancelled again at once (returning false)
    -- when one is dead or cancelled and its on_parent_failure is 'cancel':
    -- retry that one. False for waiting, running, completed and unknown jobs.
    IF retry.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass a job id.';
    END IF;

    UPDATE jobq._job AS j SET run_at = now()
    WHERE j.id = retry.id AND j.status = 'ready'
    RETURNING j.queue INTO v_queue;
    IF FOUND THEN
        PERFORM pg_notify('jobq', v_queue);
        RETURN true;
    END IF;

    SELECT * INTO v_job FROM jobq._job_archive AS a
    WHERE a.id = retry.id AND a.status IN ('dead', 'cancelled')
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_waits := EXISTS (SELECT FROM jobq._job_wait AS w WHERE w.job_id = v_job.id);
    BEGIN
        INSERT INTO jobq._job (id, queue, payload, priority, run_at, attempts, max_attempts,
                               job_key, last_error, created_at, group_key, timeout, has_children, has_parents,
                               status, parked, meta, fair_key)
        VALUES (v_job.id, v_job.queue, v_job.payload, v_job.priority, now(), 0, v_job.max_attempts,
                v_job.job_key, v_job.last_error, v_job.created_at, v_job.group_key, v_job.timeout,
                EXISTS (SELECT FROM jobq._job_dep AS d WHERE d.parent_id = v_job.id),
                EXISTS (SELECT FROM jobq._job_dep AS d WHERE d.child_id = v_job.id),
                CASE WHEN v_waits THEN 'waiting' ELSE 'ready' END, v_waits, v_job.meta,
                coalesce(v_job.fair_key, (SELECT '' FROM jobq._queue AS q WHERE q.queue = v_job.queue AND q.fair)));
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'jobq: job % cannot be retried: job_key % is held by an active job',
                v_job.id, pg_catalog.quote_literal(v_job.job_key)
            USING ERRCODE = 'JQ013',
                  HINT = 'Wait for the active job to finish, or cancel it with jobq.cancel(), then retry.';
    END;
    DELETE FROM jobq._job_archive AS a WHERE a.id = v_job.id;
    IF v_waits THEN
        -- Through its gate again: released, waiting, or cancelled at once.
        PERFORM jobq._gate_recount(ARRAY[v_job.id]);
        PERFORM jobq._settle(ARRAY[v_job.id]);
        IF NOT EXISTS (SELECT FROM jobq._job AS j WHERE j.id = v_job.id) THEN
            RAISE NOTICE 'jobq: job % is cancelled again: % did not complete; retry that job instead',
                v_job.id, (SELECT 'ancestor job ' || a.cancelled_by FROM jobq._job_archive AS a WHERE a.id = v_job.id);
            RETURN false;
        END IF;
    ELSE
        PERFORM pg_notify('jobq', v_job.queue);
    END IF;
    PERFORM jobq._restore_descendants(v_job.id);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.retry(bigint) IS
    'Runs a dead, cancelled or scheduled job again now (fresh attempts for dead/cancelled, whose cancelled descendants wait again; one cancelled while waiting waits again); false for waiting, running, completed or unknown ids.';

CREATE FUNCTION jobq.retry_dead(queue text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
-- The argument is named queue, like the column in ON CONFLICT (queue, job_key)
-- below: resolve unqualified names to columns (the argument is always
-- written retry_dead.queue).
#variable_conflict use_column
DECLARE
    v_moved bigint[];
    v_gated bigint[];
    v_count integer;
    v_parent bigint;
BEGIN
    -- Bring every dead job of a queue back with a fresh attempt budget (one
    -- with parents through its gate again, as jobq.retry does), and the
    -- descendants their deaths cancelled back to waiting. Jobs whose
    -- job_key is held by an active job stay dead (see NOTICE).
    PERFORM jobq._check_queue(retry_dead.queue, 'queue');
    WITH dead AS (
        SELECT a.* FROM jobq._job_archive AS a
        WHERE a.queue = retry_dead.queue AND a.status = 'dead'
        ORDER BY a.id
        FOR UPDATE SKIP LOCKED
    ), moved AS (
        INSERT INTO jobq._job (id, queue, payload, priority, run_at, attempts, max_attempts,
                               job_key, last_error, created_at, group_key, timeout, has_children, has_parents,
                               status, parked, meta, fair_key)
        SELECT d.id, d.queue, d.payload, d.priority, now(), 0, d.max_attempts,
               d.job_key, d.last_error, d.created_at, d.group_key, d.timeout,
               EXISTS (SELECT FROM jobq._job_dep AS e WHERE e.parent_id = d.id),
               EXISTS (SELECT FROM jobq._job_dep AS e WHERE e.child_id = d.id),
               CASE WHEN w.job_id IS NULL THEN 'ready' ELSE 'waiting' END, w.job_id IS NOT NULL, d.meta,
               coalesce(d.fair_key, (SELECT '' FROM jobq._queue AS q WHERE q.queue = d.queue AND q.fair))
        FROM dead AS d
        LEFT JOIN jobq._job_wait AS w ON w.job_id = d.id
        ORDER BY d.id
        ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
        RETURNING id, has_children, status
    ), removed AS (
        DELETE FROM jobq._job_archive AS a USING moved AS m WHERE a.id = m.id
        RETURNING a.id, m.has_children, m.status
    )
    SELECT coalesce(array_agg(r.id ORDER BY r.id) FILTER (WHERE r.has_children), '{}'),
           coalesce(array_agg(r.id ORDER BY r.id) FILTER (WHERE r.status = 'waiting'), '{}'),
           count(*)
    INTO v_moved, v_gated, v_count
    FROM removed AS r;
    IF v_count > 0 THEN
        PERFORM pg_notify('jobq', retry_dead.queue);
    END IF;
    IF cardinality(v_gated) > 0 THEN
        -- Jobs with parents go through their gates again (all of them
        -- dead, so their parents finished: mostly released at once).
        PERFORM jobq._gate_recount(v_gated);
        PERFORM jobq._finish_dependents(jobq._settle(v_gated), 'cancelled');
    END IF;
    FOREACH v_parent IN ARRAY v_moved LOOP
        CONTINUE WHEN NOT EXISTS (SELECT FROM jobq._job AS j WHERE j.id = v_parent);
        PERFORM jobq._restore_descendants(v_parent);
    END LOOP;
    IF EXISTS (SELECT FROM jobq._job_archive AS a WHERE a.queue = retry_dead.queue AND a.status = 'dead') THEN
        RAISE NOTICE 'jobq: some dead jobs of queue % stay dead: their job_key is held by an active job',
            pg_catalog.quote_literal(retry_dead.queue);
    END IF;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION jobq.retry_dead(text) IS
    'Brings every dead job of a queue back with a fresh attempt budget (and the descendants their deaths cancelled); returns how many.';

CREATE FUNCTION jobq.run_now(id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue text;
BEGIN
    -- Run a scheduled job (ready, run_at in the future) now: its run_at
    -- becomes now() and its queue's workers are woken, as enqueue does.
    -- False for unknown ids and jobs in any other state (ready now, running,
    -- finished): jobq.retry() is for dead and cancelled ones.
    IF run_now.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass the id of a scheduled job.';
    END IF;
    UPDATE jobq._job AS j SET run_at = now()
    WHERE j.id = run_now.id AND j.status = 'ready' AND j.run_at > now()
    RETURNING j.queue INTO v_queue;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('jobq', v_queue);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.run_now(bigint) IS
    'Runs a scheduled job now (run_at = now(), workers woken); false for unknown ids and jobs not scheduled.';

CREATE FUNCTION jobq._notify_cancelled(p_ids bigint[], p_lease_tokens uuid[]) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Tell the workers holding these running jobs that they were cancelled:
    -- NOTIFY jobq_cancel, the payload 'id:lease_token' pairs separated by
    -- spaces, up to 100 per notification (a payload holds 8000 bytes). The
    -- token names the lease, so that only its holder acts on it; it is
    -- worthless once this commits (the lease is over). Sent at commit, like
    -- every NOTIFY; a worker that misses it learns at its next heartbeat.
    PERFORM pg_notify('jobq_cancel', c.pairs)
    FROM (SELECT string_agg(u.id::text || ':' || u.token::text, ' ' ORDER BY u.ord) AS pairs
          FROM unnest(p_ids, p_lease_tokens) WITH ORDINALITY AS u(id, token, ord)
          WHERE u.token IS NOT NULL
          GROUP BY (u.ord - 1) / 100) AS c;
END
$$;
COMMENT ON FUNCTION jobq._notify_cancelled(bigint[], uuid[]) IS
    'Sends NOTIFY jobq_cancel with the id:lease_token pairs of cancelled running jobs (100 per notification).';

CREATE FUNCTION jobq.cancel(id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_token uuid;
    v_done boolean;
BEGIN
    -- Cancel a waiting, ready, scheduled or running job. A running job's
    -- holder is told at once (NOTIFY jobq_cancel at commit, see
    -- jobq._notify_cancelled) and otherwise finds its lease lost at its
    -- next heartbeat; nothing waits for it. Its waiting dependents are
    -- cancelled too (on_parent_failure 'cancel', cancelled_by this job) or
    -- count it as finished ('run'). False for finished and unknown jobs.
    IF cancel.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass a job id.';
    END IF;
    SELECT j.lease_token INTO v_token FROM jobq._job AS j WHERE j.id = cancel.id FOR UPDATE;
    v_done := EXISTS (SELECT FROM jobq._finish(p_ids => ARRAY[cancel.id], p_lease_tokens => NULL,
                                               p_status => 'cancelled', p_error => 'cancelled by ' || session_user));
    IF v_done AND v_token IS NOT NULL THEN
        PERFORM jobq._notify_cancelled(ARRAY[cancel.id], ARRAY[v_token]);
    END IF;
    RETURN v_done;
END
$$;
COMMENT ON FUNCTION jobq.cancel(bigint) IS
    'Cancels a live job (a running job''s holder is notified at commit and loses the lease); false for finished or unknown ids.';

CREATE FUNCTION jobq.cancel_jobs(
    queue text, status text DEFAULT NULL, payload_contains jsonb DEFAULT NULL, meta_contains jsonb DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_ids bigint[];
    v_tokens uuid[];
    v_gone bigint[];
BEGIN
    -- Cancel the live jobs of a queue, as jobq.cancel() does one by one:
    -- every one (status NULL), or those ready now, scheduled for later,
    -- running or waiting for parents; only those whose payload contains
    -- payload_contains (@>) when given, and whose meta contains
    -- meta_contains when that is given. Running jobs' holders are notified
    -- (jobq._notify_cancelled) and lose their lease; dependents follow as
    -- after jobq.cancel(). Returns how many.
    PERFORM jobq._check_queue(cancel_jobs.queue, 'queue');
    IF cancel_jobs.status IS NOT NULL AND cancel_jobs.status NOT IN ('ready', 'scheduled', 'running', 'waiting') THEN
        RAISE EXCEPTION 'jobq: status must be NULL (every live job), ''ready'', ''scheduled'', ''running'' or ''waiting'', got %',
                pg_catalog.quote_literal(pg_catalog.left(cancel_jobs.status, 100))
            USING ERRCODE = 'JQ017', HINT = 'Dead jobs are finished already: remove them with jobq.discard_dead().';
    END IF;
    IF jsonb_typeof(cancel_jobs.payload_contains) <> 'object' THEN
        RAISE EXCEPTION 'jobq: payload_contains must be a JSON object, got %', jsonb_typeof(cancel_jobs.payload_contains)
            USING ERRCODE = 'JQ017', HINT = 'Pass e.g. ''{"customer": 42}''::jsonb: jobs whose payload contains it.';
    END IF;
    IF jsonb_typeof(cancel_jobs.meta_contains) <> 'object' THEN
        RAISE EXCEPTION 'jobq: meta_contains must be a JSON object, got %', jsonb_typeof(cancel_jobs.meta_contains)
            USING ERRCODE = 'JQ017', HINT = 'Pass e.g. ''{"tenant": "acme"}''::jsonb: jobs whose meta contains it.';
    END IF;
    -- Locked in id order (as jobq._finish goes), with the running ones' lease tokens.
    SELECT array_agg(c.id ORDER BY c.id), array_agg(c.lease_token ORDER BY c.id) INTO v_ids, v_tokens
    FROM (SELECT j.id, j.lease_token FROM jobq._job AS j
          WHERE j.queue = cancel_jobs.queue
            AND CASE cancel_jobs.status
                    WHEN 'ready' THEN j.status = 'ready' AND j.run_at <= now()
                    WHEN 'scheduled' THEN j.status = 'ready' AND j.run_at > now()
                    WHEN 'running' THEN j.status = 'running'
                    WHEN 'waiting' THEN j.status = 'waiting'
                    ELSE true END
            AND (cancel_jobs.payload_contains IS NULL OR j.payload @> cancel_jobs.payload_contains)
            AND (cancel_jobs.meta_contains IS NULL OR j.meta @> cancel_jobs.meta_contains)
          ORDER BY j.id
          FOR UPDATE OF j) AS c;
    v_gone := ARRAY(SELECT f.id FROM jobq._finish(p_ids => coalesce(v_ids, '{}'), p_lease_tokens => NULL, p_status => 'cancelled',
                                                  p_error => 'cancelled by ' || session_user) AS f(id));
    IF cardinality(array_remove(v_tokens, NULL)) > 0 THEN
        PERFORM jobq._notify_cancelled(ARRAY(SELECT u.id FROM unnest(v_ids, v_tokens) AS u(id, token)
                                             WHERE u.token IS NOT NULL AND u.id = ANY (v_gone) ORDER BY u.id),
                                       ARRAY(SELECT u.token FROM unnest(v_ids, v_tokens) AS u(id, token)
                                             WHERE u.token IS NOT NULL AND u.id = ANY (v_gone) ORDER BY u.id));
    END IF;
    RETURN cardinality(v_gone);
END
$$;
COMMENT ON FUNCTION jobq.cancel_jobs(text, text, jsonb, jsonb) IS
    'Cancels the live jobs of a queue (optionally only ready, scheduled, running or waiting ones, or those whose payload or meta contains a filter); returns how many (running ones'' holders are notified).';

CREATE FUNCTION jobq.discard_dead(queue text, older_than interval DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_discarded integer;
    v_descendants integer;
BEGIN
    -- Delete the dead jobs of a queue for good (all of them, or those dead
    -- for longer than older_than), with their error history, and the
    -- descendants their deaths cancelled (in any queue; see NOTICE). Returns
    -- how many dead jobs. They cannot be retried afterwards; jobq.stats'
    -- dead_total still counts them.
    PERFORM jobq._check_queue(discard_dead.queue, 'queue');
    IF discard_dead.older_than < interval '0' THEN
        RAISE EXCEPTION 'jobq: older_than must not be negative, got %', discard_dead.older_than
            USING ERRCODE = 'JQ008', HINT = 'Pass e.g. interval ''7 days'', or NULL for every dead job.';
    END IF;
    WITH dead AS (
        SELECT a.id FROM jobq._job_archive AS a
        WHERE a.queue = discard_dead.queue AND a.status = 'dead'
          AND (discard_dead.older_than IS NULL OR a.finished_at < now() - discard_dead.older_than)
    ), gone AS (
        -- With the descendants their deaths cancelled: only a retry of
        -- their root could bring those back.
        DELETE FROM jobq._job_archive AS a
        WHERE a.id IN (SELECT d.id FROM dead AS d)
           OR (a.status = 'cancelled' AND a.cancelled_by IN (SELECT d.id FROM dead AS d))
        RETURNING a.id, a.status
    ), forgotten AS (
        DELETE FROM jobq._job_error AS e USING gone AS g WHERE e.job_id = g.id
    ), unlinked AS (
        DELETE FROM jobq._job_dep AS d USING gone AS g WHERE d.child_id = g.id
    ), ungated AS (
        DELETE FROM jobq._job_wait AS w USING gone AS g WHERE w.job_id = g.id
    )
    SELECT count(*) FILTER (WHERE g.status = 'dead'), count(*) FILTER (WHERE g.status = 'cancelled')
    INTO v_discarded, v_descendants
    FROM gone AS g;
    IF v_descendants > 0 THEN
        RAISE NOTICE 'jobq: % cancelled descendants of the discarded jobs were discarded with them', v_descendants;
    END IF;
    RETURN v_discarded;
END
$$;
COMMENT ON FUNCTION jobq.discard_dead(text, interval) IS
    'Deletes the dead jobs of a queue (those dead longer than older_than when given); returns how many.';

CREATE FUNCTION jobq.prune(n integer DEFAULT 100000) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_pruned integer;
BEGIN
    -- Remove the finished jobs whose retention has passed (with their error
    -- history, the edges to their parents and the gate of one cancelled
    -- while waiting), except a completed job with a live child (its result
    -- stays readable until the child finishes) and a dead or cancelled job
    -- with any child jobq still knows (it must not pass for completed: a
    -- parent jobq forgot counts as completed). The archive's day partitions
    -- go whole once their day has passed (jobq._archive_maintain, which also
    -- creates the days ahead); up to n expired rows of its default partition
    -- are deleted one by one. Then the rate-limit bookkeeping older than any
    -- rate window (1 day) and key completions older than any unique_for (366
    -- days) go, and the counters are folded. Returns how many jobs went.
    PERFORM jobq._check_batch(prune.n, 'n', 10000000);
    WITH old AS (
        SELECT a.id FROM jobq._job_archive_kept AS a
        WHERE a.prune_after < now()
          AND NOT EXISTS (SELECT FROM jobq._job_dep AS d
                          WHERE d.parent_id = a.id
                            AND (a.status <> 'completed' OR EXISTS (SELECT FROM jobq._job AS c WHERE c.id = d.child_id)))
        ORDER BY a.prune_after
        LIMIT prune.n
        FOR UPDATE OF a SKIP LOCKED
    ), gone AS (
        DELETE FROM jobq._job_archive_kept AS a USING old AS o WHERE a.id = o.id
        RETURNING a.id, a.last_error IS NOT NULL AS erred
    ), forgotten AS (
        DELETE FROM jobq._job_error AS e USING gone AS g WHERE e.job_id = g.id AND g.erred
    ), unlinked AS (
        DELETE FROM jobq._job_dep AS d USING gone AS g WHERE d.child_id = g.id
    ), ungated AS (
        DELETE FROM jobq._job_wait AS w USING gone AS g WHERE w.job_id = g.id
    )
    SELECT count(*) INTO v_pruned FROM gone;
    DELETE FROM jobq._rate_start AS r WHERE r.started_at < now() - interval '1 day';
    DELETE FROM jobq._key_done AS k WHERE k.finished_at < now() - interval '366 days';
    PERFORM jobq._fold_counters();
    PERFORM jobq._forget_taken();
    -- Last: dropping a partition holds a lock of the archive until commit.
    RETURN v_pruned + least(jobq._archive_maintain(), 2147483647 - v_pruned);
END
$$;
COMMENT ON FUNCTION jobq.prune(integer) IS
    'Drops the archive''s expired day partitions (creating the days ahead) and deletes up to n expired rows of its default partition; returns how many jobs.';

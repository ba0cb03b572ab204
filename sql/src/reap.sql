CREATE FUNCTION jobq.reap(n integer DEFAULT 10000) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
DECLARE
    v_leased bigint[];
    v_retry bigint[];
    v_dead bigint[];
    v_queues text[];
BEGIN
    -- Return up to n jobs whose lease expired to the queue (ready now), or
    -- dead-letter those whose attempts are used up; each counts as a failed
    -- attempt. Concurrent reapers skip each other's rows, so they never
    -- block or deadlock. The job's previous error is kept after the
    -- lease-expiry note in last_error; the note alone joins its error
    -- history. The ready and waiting jobs are never read, so a reap with
    -- nothing to do costs the same with a backlog of a million: parked
    -- leases are found by their expiry index, leases in place (no index
    -- covers them: claims stay HOT) at the head of their queue's claim order
    -- (jobq._leased_in_place). Leases held for over 10 seconds are parked
    -- (out of the claim index). Also folds the counters and forgets the
    -- take bookkeeping of finished transactions, so they stay small where
    -- pg_cron does not run prune().
    PERFORM jobq._check_batch(reap.n, 'n', 1000000);
    v_leased := ARRAY(SELECT l.id FROM jobq._leased_in_place(clock_timestamp()) AS l);
    SELECT coalesce(array_agg(e.id) FILTER (WHERE e.attempts < e.max_attempts), '{}'),
           coalesce(array_agg(e.id) FILTER (WHERE e.attempts >= e.max_attempts), '{}')
    INTO v_retry, v_dead
    FROM (
        SELECT j.id, j.attempts, j.max_attempts
        FROM jobq._job AS j
        WHERE j.id = ANY (v_leased || ARRAY(SELECT p.id FROM jobq._job AS p
                                            WHERE p.parked_expires_at < now()
                                            ORDER BY p.parked_expires_at
                                            LIMIT reap.n))
          AND j.status = 'running' AND j.lease_expires_at < now()
        ORDER BY j.lease_expires_at
        LIMIT reap.n
        FOR UPDATE SKIP LOCKED
    ) AS e;

    INSERT INTO jobq._counter (queue, bucket, failed)
    SELECT j.queue, date_trunc('minute', now()), count(*)
    FROM jobq._job AS j
    WHERE j.id = ANY (v_retry || v_dead)
    GROUP BY j.queue;
    -- Each expired lease is a failed attempt in the job's error history.
    IF cardinality(v_retry) + cardinality(v_dead) > 0 THEN
        PERFORM jobq._record_errors(array_agg(j.id), array_agg(j.attempts),
                                    array_agg(jobq._reap_note(j.lease_expires_at, j.worker, NULL)
                                              || CASE WHEN j.id = ANY (v_dead) THEN E'\nno attempts left' ELSE '' END),
                                    array_agg(j.worker))
        FROM jobq._job AS j
        WHERE j.id = ANY (v_retry || v_dead);
    END IF;

    WITH requeued AS (
        UPDATE jobq._job AS j
        SET status = 'ready',
            parked = false,
            run_at = now(),
            lease_token = NULL,
            lease_expires_at = NULL,
            heartbeat_at = NULL,
            last_error = jobq._reap_note(j.lease_expires_at, j.worker, j.last_error)
        WHERE j.id = ANY (v_retry)
        RETURNING j.queue
    )
    SELECT array_agg(DISTINCT r.queue) INTO v_queues FROM requeued AS r;
    -- Wake the workers of the queues that got jobs back.
    PERFORM pg_notify('jobq', q.queue) FROM unnest(v_queues) AS q(queue);

    IF cardinality(v_dead) > 0 THEN
        UPDATE jobq._job AS j
        SET last_error = jobq._reap_note(j.lease_expires_at, j.worker, j.last_error) || E'\nno attempts left'
        WHERE j.id = ANY (v_dead);
        PERFORM jobq._finish(p_ids => v_dead, p_lease_tokens => NULL, p_status => 'dead', p_error => NULL);
    END IF;
    -- Leases in place held for over 10 seconds (a worker that never
    -- heart-beats) leave the claim index too, so claims do not step over
    -- them. Rows busy elsewhere are skipped, never waited for. The rows are
    -- picked once (a materialized CTE) and joined by id: as "id IN (SELECT
    -- ... FOR UPDATE)" the locking scan could become the inner side of a
    -- nested loop, run again for every live job.
    WITH stale AS MATERIALIZED (
        SELECT l.id FROM jobq._job AS l
        WHERE l.id = ANY (v_leased) AND l.status = 'running' AND NOT l.parked
          AND l.started_at < now() - interval '10 seconds'
        FOR UPDATE SKIP LOCKED
    )
    UPDATE jobq._job AS j SET parked = true
    FROM stale AS s
    WHERE j.id = s.id;
    PERFORM jobq._fold_counters();
    PERFORM jobq._forget_taken();
    RETURN cardinality(v_retry) + cardinality(v_dead);
END
$$;
COMMENT ON FUNCTION jobq.reap(integer) IS
    'Returns up to n jobs with an expired lease to the queue (or to dead letter when out of attempts); returns how many.';

CREATE FUNCTION jobq.next_run_at(queues text[]) RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_next timestamptz;
BEGIN
    -- The earliest future run_at among the jobs of these queues scheduled
    -- for later (retries in backoff, delayed jobs; NULL when none): how long
    -- an idle worker may sleep before it claims again. A loose index scan over the
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
    -- Only a role that may claim a queue learns when its next job falls due
    -- (as claim: JQ020 for a queue with consume grants the caller lacks).
    PERFORM jobq._check_queue_privilege(next_run_at.queues, 'consume')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g, unnest(next_run_at.queues) AS q(name)
                      WHERE g.privilege = 'consume' AND q.name LIKE g.queue_like);
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
    'The next scheduled time in these queues: the earliest future run_at (a retry in backoff, a delayed job; NULL if none), when an idle worker should claim again.';

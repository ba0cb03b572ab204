---------------------------------------------------------------------------
-- 6. worker API
---------------------------------------------------------------------------

CREATE FUNCTION jobq._claim(p_queues text[], p_n integer, p_worker text, p_lease interval)
RETURNS SETOF jobq.job
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_plain record;
    v_ids bigint[];
    v_leases interval[];
    v_parked boolean[];
    v_park text[];
    v_starts timestamptz[];   -- jobq._pick's start times (NULL on the plain path: v_now)
    v_now timestamptz;
    v_fair jobq._queue;
    v_calm text[];   -- the session's last calm verdict of the crowd probe (below)
    -- How long that verdict holds (seconds).
    c_calm_for CONSTANT double precision := 0.05;
    v_pile text[];   -- the pile the session's last claim of these queues stepped over (below)
    v_fetched bigint;
    -- A claim of more than 10 jobs parks behind a crowd only when its last
    -- claim read more than this many rows of the claim index per job.
    c_pile CONSTANT integer := 20;
BEGIN
    -- What both claim() overloads do once their arguments are checked:
    -- lease up to p_n ready jobs across p_queues, most urgent first
    -- (priority, run_at, id), each under its queue's lease unless given;
    -- paused queues, concurrency and rate limits and serial groups honoured;
    -- fair queues round-robin across their fair keys.
    -- No sort and no bitmap scan (the SET clauses): whatever the table's
    -- statistics say (never analyzed, analyzed while empty), the candidates
    -- come from the claim index in its order, and reading stops after p_n.
    -- First which jobs (locked), under which lease, parked or not; then the
    -- one lease UPDATE.
    v_now := clock_timestamp();
    v_plain := jobq._plain_leases(p_queues, p_lease);
    IF v_plain.names IS NOT NULL THEN
        -- Plain queues: one statement picks (an index scan per queue). The
        -- lease writes no indexed column: a HOT update on the row's own
        -- page; the row stays in the claim index, and claims skip it by its
        -- status. On a queue crowded with older leases
        -- (jobq._crowded_queues) the lease parks the row instead, so that
        -- leases do not pile up ahead of every later claim.
        -- A claim of more than 10 jobs parks behind such a crowd only when
        -- the pile is large for its size. A claim steps over every lease in
        -- place ahead of it, about 0.75 us each, so a pile costs each job
        -- claimed its size divided by the claim's; parking costs each
        -- lease an update that is not HOT (new entries in the primary key
        -- and both parked indexes), about as much as stepping over 20. How
        -- large the pile is, the age of its head does not say (16 workers
        -- holding 100 leases each for 90 ms make a pile of 1,600; 1,000
        -- consumers behind PgBouncer, 10 each, about 6,500 when measured),
        -- so the claim measures it: the rows its scan of the claim index
        -- read (pg_stat_get_xact_tuples_fetched: the leases in place it
        -- stepped over, and its own), kept in the session
        -- (jobq.claim_pile: which queues, rows per job). A later claim of
        -- the same queues behind a crowd parks when that was over c_pile
        -- rows per job, or when the session has not measured yet; claims
        -- of up to 10 jobs park behind every crowd, as in 0.8.0. Like
        -- jobq.calm_queues, the setting is a hint.
        -- The probe walks the same dead index entries (completed jobs,
        -- until vacuum) as the claim's own scan: after a drain of a
        -- backlog, hundreds of pages. So a calm verdict is remembered in
        -- the session (jobq.calm_queues: when, in which transaction, which
        -- queues) and holds for this session's claims of the same queues
        -- in later transactions for c_calm_for: a queue crowds only with
        -- leases over 50 ms old, and a verdict that old answers as the
        -- probe would have that much earlier. A crowded verdict is never
        -- remembered. The setting is a hint: a forged one at most makes a
        -- session's claims lease in place.
        v_calm := string_to_array(current_setting('jobq.calm_queues', true), '|');
        IF cardinality(v_calm) = 3 AND v_calm[3] = array_to_string(v_plain.names, ' ')
           AND v_calm[2] <> extract(epoch FROM now())::text
           AND extract(epoch FROM v_now) - v_calm[1]::double precision BETWEEN 0 AND c_calm_for THEN
            v_park := '{}';
        ELSE
            v_park := jobq._crowded_queues(p_names => v_plain.names, p_now => v_now);
            PERFORM set_config('jobq.calm_queues',
                               CASE WHEN cardinality(v_park) = 0
                                    THEN concat_ws('|', extract(epoch FROM v_now), extract(epoch FROM now()),
                                                   array_to_string(v_plain.names, ' '))
                                    ELSE '' END,
                               false);
        END IF;
        IF p_n > 10 THEN
            v_pile := string_to_array(current_setting('jobq.claim_pile', true), '|');
            IF cardinality(v_park) > 0 AND cardinality(v_pile) = 2 AND v_pile[1] = array_to_string(v_plain.names, ' ')
               AND v_pile[2] ~ '^[0-9]{1,9}$' AND v_pile[2]::integer <= c_pile THEN
                v_park := '{}';
            END IF;
            v_fetched := pg_stat_get_xact_tuples_fetched('jobq._job_claim_idx'::regclass);
        END IF;
        -- Pick, lock and lease in one statement: the candidates of each
        -- queue from the claim index (SKIP LOCKED), the most urgent p_n of
        -- them as an array, then the lease UPDATE of those rows, joined
        -- from the array's unnest (a function scan: a nested loop over the
        -- primary key, never a hash join over a scan of the backlog).
        RETURN QUERY
        WITH leased AS (
            UPDATE jobq._job AS j
            SET status = 'running',
                parked = j.queue = ANY (v_park),
                attempts = j.attempts + 1,
                lease_token = gen_random_uuid(),
                lease_expires_at = v_now + v_plain.leases[array_position(v_plain.names, j.queue)],
                worker = p_worker,
                started_at = v_now
            FROM unnest(ARRAY(
                     SELECT c.id
                     FROM unnest(v_plain.names) AS q(name),
                          LATERAL (SELECT p.id, p.priority, p.run_at
                                   FROM jobq._job AS p
                                   WHERE p.queue = q.name AND NOT p.parked AND p.status = 'ready'
                                     AND p.run_at <= now() AND p.group_key IS NULL
                                   ORDER BY p.priority, p.run_at, p.id
                                   LIMIT p_n
                                   FOR UPDATE SKIP LOCKED) AS c
                     ORDER BY c.priority, c.run_at, c.id
                     LIMIT p_n)) AS p(id)
            WHERE j.id = p.id
            RETURNING j.*
        )
        SELECT l.id, l.queue, l.payload, l.priority::integer, l.attempts, l.max_attempts, l.run_at,
               l.created_at, l.lease_token, l.lease_expires_at, l.worker, l.job_key, l.last_error, l.group_key,
               l.timeout, l.progress, l.meta
        FROM leased AS l
        ORDER BY l.priority, l.run_at, l.id;
        IF p_n > 10 THEN
            PERFORM set_config('jobq.claim_pile',
                               concat_ws('|', array_to_string(v_plain.names, ' '),
                                         (pg_stat_get_xact_tuples_fetched('jobq._job_claim_idx'::regclass)
                                          - v_fetched) / p_n),
                               false);
        END IF;
        RETURN;
    ELSE
        IF cardinality(p_queues) = 1 THEN
            v_fair := jobq._settings(p_queues[1]);
        END IF;
        IF v_fair.fair AND NOT v_fair.paused AND v_fair.concurrency IS NULL AND v_fair.rate_limit IS NULL THEN
            -- One fair queue without queue limits: round-robin across its
            -- fair keys (jobq._fair_pick), straight. Its leases stay in
            -- place (a HOT update, as on the plain path) where reap and the
            -- live counts find them, near the head of the claim index
            -- (jobq._fair_window); the others are parked, and all of them
            -- with per_key_concurrency (running jobs per key are counted by
            -- the parked index).
            SELECT f.ids, f.parked INTO v_ids, v_parked
            FROM jobq._fair_pick(p_queue => p_queues[1], p_n => p_n, p_settings => v_fair,
                                 p_place => v_fair.per_key_concurrency IS NULL) AS f;
            v_leases := array_fill(coalesce(p_lease, v_fair.lease), ARRAY[cardinality(v_ids)]);
        ELSE
            -- Limits, pause, serial groups or fair queues among others:
            -- jobq._pick counts and locks. These leases are parked at once:
            -- limited queues count their running jobs by the parked index.
            -- jobq._pick also gives each job's start time (read after its
            -- queue's lock: rate limits count it).
            SELECT array_agg(p.id), array_agg(p.lease), array_agg(true), array_agg(p.started_at)
            INTO v_ids, v_leases, v_parked, v_starts
            FROM jobq._pick(p_queues => p_queues, p_n => p_n, p_lease => p_lease) AS p;
        END IF;
    END IF;
    RETURN QUERY
    WITH leased AS (
        UPDATE jobq._job AS j
        SET status = 'running',
            parked = p.parked,
            attempts = j.attempts + 1,
            lease_token = gen_random_uuid(),
            lease_expires_at = coalesce(p.started_at, v_now) + p.lease,
            worker = p_worker,
            started_at = coalesce(p.started_at, v_now)
        FROM unnest(v_ids, v_leases, v_parked, v_starts) AS p(id, lease, parked, started_at)
        WHERE j.id = p.id
        RETURNING j.*
    )
    SELECT l.id, l.queue, l.payload, l.priority::integer, l.attempts, l.max_attempts, l.run_at,
           l.created_at, l.lease_token, l.lease_expires_at, l.worker, l.job_key, l.last_error, l.group_key,
           l.timeout, l.progress, l.meta
    FROM leased AS l
    ORDER BY l.priority, l.run_at, l.id;
END
$$;
COMMENT ON FUNCTION jobq._claim(text[], integer, text, interval) IS
    'The claim itself (arguments already checked): fast path for plain queues, jobq._pick otherwise.';

CREATE FUNCTION jobq.claim(
    queue text,
    n bigint DEFAULT 1,
    worker text DEFAULT NULL,
    lease interval DEFAULT NULL
) RETURNS SETOF jobq.job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
BEGIN
    -- Lease up to n ready jobs of one queue: priority, then run_at, then id.
    IF NOT jobq._claim_args_ok(ARRAY[claim.queue], claim.n, claim.lease, claim.worker) THEN
        IF claim.queue LIKE '{%}' THEN
            -- An array literal that came untyped (node-postgres sends every
            -- parameter untyped, and PostgreSQL resolves an untyped argument
            -- to this text overload). No queue name has a brace: claim across
            -- the queues it lists.
            RETURN QUERY SELECT * FROM jobq.claim(jobq._queue_list(claim.queue), claim.n, claim.worker, claim.lease);
            RETURN;
        END IF;
        PERFORM jobq._check_queue(claim.queue, 'queue');
        PERFORM jobq._check_worker(claim.worker);
        PERFORM jobq._check_claim_args(ARRAY[claim.queue], claim.n, claim.lease);
    END IF;
    PERFORM jobq._check_queue_privilege(ARRAY[claim.queue], 'consume')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'consume' AND claim.queue LIKE g.queue_like);
    RETURN QUERY SELECT * FROM jobq._claim(ARRAY[claim.queue], claim.n::integer, claim.worker, claim.lease);
END
$$;
COMMENT ON FUNCTION jobq.claim(text, bigint, text, interval) IS
    'Leases up to n ready jobs of a queue (FOR UPDATE SKIP LOCKED), most urgent first; ''{a,b}'' claims across queues a and b.';

CREATE FUNCTION jobq.claim(
    queues text[],
    n bigint DEFAULT 1,
    worker text DEFAULT NULL,
    lease interval DEFAULT NULL
) RETURNS SETOF jobq.job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
BEGIN
    -- Lease up to n ready jobs across several queues, most urgent first
    -- (priority, run_at, id), each under its queue's lease unless given;
    -- paused queues, concurrency and rate limits and serial groups honoured.
    IF NOT jobq._claim_args_ok(claim.queues, claim.n, claim.lease, claim.worker) THEN
        PERFORM jobq._check_worker(claim.worker);
        PERFORM jobq._check_claim_args(claim.queues, claim.n, claim.lease);
    END IF;
    PERFORM jobq._check_queue_privilege(claim.queues, 'consume')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g, unnest(claim.queues) AS q(name)
                      WHERE g.privilege = 'consume' AND q.name LIKE g.queue_like);
    RETURN QUERY SELECT * FROM jobq._claim(claim.queues, claim.n::integer, claim.worker, claim.lease);
END
$$;
COMMENT ON FUNCTION jobq.claim(text[], bigint, text, interval) IS
    'Leases up to n ready jobs across several queues (FOR UPDATE SKIP LOCKED), most urgent first.';

CREATE FUNCTION jobq._lock_ready(p_queue text, p_n integer) RETURNS SETOF jobq.job
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    -- Row-lock up to n ready jobs of one queue for work inside the caller's
    -- transaction (take, hold), most urgent first, as that transaction sees
    -- them: no lease, this attempt counted. One index scan on a plain queue
    -- (in the claim index's order, whatever the statistics: no sort, no
    -- bitmap scan), the full path (jobq._pick) otherwise; then the jobs hold
    -- their queue's concurrency slots until the transaction ends. Arguments
    -- are already validated.
    IF (jobq._plain_leases(ARRAY[p_queue], NULL)).names IS NOT NULL THEN
        RETURN QUERY
        SELECT j.id, j.queue, j.payload, j.priority::integer, j.attempts + 1, j.max_attempts, j.run_at,
               j.created_at, NULL::uuid, NULL::timestamptz, session_user::text, j.job_key, j.last_error,
               j.group_key, j.timeout, j.progress, j.meta
        FROM jobq._job AS j
        WHERE j.queue = p_queue AND NOT j.parked AND j.status = 'ready' AND j.run_at <= now()
          AND j.group_key IS NULL
        ORDER BY j.priority, j.run_at, j.id
        LIMIT p_n
        FOR UPDATE SKIP LOCKED;
        RETURN;
    END IF;
    SELECT array_agg(p.id) INTO v_ids FROM jobq._pick(ARRAY[p_queue], p_n, NULL) AS p;
    IF cardinality(v_ids) > 0 THEN
        INSERT INTO jobq._taken (queue, n) VALUES (p_queue, cardinality(v_ids));
    END IF;
    RETURN QUERY
    SELECT j.id, j.queue, j.payload, j.priority::integer, j.attempts + 1, j.max_attempts, j.run_at,
           j.created_at, NULL::uuid, NULL::timestamptz, session_user::text, j.job_key, j.last_error, j.group_key,
           j.timeout, j.progress, j.meta
    FROM jobq._job AS j
    WHERE j.id = ANY (v_ids)
    ORDER BY j.priority, j.run_at, j.id;
END
$$;
COMMENT ON FUNCTION jobq._lock_ready(text, integer) IS
    'Row-locks up to n ready jobs of a queue for in-transaction work (take, hold); limits and groups honoured.';

CREATE FUNCTION jobq.take(queue text, n bigint DEFAULT 1) RETURNS SETOF jobq.job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
BEGIN
    -- Exactly-once processing for work that only touches this database:
    -- remove up to n ready jobs inside the caller's transaction, without a
    -- lease. Commit and they are done (counted as completed) together with
    -- the caller's writes; roll back, or crash, and they are back,
    -- untouched. (To fail jobs one by one, use hold.) The rows stay locked
    -- (and, for limited queues, the queue's slots held) until then.
    IF NOT jobq._claim_args_ok(ARRAY[take.queue], take.n, NULL, NULL) THEN
        PERFORM jobq._check_queue(take.queue, 'queue');
        PERFORM jobq._check_claim_args(ARRAY[take.queue], take.n, NULL);
    END IF;
    PERFORM jobq._check_queue_privilege(ARRAY[take.queue], 'consume')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'consume' AND take.queue LIKE g.queue_like);
    RETURN QUERY
    WITH held AS (
        SELECT * FROM jobq._lock_ready(take.queue, take.n::integer)
    ), done AS (
        SELECT count(*) FROM jobq._finish(p_ids => ARRAY(SELECT h.id FROM held AS h), p_lease_tokens => NULL,
                                               p_status => 'completed', p_error => NULL, p_held => true)
    )
    SELECT h.* FROM held AS h, done ORDER BY h.priority, h.run_at, h.id;
END
$$;
COMMENT ON FUNCTION jobq.take(text, bigint) IS
    'Removes up to n ready jobs inside the caller''s transaction: done on commit, back untouched on rollback.';

CREATE FUNCTION jobq.hold(queue text, n bigint DEFAULT 1) RETURNS SETOF jobq.job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
BEGIN
    -- In-transaction processing, job by job: row-lock up to n ready jobs for
    -- the caller's transaction, writing nothing (no lease). Acknowledge each
    -- before the commit with jobq.complete_held() or jobq.fail_held(); a job
    -- neither acknowledged, and every job of a transaction that rolls back
    -- or crashes, stays ready, untouched. attempts shows this attempt.
    IF NOT jobq._claim_args_ok(ARRAY[hold.queue], hold.n, NULL, NULL) THEN
        PERFORM jobq._check_queue(hold.queue, 'queue');
        PERFORM jobq._check_claim_args(ARRAY[hold.queue], hold.n, NULL);
    END IF;
    PERFORM jobq._check_queue_privilege(ARRAY[hold.queue], 'consume')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'consume' AND hold.queue LIKE g.queue_like);
    RETURN QUERY SELECT * FROM jobq._lock_ready(hold.queue, hold.n::integer);
END
$$;
COMMENT ON FUNCTION jobq.hold(text, bigint) IS
    'Row-locks up to n ready jobs for the caller''s transaction (no lease); acknowledge with complete_held / fail_held.';

-- jobq 0.11.0 → 0.12.0. One line per change:
--   claim of a rate-limited queue (jobq._pick, jobq._queue_slots): the time its starts are counted,
--     recorded and stamped as started_at is read after the queue's lock (it was read when the claim
--     began), so a claim that stalls before the lock no longer counts a window whose starts a newer
--     claim had deleted, and over-admits no more.
--   next_run_at: JQ020 for a queue with consume grants the caller lacks (as claim), so that only who may
--     claim a queue learns when its next job falls due.
--   enqueue, enqueue_many: on_duplicate ('keep', the default; 'replace': debounce; 'replace_payload':
--     throttle) for keyed jobs (issue 28 §3); new helpers _check_on_duplicate, _replace_job

-- Applied by ALTER EXTENSION jobq UPDATE TO '0.12.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.11.0 is installed.

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
    IF jobq.version() <> '0.11.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.11.0 to 0.12.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.12.0');

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '0.12.0'::text
$$;
COMMENT ON FUNCTION jobq.version() IS 'Installed jobq version (semver text).';

-- The rate limit's clock after the queue's lock: new signatures (no p_now; the start time returned).
DROP FUNCTION jobq._pick(text[], integer, interval, timestamptz);
DROP FUNCTION jobq._queue_slots(text, integer, timestamptz);
CREATE FUNCTION jobq._queue_slots(p_queue text, p_n integer,
                                  OUT slots integer, OUT lease interval, OUT rated boolean,
                                  OUT counted_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_settings jobq._queue := jobq._settings(p_queue);
BEGIN
    -- How many of p_n jobs jobq._pick may start now in queue p_queue
    -- (slots), under which lease setting, whether the queue is rate limited
    -- (rated: the caller records the starts), and the time they start at
    -- (counted_at: the clock read after the queue's lock, so that a claim
    -- counts and records its starts at a time no earlier than any start a
    -- claim before it recorded and no later than any after it; a time read
    -- before the lock let a claim that stalled in between count a window
    -- whose starts a newer claim had already deleted). None when
    -- paused, or when another claimer is counting this queue's slots: a
    -- limited queue's slots are counted under a row lock on its own
    -- jobq._queue row, taken with SKIP LOCKED (a busy queue yields no jobs,
    -- never a wait, and a crashed claimer's lock vanishes with its
    -- transaction; only jobq's roles can lock that row, where any role can
    -- take an advisory lock); each count runs in a statement that starts
    -- after the lock, so it sees every claim that committed before. Jobs
    -- taken earlier in this transaction (take, hold) count as running.
    slots := p_n;
    lease := v_settings.lease;
    rated := v_settings.rate_limit IS NOT NULL;
    IF v_settings.paused THEN
        slots := 0;
    ELSIF v_settings.concurrency IS NOT NULL OR v_settings.rate_limit IS NOT NULL THEN
        PERFORM FROM jobq._queue AS q WHERE q.queue = p_queue FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            slots := 0;   -- another claimer is counting this queue's slots right now
        END IF;
    END IF;
    counted_at := clock_timestamp();
    IF slots > 0 AND v_settings.concurrency IS NOT NULL THEN
        SELECT least(slots, v_settings.concurrency - count(*) - jobq._taken_in_transaction(p_queue))::integer
        INTO slots
        FROM jobq._job AS j
        WHERE j.queue = p_queue AND j.parked AND j.status = 'running';
    END IF;
    IF slots > 0 AND v_settings.rate_limit IS NOT NULL THEN
        DELETE FROM jobq._rate_start AS r
        WHERE r.queue = p_queue AND r.started_at <= counted_at - v_settings.rate_interval;
        SELECT least(slots, v_settings.rate_limit - coalesce(sum(r.n), 0))::integer INTO slots
        FROM jobq._rate_start AS r
        WHERE r.queue = p_queue AND r.started_at > counted_at - v_settings.rate_interval;
    ELSE
        rated := false;
    END IF;
    slots := greatest(slots, 0);
END
$$;
COMMENT ON FUNCTION jobq._queue_slots(text, integer) IS
    'How many jobs jobq._pick may start now in a queue (pause, concurrency, rate limit), its lease, whether rate limited, and when they start.';
CREATE FUNCTION jobq._pick(p_queues text[], p_n integer, p_lease interval)
RETURNS TABLE (id bigint, lease interval, started_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_queue text;
    v_slots record;
    v_names text[] := '{}';
    v_starts timestamptz[] := '{}';   -- per queue of v_names: when its jobs start (jobq._queue_slots)
    v_leases interval[] := '{}';
    v_allow integer[] := '{}';
    v_rated text[] := '{}';
    v_ids bigint[];
    v_jobs_queues text[];   -- per job of v_ids: its queue
    v_grouped boolean;
BEGIN
    -- The full claim path. Choose (and row-lock) up to p_n ready jobs across
    -- p_queues, most urgent first, that may start now: the queue is not
    -- paused, has a free concurrency slot and rate budget, and the job heads
    -- its serial group. Each queue's budget: jobq._queue_slots. Group heads
    -- are row-locked (SKIP LOCKED) and re-checked after the locks
    -- (jobq._group_heads_only). A group's order is among its due jobs: a member scheduled for
    -- later that never started does not hold back the members after it (a
    -- retry waiting for its backoff, a snoozed or a waiting member does),
    -- and one that goes ahead also locks the group's oldest member
    -- (jobq._lock_group_head), so that no two members ever run at once. The
    -- jobs this path leases are parked, so the count of a queue's
    -- running jobs is an index scan (waiting jobs are parked too, and
    -- skipped). Returns each job's start time: its queue's, read after
    -- that queue's lock, at which the starts of a rate-limited queue are
    -- counted and recorded; the caller stamps it on the job (started_at),
    -- so that the rate limit holds over the jobs' own start times. Plans pinned as
    -- jobq._claim's (no sort, no bitmap scan of the backlog).
    PERFORM jobq._check_claim_args(p_queues, p_n, p_lease);
    FOR v_queue IN SELECT DISTINCT ON (u.name) u.name FROM unnest(p_queues) WITH ORDINALITY AS u(name, ord)
                   ORDER BY u.name, u.ord LOOP
        v_slots := jobq._queue_slots(p_queue => v_queue, p_n => p_n);
        IF v_slots.rated THEN
            v_rated := v_rated || v_queue;
        END IF;
        v_names := v_names || v_queue;
        v_starts := v_starts || v_slots.counted_at;
        v_leases := v_leases || coalesce(p_lease, v_slots.lease);
        v_allow := v_allow || v_slots.slots;
    END LOOP;

    SELECT c.ids, c.leases, c.queues, c.grouped INTO v_ids, v_leases, v_jobs_queues, v_grouped
    FROM jobq._pick_candidates(p_names => v_names, p_slots => v_allow, p_leases => v_leases, p_n => p_n) AS c;

    IF v_grouped THEN
        SELECT g.ids, g.leases, g.queues INTO v_ids, v_leases, v_jobs_queues
        FROM jobq._group_heads_only(p_ids => v_ids, p_leases => v_leases, p_queues => v_jobs_queues) AS g;
    END IF;

    IF cardinality(v_rated) > 0 THEN
        INSERT INTO jobq._rate_start (queue, started_at, n)
        SELECT r.queue, v_starts[array_position(v_names, r.queue)], count(*)
        FROM unnest(v_jobs_queues) AS r(queue)
        WHERE r.queue = ANY (v_rated)
        GROUP BY r.queue;
    END IF;

    RETURN QUERY
    SELECT u.id, u.lease, v_starts[array_position(v_names, u.queue)]
    FROM unnest(v_ids, v_leases, v_jobs_queues) AS u(id, lease, queue);
END
$$;
COMMENT ON FUNCTION jobq._pick(text[], integer, interval) IS
    'Row-locks up to n ready jobs that may start now (pause, concurrency, rate limit, serial groups honoured).';
CREATE OR REPLACE FUNCTION jobq._claim(p_queues text[], p_n integer, p_worker text, p_lease interval)
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
BEGIN
    -- What both claim() overloads do once their arguments are checked:
    -- lease up to p_n ready jobs across p_queues, most urgent first
    -- (priority, run_at, id), each under its queue's lease unless given;
    -- paused queues, concurrency and rate limits and serial groups honoured.
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
        v_park := jobq._crowded_queues(p_names => v_plain.names, p_now => v_now);
        SELECT array_agg(c.id), array_agg(v_plain.leases[array_position(v_plain.names, c.queue)]),
               array_agg(c.queue = ANY (v_park))
        INTO v_ids, v_leases, v_parked
        FROM (SELECT c.id, c.queue
              FROM unnest(v_plain.names) AS q(name),
                   LATERAL (SELECT p.id, p.queue, p.priority, p.run_at
                            FROM jobq._job AS p
                            WHERE p.queue = q.name AND NOT p.parked AND p.status = 'ready'
                              AND p.run_at <= now() AND p.group_key IS NULL
                            ORDER BY p.priority, p.run_at, p.id
                            LIMIT p_n
                            FOR UPDATE SKIP LOCKED) AS c
              ORDER BY c.priority, c.run_at, c.id
              LIMIT p_n) AS c;
    ELSE
        -- Limits, pause or serial groups: jobq._pick counts and locks. These
        -- leases are parked at once: limited queues count their running jobs
        -- by the parked index.
        -- jobq._pick also gives each job's start time (read after its
        -- queue's lock: rate limits count it).
        SELECT array_agg(p.id), array_agg(p.lease), array_agg(true), array_agg(p.started_at)
        INTO v_ids, v_leases, v_parked, v_starts
        FROM jobq._pick(p_queues => p_queues, p_n => p_n, p_lease => p_lease) AS p;
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
           l.timeout, l.progress
    FROM leased AS l
    ORDER BY l.priority, l.run_at, l.id;
END
$$;
COMMENT ON FUNCTION jobq._claim(text[], integer, text, interval) IS
    'The claim itself (arguments already checked): fast path for plain queues, jobq._pick otherwise.';
CREATE OR REPLACE FUNCTION jobq._lock_ready(p_queue text, p_n integer) RETURNS SETOF jobq.job
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
               j.group_key, j.timeout, j.progress
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
           j.timeout, j.progress
    FROM jobq._job AS j
    WHERE j.id = ANY (v_ids)
    ORDER BY j.priority, j.run_at, j.id;
END
$$;
COMMENT ON FUNCTION jobq._lock_ready(text, integer) IS
    'Row-locks up to n ready jobs of a queue for in-transaction work (take, hold); limits and groups honoured.';
CREATE OR REPLACE FUNCTION jobq.next_run_at(queues text[]) RETURNS timestamptz
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
-- on_duplicate (issue 28): a new trailing parameter, so DROP and CREATE (and the GRANTs below).
DROP FUNCTION jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text);
DROP FUNCTION jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text);
CREATE FUNCTION jobq._check_on_duplicate(p_on_duplicate text, p_keyed boolean, p_key_arg text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ017 unless p_on_duplicate is 'keep', 'replace' or
    -- 'replace_payload', JQ009 when it is not 'keep' and comes without a job
    -- key (p_keyed false: p_key_arg names the missing argument).
    IF p_on_duplicate IS NULL OR p_on_duplicate NOT IN ('keep', 'replace', 'replace_payload') THEN
        RAISE EXCEPTION 'jobq: on_duplicate must be ''keep'', ''replace'' or ''replace_payload'', got %',
                coalesce(pg_catalog.quote_literal(pg_catalog.left(p_on_duplicate, 100)), 'NULL')
            USING ERRCODE = 'JQ017',
                  HINT = '''keep'' (the default) returns the job holding the key; ''replace'' gives it the new '
                         'payload, run_at and priority (debounce); ''replace_payload'' only the payload (throttle).';
    END IF;
    IF p_on_duplicate <> 'keep' AND NOT p_keyed THEN
        RAISE EXCEPTION 'jobq: on_duplicate % needs % (it replaces the job holding that key)',
                pg_catalog.quote_literal(p_on_duplicate), p_key_arg
            USING ERRCODE = 'JQ009',
                  HINT = 'Pass a job key too (job_keys, one per payload, for enqueue_many), e.g. '
                         'job_key => ''reindex:42'', on_duplicate => ''replace''.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_on_duplicate(text, boolean, text) IS
    'Raises JQ017 for an on_duplicate other than keep, replace or replace_payload, JQ009 for replace without a job key.';
CREATE FUNCTION jobq._replace_job(
    p_queue text, p_payload jsonb, p_run_at timestamptz, p_priority integer, p_max_attempts integer,
    p_job_key text, p_group_key text, p_timeout interval, p_unique_for interval, p_waiting boolean,
    p_payload_only boolean
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
    -- or scheduled job holding the key takes the new payload (and, with
    -- 'replace', run_at and priority; its id, attempts, max_attempts,
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
                                    status, parked, has_parents)
        VALUES (p_queue, p_payload, p_run_at, p_priority, p_max_attempts, p_job_key, p_group_key, p_timeout,
                CASE WHEN p_waiting THEN 'waiting' ELSE 'ready' END, p_waiting, p_waiting)
        ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO UPDATE
            SET payload = excluded.payload,
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
COMMENT ON FUNCTION jobq._replace_job(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, boolean, boolean) IS
    'Enqueue with on_duplicate replace/replace_payload: updates the waiting, ready or scheduled job holding the key, else inserts (a running holder hands the key over).';
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
    -- on_duplicate (with job_key): 'keep' returns the holder of the key as
    -- said; 'replace' gives a waiting, ready or scheduled holder the new
    -- payload, run_at and priority (debounce), 'replace_payload' only the
    -- payload (throttle); a running holder is left as it is and hands the
    -- key to a new job (jobq._replace_job).
    IF enqueue.job_key IS NULL AND enqueue.group_key IS NULL AND enqueue.timeout IS NULL
       AND enqueue.unique_for IS NULL AND enqueue.depends_on IS NULL
       AND enqueue.on_parent_failure IS NOT DISTINCT FROM 'cancel'
       AND enqueue.on_duplicate IS NOT DISTINCT FROM 'keep'
       AND jsonb_typeof(enqueue.payload) IS NOT DISTINCT FROM 'object'
       AND jobq._enqueue_args_ok(enqueue.queue, enqueue.run_at, enqueue.priority, enqueue.max_attempts,
                                 NULL, NULL) THEN
        -- The common case (no key, group, timeout or parents) in one
        -- statement: the queue's settings read in it, and no row when the
        -- payload is over the queue's max_payload_bytes or some per-queue
        -- produce grant matches the queue; then the general path below
        -- raises the error, or checks the privilege and inserts. No key:
        -- nothing to conflict with. (Each helper call saved is a function
        -- call with pinned settings; a single-job enqueue pays them all.)
        INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, timeout)
        SELECT enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
               coalesce(enqueue.max_attempts, q.max_attempts, d.max_attempts), q.timeout
        FROM jobq._queue_defaults AS d
        LEFT JOIN jobq._queue AS q ON q.queue = enqueue.queue
        WHERE pg_column_size(enqueue.payload) <= coalesce(q.max_payload_bytes, d.max_payload_bytes)
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
            AND enqueue.timeout IS NULL AND enqueue.unique_for IS NULL
            AND enqueue.depends_on IS NULL AND enqueue.on_parent_failure IS NOT DISTINCT FROM 'cancel'
            AND coalesce(enqueue.on_duplicate = 'keep'
                         OR (enqueue.on_duplicate IN ('replace', 'replace_payload') AND enqueue.job_key IS NOT NULL),
                         false)) THEN
        PERFORM jobq._check_queue(enqueue.queue, 'queue');
        PERFORM jobq._check_payload(enqueue.payload, 'payload', v_settings.max_payload_bytes);
        PERFORM jobq._check_time(enqueue.run_at, 'run_at');
        PERFORM jobq._check_job_options(enqueue.priority, enqueue.max_attempts);
        PERFORM jobq._check_job_key(enqueue.job_key, 'job_key');
        PERFORM jobq._check_job_key(enqueue.group_key, 'group_key');
        PERFORM jobq._check_interval(enqueue.timeout, 'timeout', interval '1 second', interval '1 day');
        PERFORM jobq._check_unique_for(enqueue.unique_for, enqueue.job_key IS NOT NULL, 'job_key');
        PERFORM jobq._check_dependencies(coalesce(enqueue.depends_on, '{}'), 'depends_on', enqueue.on_parent_failure);
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
                                  enqueue.on_duplicate = 'replace_payload');
        IF coalesce(cardinality(enqueue.depends_on), 0) > 0 THEN
            PERFORM jobq._attach(ARRAY[v_id], enqueue.depends_on, enqueue.on_parent_failure, false);
        END IF;
        RETURN v_id;
    END IF;
    IF coalesce(cardinality(enqueue.depends_on), 0) = 0 THEN
        RETURN jobq._insert_job(enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
                                coalesce(enqueue.max_attempts, v_settings.max_attempts), enqueue.job_key,
                                enqueue.group_key, coalesce(enqueue.timeout, v_settings.timeout), enqueue.unique_for);
    END IF;
    PERFORM jobq._check_readable_jobs(enqueue.depends_on, 'depends_on');
    PERFORM jobq._check_parents_issued(enqueue.depends_on, 'depends_on');
    v_id := jobq._insert_job(enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
                             coalesce(enqueue.max_attempts, v_settings.max_attempts), enqueue.job_key,
                             enqueue.group_key, coalesce(enqueue.timeout, v_settings.timeout), enqueue.unique_for,
                             true);
    PERFORM jobq._attach(ARRAY[v_id], enqueue.depends_on, enqueue.on_parent_failure, false);
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text, text) IS
    'Adds one job (inside the caller''s transaction) and returns its id; a job_key held by an active job (or, with unique_for, completed within it) returns that job''s id instead, on_duplicate replace/replace_payload updating it unless it runs; depends_on makes it wait for those jobs.';
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
    -- job waits for the same parents. on_duplicate applies to every job with
    -- a key, as in jobq.enqueue; a key repeated in one call: the last wins.
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

    IF v_waiting THEN
        PERFORM jobq._check_readable_jobs(enqueue_many.depends_on, 'depends_on');
        PERFORM jobq._check_parents_issued(enqueue_many.depends_on, 'depends_on');
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

    PERFORM jobq._check_job_keys(p_job_keys => enqueue_many.job_keys, p_n => v_n);
    FOR v_item IN
        SELECT x.payload, x.job_key
        FROM unnest(enqueue_many.payloads, enqueue_many.job_keys) WITH ORDINALITY AS x(payload, job_key, ord)
        ORDER BY x.ord
    LOOP
        IF enqueue_many.on_duplicate = 'keep' OR v_item.job_key IS NULL THEN
            v_ids := v_ids || jobq._insert_job(enqueue_many.queue, v_item.payload, enqueue_many.run_at,
                                               enqueue_many.priority,
                                               coalesce(enqueue_many.max_attempts, v_settings.max_attempts),
                                               v_item.job_key, enqueue_many.group_key,
                                               coalesce(enqueue_many.timeout, v_settings.timeout),
                                               enqueue_many.unique_for, v_waiting);
        ELSE
            v_ids := v_ids || jobq._replace_job(enqueue_many.queue, v_item.payload, enqueue_many.run_at,
                                                enqueue_many.priority,
                                                coalesce(enqueue_many.max_attempts, v_settings.max_attempts),
                                                v_item.job_key, enqueue_many.group_key,
                                                coalesce(enqueue_many.timeout, v_settings.timeout),
                                                enqueue_many.unique_for, v_waiting,
                                                enqueue_many.on_duplicate = 'replace_payload');
        END IF;
    END LOOP;
    IF v_waiting THEN
        PERFORM jobq._attach(v_ids, enqueue_many.depends_on, enqueue_many.on_parent_failure, false);
    END IF;
    RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
END
$$;
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text, text) IS
    'Adds one job per payload in one call; returns their ids in payload order (existing ids for job_keys already held, updated with on_duplicate replace/replace_payload unless running); depends_on makes every one wait for those jobs.';

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text, text),
    jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text, text)
TO jobq_producer;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

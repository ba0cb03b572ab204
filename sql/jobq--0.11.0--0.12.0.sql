-- jobq 0.11.0 → 0.12.0. One line per change:
--   claim of a rate-limited queue (jobq._pick, jobq._queue_slots): the time its starts are counted,
--     recorded and stamped as started_at is read after the queue's lock (it was read when the claim
--     began), so a claim that stalls before the lock no longer counts a window whose starts a newer
--     claim had deleted, and over-admits no more.
--   next_run_at: JQ020 for a queue with consume grants the caller lacks (as claim), so that only who may
--     claim a queue learns when its next job falls due.
--   enqueue, enqueue_many: on_duplicate ('keep', the default; 'replace': debounce; 'replace_payload':
--     throttle) for keyed jobs (issue 28 §3); new helpers _check_on_duplicate, _replace_job
--   job metadata (issue 27): new column jobq._job.meta (and jobq._job_archive.meta), a JSON object beside the
--     payload capped like it (JQ002 not an object, JQ003 over max_payload_bytes; new jobq._check_meta,
--     jobq._check_metas); enqueue(…, meta jsonb), enqueue_many(…, metas jsonb[]), enqueue_callback(…, meta jsonb)
--     and jobq._insert_job(…, p_meta) take it (new signatures: DROP and CREATE, GRANTs again); claim returns it
--     (jobq.job gets the attribute meta; jobq._claim, jobq._lock_ready), jobq.jobs shows it (new last column meta),
--     _finish_kept keeps it in the archive, retry, retry_dead and _restore_descendants bring it back;
--     cancel_jobs(…, meta_contains jsonb) cancels only jobs whose meta contains it (@>)
--   fair queues (issue 28): configure_queue(…, fair, fair_weights, per_key_concurrency) (new signature, with
--     jobq._queue.fair, fair_weights, per_key_concurrency, fair_cursor, fair_turns); enqueue(…, fair_key) and
--     enqueue_many(…, fair_keys) (new signatures, with jobq._job.fair_key and jobq._job_fair_idx);
--     a fair queue is claimed round-robin across its keys (new jobq._fair_pick, called by jobq._claim for
--     one fair queue and by jobq._pick for fair queues among others;
--     jobq._plain_leases sends fair queues to it); _insert_job takes the fair key; _settings, reset_queue
--     know the new settings; new checks _check_fair_key, _check_fair_keys, _check_fair_grouping,
--     _check_fair_weights; jobq.queues shows fair, fair_weights, per_key_concurrency; new view jobq.fair_keys
--     (a fair queue's 100 busiest keys: ready, scheduled, running, oldest ready age); the archive keeps a
--     finished job's fair key (jobq._job_archive.fair_key, written by _finish_kept) and retry, retry_dead and
--     _restore_descendants put it back ('' in a fair queue when it had none)

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
    v_counted text[] := '{}';   -- every queue of the claim, fair or not
    v_starts timestamptz[] := '{}';   -- per queue of v_counted: when its jobs start (jobq._queue_slots)
    v_leases interval[] := '{}';
    v_allow integer[] := '{}';
    v_rated text[] := '{}';
    v_ids bigint[];
    v_jobs_queues text[];   -- per job of v_ids: its queue
    v_grouped boolean;
    v_settings jobq._queue;
    v_fair_ids bigint[] := '{}';
    v_fair_leases interval[] := '{}';
    v_fair_names text[] := '{}';
    v_got bigint[];
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
    -- skipped). Fair queues are served by jobq._fair_pick (round-robin
    -- across their fair keys), ahead of the claim's other queues. Returns
    -- each job's start time: its queue's, read after that queue's lock, at
    -- which the starts of a rate-limited queue are counted and recorded;
    -- the caller stamps it on the job (started_at), so that the rate limit
    -- holds over the jobs' own start times. Plans pinned as
    -- jobq._claim's (no sort, no bitmap scan of the backlog).
    PERFORM jobq._check_claim_args(p_queues, p_n, p_lease);
    FOR v_queue IN SELECT DISTINCT ON (u.name) u.name FROM unnest(p_queues) WITH ORDINALITY AS u(name, ord)
                   ORDER BY u.name, u.ord LOOP
        v_slots := jobq._queue_slots(p_queue => v_queue, p_n => p_n);
        IF v_slots.rated THEN
            v_rated := v_rated || v_queue;
        END IF;
        v_counted := v_counted || v_queue;
        v_starts := v_starts || v_slots.counted_at;
        v_settings := jobq._settings(v_queue);
        IF v_settings.fair THEN
            -- A fair queue: round-robin across its keys (jobq._fair_pick),
            -- before the other queues of the claim, within its slots.
            v_got := jobq._fair_pick(p_queue => v_queue,
                                     p_n => least(v_slots.slots, p_n - cardinality(v_fair_ids)),
                                     p_settings => v_settings);
            v_fair_ids := v_fair_ids || v_got;
            v_fair_leases := v_fair_leases || array_fill(coalesce(p_lease, v_slots.lease), ARRAY[cardinality(v_got)]);
            v_fair_names := v_fair_names || array_fill(v_queue, ARRAY[cardinality(v_got)]);
            CONTINUE;
        END IF;
        v_names := v_names || v_queue;
        v_leases := v_leases || coalesce(p_lease, v_slots.lease);
        v_allow := v_allow || v_slots.slots;
    END LOOP;

    IF cardinality(v_names) > 0 AND cardinality(v_fair_ids) < p_n THEN
        SELECT c.ids, c.leases, c.queues, c.grouped INTO v_ids, v_leases, v_jobs_queues, v_grouped
        FROM jobq._pick_candidates(p_names => v_names, p_slots => v_allow, p_leases => v_leases,
                                   p_n => p_n - cardinality(v_fair_ids)) AS c;
    ELSE
        v_ids := NULL;
        v_leases := NULL;
        v_jobs_queues := NULL;
        v_grouped := false;
    END IF;

    IF v_grouped THEN
        SELECT g.ids, g.leases, g.queues INTO v_ids, v_leases, v_jobs_queues
        FROM jobq._group_heads_only(p_ids => v_ids, p_leases => v_leases, p_queues => v_jobs_queues) AS g;
    END IF;

    v_ids := v_fair_ids || coalesce(v_ids, '{}');
    v_leases := v_fair_leases || coalesce(v_leases, '{}');
    v_jobs_queues := v_fair_names || coalesce(v_jobs_queues, '{}');

    IF cardinality(v_rated) > 0 THEN
        INSERT INTO jobq._rate_start (queue, started_at, n)
        SELECT r.queue, v_starts[array_position(v_counted, r.queue)], count(*)
        FROM unnest(v_jobs_queues) AS r(queue)
        WHERE r.queue = ANY (v_rated)
        GROUP BY r.queue;
    END IF;

    RETURN QUERY
    SELECT u.id, u.lease, v_starts[array_position(v_counted, u.queue)]
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
    v_fair jobq._queue;
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
        IF cardinality(p_queues) = 1 THEN
            v_fair := jobq._settings(p_queues[1]);
        END IF;
        IF v_fair.fair AND NOT v_fair.paused AND v_fair.concurrency IS NULL AND v_fair.rate_limit IS NULL THEN
            -- One fair queue without queue limits: round-robin across its
            -- fair keys (jobq._fair_pick), straight. Its leases are parked:
            -- reap and the live counts find in-place leases only at the
            -- head of the claim index, where a fair claim's are not.
            v_ids := jobq._fair_pick(p_queue => p_queues[1], p_n => p_n, p_settings => v_fair);
            v_leases := array_fill(coalesce(p_lease, v_fair.lease), ARRAY[cardinality(v_ids)]);
            v_parked := array_fill(true, ARRAY[cardinality(v_ids)]);
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

-- job metadata (issue 27)
ALTER TABLE jobq._job ADD COLUMN meta jsonb;
COMMENT ON COLUMN jobq._job.meta IS
    'The JSON object its producer attached beside the payload (enqueue''s meta: tags, W3C trace context), capped like the payload; NULL when none.';
ALTER TABLE jobq._job_archive ADD COLUMN meta jsonb;
COMMENT ON COLUMN jobq._job_archive.meta IS 'The job''s meta (enqueue''s meta), kept with it.';
ALTER TYPE jobq.job ADD ATTRIBUTE meta jsonb;
COMMENT ON TYPE jobq.job IS 'A claimed job. Pass lease_token to complete/fail/heartbeat/progress: it fences the lease. progress: the last one reported (by an earlier attempt, after a retry). meta: what the producer attached beside the payload (tags, trace context), or NULL.';
CREATE FUNCTION jobq._check_meta(p_meta jsonb, p_arg text, p_max_bytes integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ002/JQ003 unless p_meta (a job's meta) is NULL (none) or a JSON
    -- object within the size cap (the queue's max_payload_bytes, as a payload).
    IF p_meta IS NULL THEN
        RETURN;
    END IF;
    IF jsonb_typeof(p_meta) <> 'object' THEN
        RAISE EXCEPTION 'jobq: % must be a JSON object, got %', p_arg, jsonb_typeof(p_meta)
            USING ERRCODE = 'JQ002',
                  HINT = 'Pass tags as an object, e.g. ''{"tenant": "acme"}''::jsonb, or NULL for none.';
    END IF;
    IF pg_column_size(p_meta) > p_max_bytes THEN
        RAISE EXCEPTION 'jobq: % is % bytes, over the queue''s cap of % bytes',
                p_arg, pg_column_size(p_meta), p_max_bytes
            USING ERRCODE = 'JQ003',
                  HINT = 'Keep meta small (tags, trace context): store large data in a table, or raise max_payload_bytes with jobq.configure_queue().';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_meta(jsonb, text, integer) IS 'Raises JQ002 for a meta that is neither NULL nor a JSON object, JQ003 when over the size cap.';
CREATE FUNCTION jobq._check_metas(p_metas jsonb[], p_n integer, p_max_bytes integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_bad record;
BEGIN
    -- Raise JQ002/JQ003 unless p_metas (enqueue_many's metas, not NULL) is a
    -- list of p_n JSON objects, each within p_max_bytes; a bad one is named
    -- by its own subscript (arrays may start at another index than 1).
    IF array_ndims(p_metas) > 1 THEN
        RAISE EXCEPTION 'jobq: metas must be a one-dimensional array, got % dimensions %',
                array_ndims(p_metas), array_dims(p_metas)
            USING ERRCODE = 'JQ002', HINT = 'Pass a list of JSON objects, one per payload, or metas => NULL.';
    END IF;
    IF cardinality(p_metas) <> p_n THEN
        RAISE EXCEPTION 'jobq: metas has % elements but payloads has %', cardinality(p_metas), p_n
            USING ERRCODE = 'JQ002', HINT = 'Pass one JSON object (''{}'' for none) per payload, or metas => NULL.';
    END IF;
    SELECT m.meta, m.ord INTO v_bad
    FROM unnest(p_metas) WITH ORDINALITY AS m(meta, ord)
    WHERE m.meta IS NULL OR jsonb_typeof(m.meta) <> 'object' OR pg_column_size(m.meta) > p_max_bytes
    ORDER BY m.ord LIMIT 1;
    IF FOUND THEN
        IF v_bad.meta IS NULL THEN
            RAISE EXCEPTION 'jobq: metas[%] must be a JSON object, got NULL', array_lower(p_metas, 1) + v_bad.ord - 1
                USING ERRCODE = 'JQ002', HINT = 'Pass ''{}'' for a job without meta, or metas => NULL for none.';
        END IF;
        PERFORM jobq._check_meta(v_bad.meta, format('metas[%s]', array_lower(p_metas, 1) + v_bad.ord - 1), p_max_bytes);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_metas(jsonb[], integer, integer) IS
    'Raises JQ002 for metas that are not one JSON object per payload, JQ003 for one over the size cap.';

-- fair queues (issue 28): the settings, the job's key and the index the fair claim reads.
ALTER TABLE jobq._queue ADD COLUMN fair boolean;
ALTER TABLE jobq._queue ADD COLUMN fair_weights jsonb;
ALTER TABLE jobq._queue ADD COLUMN per_key_concurrency integer;
ALTER TABLE jobq._queue ADD COLUMN fair_cursor text;
ALTER TABLE jobq._queue ADD COLUMN fair_turns integer;
ALTER TABLE jobq._queue ADD CONSTRAINT queue_per_key_concurrency_range CHECK (per_key_concurrency BETWEEN 1 AND 10000);
ALTER TABLE jobq._job ADD COLUMN fair_key text COLLATE "C";
ALTER TABLE jobq._job ADD CONSTRAINT job_fair_key_length CHECK (char_length(fair_key) <= 512);
COMMENT ON COLUMN jobq._job.fair_key IS
    'The fair key (enqueue''s fair_key): a fair queue serves its keys round-robin; '''' for a job of a fair queue enqueued without one.';
CREATE INDEX _job_fair_idx ON jobq._job (queue, fair_key, priority, run_at, id)
    WHERE fair_key IS NOT NULL AND NOT parked;
ALTER TABLE jobq._job_archive ADD COLUMN fair_key text COLLATE "C";
COMMENT ON COLUMN jobq._job_archive.fair_key IS
    'The job''s fair key (enqueue''s fair_key), kept so that a retry puts it back in its key''s turn.';

DROP FUNCTION jobq._insert_job(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, boolean);
CREATE FUNCTION jobq._insert_job(
    p_queue text, p_payload jsonb, p_run_at timestamptz, p_priority integer, p_max_attempts integer,
    p_job_key text, p_group_key text, p_timeout interval, p_unique_for interval, p_waiting boolean DEFAULT false,
    p_meta jsonb DEFAULT NULL,
    p_fair_key text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id bigint;
BEGIN
    -- Insert one validated job and wake the queue's workers; with a job_key
    -- already held by an active job, return that job's id instead, and with
    -- p_unique_for also the id of the job of that key completed within
    -- p_unique_for. Loops when the holder finishes between the INSERT and
    -- the lookup. p_waiting: the job waits for parents (jobq._attach links
    -- it): status waiting, parked, and no wake-up yet. p_meta: its meta.
    -- p_fair_key: the job's fair key; none in a fair queue is '' (the
    -- keyless jobs' turn).
    IF p_unique_for IS NOT NULL THEN
        SELECT j.id INTO v_id FROM jobq._job AS j WHERE j.queue = p_queue AND j.job_key = p_job_key;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
        SELECT k.job_id INTO v_id FROM jobq._key_done AS k
        WHERE k.queue = p_queue AND k.job_key = p_job_key AND k.finished_at > clock_timestamp() - p_unique_for;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END IF;
    FOR i IN 1..10 LOOP
        IF p_waiting THEN
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, job_key, group_key, timeout,
                                   status, parked, has_parents, meta, fair_key)
            VALUES (p_queue, p_payload, p_run_at, p_priority, p_max_attempts, p_job_key, p_group_key, p_timeout,
                    'waiting', true, true, p_meta,
                    coalesce(p_fair_key, (SELECT '' FROM jobq._queue AS q WHERE q.queue = p_queue AND q.fair)))
            ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
            RETURNING id INTO v_id;
        ELSE
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, job_key, group_key, timeout,
                                   meta, fair_key)
            VALUES (p_queue, p_payload, p_run_at, p_priority, p_max_attempts, p_job_key, p_group_key, p_timeout,
                    p_meta, coalesce(p_fair_key, (SELECT '' FROM jobq._queue AS q WHERE q.queue = p_queue AND q.fair)))
            ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
            RETURNING id INTO v_id;
        END IF;
        IF v_id IS NOT NULL THEN
            IF NOT p_waiting THEN
                PERFORM pg_notify('jobq', p_queue);
            END IF;
            RETURN v_id;
        END IF;
        SELECT j.id INTO v_id FROM jobq._job AS j WHERE j.queue = p_queue AND j.job_key = p_job_key;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'jobq: job_key % kept changing hands while enqueueing', pg_catalog.quote_literal(p_job_key)
        USING ERRCODE = '40001', HINT = 'Retry the transaction.';
END
$$;
COMMENT ON FUNCTION jobq._insert_job(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, boolean, jsonb, text) IS
    'Inserts one validated job (ready, and NOTIFYs; or waiting for parents), or returns the id of the active (or, with unique_for, recently completed) job holding its job_key.';
DROP FUNCTION jobq.enqueue_callback(text, jsonb, bigint[], timestamptz, integer, integer);
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
CREATE OR REPLACE FUNCTION jobq._finish_kept(p_ids bigint[], p_lease_tokens uuid[], p_status text, p_error text,
                                  p_held boolean, p_results jsonb[], p_cause bigint,
                                  OUT ids bigint[], OUT wake text[], OUT parents bigint[], OUT watched bigint[])
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    -- jobq._finish's general case, in one statement: the jobs leave the
    -- live table as p_status and go to the archive when kept (dead and
    -- cancelled always, with p_error or their last error; completed ones
    -- when their queue's retention is over 0 or they carry a result from
    -- p_results, kept for at least result_retention); those not kept take
    -- their error history, edges and gates along; a job_key records its
    -- completion; completed and dead jobs are counted. Returns the ids that
    -- left, the queues to wake, and the parents and watched jobs among them.
    WITH gone AS (
        DELETE FROM jobq._job AS j
        USING (SELECT u.* FROM unnest(p_ids, p_lease_tokens, p_results) AS u(id, lease_token, result)
               ORDER BY u.id) AS f
        WHERE j.id = f.id
          AND (f.lease_token IS NULL OR j.lease_token = f.lease_token)
          AND (NOT p_held OR j.status = 'ready')
        RETURNING j.*, CASE WHEN p_status = 'completed' THEN f.result END AS result
    ), settings AS (
        SELECT s.*
        FROM (SELECT DISTINCT g.queue FROM gone AS g) AS q,
             LATERAL jobq._settings(q.queue) AS s
    ), kept AS (
        INSERT INTO jobq._job_archive
            (id, queue, payload, status, priority, run_at, attempts, max_attempts,
             job_key, worker, last_error, created_at, started_at, finished_at, prune_after, group_key, timeout,
             result, cancelled_by, meta, fair_key)
        SELECT g.id, g.queue, g.payload, p_status, g.priority, g.run_at, g.attempts + p_held::integer,
               g.max_attempts, g.job_key, CASE WHEN p_held THEN session_user ELSE g.worker END,
               coalesce(p_error, g.last_error), g.created_at,
               CASE WHEN p_held THEN v_now ELSE g.started_at END,
               v_now, v_now + CASE WHEN p_status <> 'completed' THEN s.dead_retention
                                   WHEN g.result IS NOT NULL THEN greatest(s.retention, s.result_retention)
                                   ELSE s.retention END,
               g.group_key, g.timeout, g.result, p_cause, g.meta, g.fair_key
        FROM gone AS g
        JOIN settings AS s ON s.queue = g.queue
        WHERE p_status <> 'completed' OR s.retention > interval '0' OR g.result IS NOT NULL
    ), forgotten AS (
        -- Completed jobs the history does not keep take their errors along.
        DELETE FROM jobq._job_error AS e
        USING gone AS g
        JOIN settings AS s ON s.queue = g.queue
        WHERE e.job_id = g.id AND g.last_error IS NOT NULL
          AND p_status = 'completed' AND s.retention <= interval '0' AND g.result IS NULL
    ), unlinked AS (
        -- ... and their edges and gates, when they depended on others.
        DELETE FROM jobq._job_dep AS d
        USING gone AS g
        JOIN settings AS s ON s.queue = g.queue
        WHERE d.child_id = g.id AND g.has_parents
          AND p_status = 'completed' AND s.retention <= interval '0' AND g.result IS NULL
    ), ungated AS (
        DELETE FROM jobq._job_wait AS w
        USING gone AS g
        JOIN settings AS s ON s.queue = g.queue
        WHERE w.job_id = g.id AND g.has_parents
          AND p_status = 'completed' AND s.retention <= interval '0' AND g.result IS NULL
    ), keyed AS (
        INSERT INTO jobq._key_done AS k (queue, job_key, job_id, finished_at)
        SELECT g.queue, g.job_key, g.id, v_now FROM gone AS g
        WHERE p_status = 'completed' AND g.job_key IS NOT NULL
        ON CONFLICT (queue, job_key) DO UPDATE SET job_id = excluded.job_id, finished_at = excluded.finished_at
    ), counted AS (
        INSERT INTO jobq._counter (queue, bucket, completed, dead)
        SELECT g.queue, date_trunc('minute', now()),
               count(*) FILTER (WHERE p_status = 'completed'), count(*) FILTER (WHERE p_status = 'dead')
        FROM gone AS g
        WHERE p_status IN ('completed', 'dead')
        GROUP BY g.queue
    )
    SELECT array_agg(g.id),
           array_agg(DISTINCT g.queue) FILTER (WHERE g.group_key IS NOT NULL OR s.concurrency IS NOT NULL),
           array_agg(g.id) FILTER (WHERE g.has_children),
           array_agg(g.id) FILTER (WHERE g.watched)
    INTO ids, wake, parents, watched
    FROM gone AS g
    JOIN settings AS s ON s.queue = g.queue;
END
$$;
COMMENT ON FUNCTION jobq._finish_kept(bigint[], uuid[], text, text, boolean, jsonb[], bigint) IS
    'jobq._finish in general: moves jobs to the archive as they end (or deletes them), with their side rows and counts.';
CREATE OR REPLACE FUNCTION jobq.retry(id bigint) RETURNS boolean
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
CREATE OR REPLACE FUNCTION jobq.retry_dead(queue text) RETURNS integer
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
CREATE OR REPLACE FUNCTION jobq._restore_descendants(p_root bigint) RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_set bigint[];
    v_blocked bigint[];
    v_moved bigint[];
    v_gates bigint[];
    v_cancelled bigint[];
BEGIN
    -- p_root (dead or cancelled) is live again (jobq.retry): bring back the
    -- descendants its failure cancelled (cancelled_by = p_root) as waiting,
    -- put the children its failure (or theirs) released and nobody claimed
    -- back to waiting, and recount the gates of the waiting children of all
    -- of these, which counted them as failed. A descendant with another dead or cancelled parent
    -- outside that set stays cancelled, re-rooted to that parent's root (a
    -- retry of that one restores it), and so do its own descendants in the
    -- set. One whose job_key an active job now holds stays cancelled.
    -- Returns how many came back.
    v_set := ARRAY(SELECT a.id FROM jobq._job_archive AS a
                   WHERE a.cancelled_by = p_root AND a.status = 'cancelled'
                   ORDER BY a.id
                   FOR UPDATE);
    LOOP
        v_blocked := ARRAY(
            SELECT DISTINCT d.child_id
            FROM jobq._job_dep AS d
            JOIN jobq._job_archive AS a ON a.id = d.parent_id AND a.status IN ('dead', 'cancelled')
            WHERE d.child_id = ANY (v_set) AND a.id <> ALL (v_set));
        EXIT WHEN cardinality(v_blocked) = 0;
        UPDATE jobq._job_archive AS c
        SET cancelled_by = (SELECT min(coalesce(p.cancelled_by, p.id))
                            FROM jobq._job_dep AS d
                            JOIN jobq._job_archive AS p ON p.id = d.parent_id AND p.status IN ('dead', 'cancelled')
                            WHERE d.child_id = c.id AND p.id <> ALL (v_set))
        WHERE c.id = ANY (v_blocked);
        v_set := ARRAY(SELECT u.id FROM unnest(v_set) AS u(id) WHERE u.id <> ALL (v_blocked));
    END LOOP;
    IF cardinality(v_set) > 0 THEN
        WITH moved AS (
            INSERT INTO jobq._job (id, queue, payload, status, parked, priority, run_at, attempts, max_attempts,
                                   job_key, created_at, group_key, timeout, has_children, has_parents, meta,
                                   fair_key)
            SELECT a.id, a.queue, a.payload, 'waiting', true, a.priority, a.run_at, a.attempts, a.max_attempts,
                   a.job_key, a.created_at, a.group_key, a.timeout,
                   EXISTS (SELECT FROM jobq._job_dep AS d WHERE d.parent_id = a.id), true, a.meta,
                   coalesce(a.fair_key, (SELECT '' FROM jobq._queue AS q WHERE q.queue = a.queue AND q.fair))
            FROM jobq._job_archive AS a
            WHERE a.id = ANY (v_set)
            ORDER BY a.id
            ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
            RETURNING id
        )
        SELECT coalesce(array_agg(m.id ORDER BY m.id), '{}') INTO v_moved FROM moved AS m;
        DELETE FROM jobq._job_archive AS a WHERE a.id = ANY (v_moved);
        IF cardinality(v_moved) < cardinality(v_set) THEN
            RAISE NOTICE 'jobq: % descendants of job % stay cancelled: their job_key is held by an active job',
                cardinality(v_set) - cardinality(v_moved), p_root;
        END IF;
        -- They kept their gates (and on_parent_failure) when cancelled.
        INSERT INTO jobq._job_wait (job_id, parents_left, on_parent_failure)
        SELECT m.id, 0, 'cancel' FROM unnest(v_moved) AS m(id)
        ON CONFLICT (job_id) DO NOTHING;
    ELSE
        v_moved := '{}';
    END IF;
    -- Children of p_root or of those moved back that a failure released
    -- ('run' children, batch callbacks) and no worker has claimed yet wait
    -- again: a parent of theirs is live again. (One claimed meanwhile runs
    -- with the counts it was released with.)
    UPDATE jobq._job AS j SET status = 'waiting', parked = true
    WHERE j.id IN (SELECT r.id FROM jobq._job AS r
                   WHERE r.id IN (SELECT d.child_id FROM jobq._job_dep AS d
                                  WHERE d.parent_id = p_root OR d.parent_id = ANY (v_moved))
                     AND r.status = 'ready'
                     AND EXISTS (SELECT FROM jobq._job_wait AS w WHERE w.job_id = r.id)
                   ORDER BY r.id
                   FOR NO KEY UPDATE OF r);
    -- The gates to recount: those moved back, and the waiting children of
    -- p_root and of those moved back (the gates of finished ones are
    -- recounted by their own retry).
    v_gates := ARRAY(SELECT w.job_id FROM jobq._job_wait AS w
                     JOIN jobq._job AS j ON j.id = w.job_id AND j.status = 'waiting'
                     WHERE w.job_id IN (SELECT d.child_id FROM jobq._job_dep AS d
                                        WHERE d.parent_id = p_root OR d.parent_id = ANY (v_moved))
                        OR w.job_id = ANY (v_moved)
                     ORDER BY w.job_id);
    PERFORM jobq._gate_recount(v_gates);
    v_cancelled := jobq._settle(v_gates);
    IF cardinality(v_cancelled) > 0 THEN
        PERFORM jobq._finish_dependents(v_cancelled, 'cancelled');
    END IF;
    RETURN cardinality(v_moved);
END
$$;
COMMENT ON FUNCTION jobq._restore_descendants(bigint) IS
    'After a retry of a dead or cancelled job: its cascade-cancelled descendants wait again (unless another failed parent holds them).';
DROP FUNCTION jobq.cancel_jobs(text, text, jsonb);
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
CREATE OR REPLACE VIEW jobq.jobs AS
    -- Every job jobq still knows, live or finished, with one status column:
    -- waiting (for parents), ready, scheduled, running, completed, dead or
    -- cancelled. heartbeat_at: the last heartbeat of a running job's lease
    -- (NULL before its first, and for jobs not running). result: what a
    -- completed job reported; cancelled_by: the ancestor whose failure
    -- cancelled it; progress: what a live job last reported (jobq.progress),
    -- NULL once it finished. Paged newest first by id within a queue, both halves
    -- read an index (the primary key, and (queue, id) of the archive).
    -- Jobs of a queue with read grants (jobq.grant_queue) show only to the
    -- roles that hold one and jobq_admin; while no read grant exists, one
    -- look at an empty table decides for every row. The filter stands
    -- outside the UNION ALL: a subquery in a half's WHERE would keep the
    -- planner from merging the halves' index scans.
    SELECT u.*
    FROM (
        SELECT j.id, j.queue, j.payload,
               CASE WHEN j.status = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.status END AS status,
               j.priority::integer AS priority, j.run_at, j.attempts, j.max_attempts, j.job_key, j.worker,
               j.lease_expires_at, j.last_error, j.created_at, j.started_at, NULL::timestamptz AS finished_at,
               j.group_key, j.timeout, j.heartbeat_at, NULL::jsonb AS result, NULL::bigint AS cancelled_by,
               j.progress, j.meta
        FROM jobq._job AS j
        UNION ALL
        SELECT a.id, a.queue, a.payload, a.status, a.priority::integer, a.run_at, a.attempts, a.max_attempts,
               a.job_key, a.worker, NULL::timestamptz, a.last_error, a.created_at, a.started_at, a.finished_at,
               a.group_key, a.timeout, NULL::timestamptz, a.result, a.cancelled_by, NULL::jsonb, a.meta
        FROM jobq._job_archive AS a
    ) AS u
    WHERE (SELECT NOT EXISTS (SELECT FROM jobq._queue_grant AS g WHERE g.privilege = 'read'))
       OR coalesce((SELECT bool_or(p.held) FROM jobq._read_pattern AS p
                    WHERE u.queue LIKE p.queue_like), true);
COMMENT ON VIEW jobq.jobs IS 'All live and finished jobs with a single status column (for operators).';

-- meta (issue 27), fair_key and on_duplicate (issue 28): new trailing parameters, so DROP and CREATE
-- (and the GRANTs below).
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
    p_payload_only boolean, p_meta jsonb, p_fair_key text
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
    -- or scheduled job holding the key takes the new payload and meta (p_meta,
    -- which goes with the payload: the trace context of the last enqueue;
    -- it keeps its fair key, p_fair_key being a new job's)
    -- (and, with 'replace', run_at and priority; its id, attempts, max_attempts,
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
                                    status, parked, has_parents, meta, fair_key)
        VALUES (p_queue, p_payload, p_run_at, p_priority, p_max_attempts, p_job_key, p_group_key, p_timeout,
                CASE WHEN p_waiting THEN 'waiting' ELSE 'ready' END, p_waiting, p_waiting, p_meta,
                coalesce(p_fair_key, (SELECT '' FROM jobq._queue AS q WHERE q.queue = p_queue AND q.fair)))
        ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO UPDATE
            SET payload = excluded.payload,
                meta = excluded.meta,
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
COMMENT ON FUNCTION jobq._replace_job(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, boolean, boolean, jsonb, text) IS
    'Enqueue with on_duplicate replace/replace_payload: updates the waiting, ready or scheduled job holding the key, else inserts (a running holder hands the key over).';
CREATE OR REPLACE FUNCTION jobq._settings(p_queue text) RETURNS jobq._queue
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
BEGIN
    -- The effective settings of a queue: its overrides over the defaults
    -- (jobq._queue_defaults). (PL/pgSQL, not SQL: a SQL function with a SET
    -- clause is planned afresh on every call, and every enqueue, claim and
    -- completion asks for settings.)
    SELECT p_queue,
           coalesce(q.max_attempts, d.max_attempts),
           coalesce(q.backoff_base, d.backoff_base),
           coalesce(q.backoff_cap, d.backoff_cap),
           coalesce(q.backoff_jitter, d.backoff_jitter),
           coalesce(q.lease, d.lease),
           coalesce(q.retention, d.retention),
           q.dead_retention,                          -- NULL: dead and cancelled jobs stay until retried
           coalesce(q.max_payload_bytes, d.max_payload_bytes),
           coalesce(q.updated_at, '-infinity'::timestamptz),
           q.concurrency,                             -- NULL: no limit
           q.rate_limit,                              -- NULL: no limit
           CASE WHEN q.rate_limit IS NOT NULL THEN coalesce(q.rate_interval, d.rate_interval) END,
           coalesce(q.paused, d.paused),
           q.timeout,                                 -- NULL: handlers run as long as they take
           coalesce(q.result_retention, d.result_retention),
           coalesce(q.fair, false),                   -- fair: claimed round-robin across fair keys
           q.fair_weights,                            -- NULL: every key weight 1
           q.per_key_concurrency,                     -- NULL: no limit per key
           q.fair_cursor,
           q.fair_turns
    INTO v_settings
    FROM jobq._queue_defaults AS d
    LEFT JOIN jobq._queue AS q ON q.queue = p_queue;
    RETURN v_settings;
END
$$;
COMMENT ON FUNCTION jobq._settings(text) IS 'Effective settings of a queue (overrides from jobq._queue over built-in defaults).';
CREATE FUNCTION jobq._check_fair_key(p_key text, p_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ009 unless p_key (named p_name) is NULL or a fair key of 1 to
    -- 512 characters ('' is jobq's own: the turn of the jobs without a key).
    IF p_key IS NOT NULL AND char_length(p_key) NOT BETWEEN 1 AND 512 THEN
        RAISE EXCEPTION 'jobq: % must be 1 to 512 characters, got %', p_name, char_length(p_key)
            USING ERRCODE = 'JQ009', HINT = 'Use a short tenant or customer id, or NULL for no key.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_fair_key(text, text) IS 'Raises JQ009 for a fair key that is not NULL or 1 to 512 characters.';
CREATE FUNCTION jobq._check_fair_keys(p_fair_keys text[], p_n integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_item record;
BEGIN
    -- Raise JQ009 unless p_fair_keys is a list of p_n fair keys (or NULLs);
    -- a bad key is named by its own subscript.
    IF array_ndims(p_fair_keys) > 1 THEN
        RAISE EXCEPTION 'jobq: fair_keys must be a one-dimensional array, got % dimensions %',
                array_ndims(p_fair_keys), array_dims(p_fair_keys)
            USING ERRCODE = 'JQ009', HINT = 'Pass a list of fair keys (or NULLs), one per payload.';
    END IF;
    IF cardinality(p_fair_keys) <> p_n THEN
        RAISE EXCEPTION 'jobq: fair_keys has % elements but payloads has %', cardinality(p_fair_keys), p_n
            USING ERRCODE = 'JQ009', HINT = 'Pass one fair key (or NULL) per payload, or fair_keys => NULL.';
    END IF;
    FOR v_item IN SELECT x.fair_key, x.ord FROM unnest(p_fair_keys) WITH ORDINALITY AS x(fair_key, ord) LOOP
        PERFORM jobq._check_fair_key(v_item.fair_key,
                                     format('fair_keys[%s]', array_lower(p_fair_keys, 1) + v_item.ord - 1));
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq._check_fair_keys(text[], integer) IS
    'Raises JQ009 for fair_keys that are not one fair key (or NULL) per payload, each NULL or 1 to 512 characters.';
CREATE FUNCTION jobq._check_fair_grouping(p_fair boolean, p_group_key text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ009 when a job of a serial group goes to a fair queue: a fair
    -- queue is claimed round-robin across its keys and keeps no group order.
    IF p_fair AND p_group_key IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: group_key cannot be used on a fair queue'
            USING ERRCODE = 'JQ009',
                  HINT = 'A fair queue serves its fair keys round-robin and has no serial groups: '
                         'use per_key_concurrency => 1 to run a key one job at a time, or another queue.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_fair_grouping(boolean, text) IS
    'Raises JQ009 for a group_key on a fair queue (fair queues have no serial groups).';
CREATE FUNCTION jobq._check_fair_weights(p_weights jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_bad record;
BEGIN
    -- Raise JQ012 unless p_weights is NULL or a JSON object of at most
    -- 10,000 fair keys (1 to 512 characters) to whole numbers 1 to 1000.
    IF p_weights IS NULL THEN
        RETURN;
    END IF;
    IF jsonb_typeof(p_weights) <> 'object' THEN
        RAISE EXCEPTION 'jobq: setting fair_weights must be a JSON object, got a JSON %', jsonb_typeof(p_weights)
            USING ERRCODE = 'JQ012', HINT = 'Map fair keys to weights, e.g. ''{"gold": 3}''; ''{}'' removes them.';
    END IF;
    IF (SELECT count(*) FROM jsonb_object_keys(p_weights)) > 10000 THEN
        RAISE EXCEPTION 'jobq: setting fair_weights has more than 10000 keys'
            USING ERRCODE = 'JQ012', HINT = 'Give weights to the few keys that need more turns; the rest have 1.';
    END IF;
    SELECT e.key, e.value INTO v_bad
    FROM jsonb_each(p_weights) AS e
    WHERE char_length(e.key) NOT BETWEEN 1 AND 512
       OR jsonb_typeof(e.value) <> 'number'
       OR e.value::text !~ '^[0-9]+$'
       OR e.value::text::numeric NOT BETWEEN 1 AND 1000
    LIMIT 1;
    IF FOUND THEN
        IF char_length(v_bad.key) NOT BETWEEN 1 AND 512 THEN
            RAISE EXCEPTION 'jobq: setting fair_weights has a key of % characters, which no fair key can be',
                    char_length(v_bad.key)
                USING ERRCODE = 'JQ012', HINT = 'Fair keys are 1 to 512 characters.';
        END IF;
        RAISE EXCEPTION 'jobq: setting fair_weights gives key % the weight %, not a whole number from 1 to 1000',
                pg_catalog.quote_literal(pg_catalog.left(v_bad.key, 100)), pg_catalog.left(v_bad.value::text, 100)
            USING ERRCODE = 'JQ012',
                  HINT = 'A weight is how many turns a key gets per round (1, the default, to 1000); '
                         'leave a key out for weight 1.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_fair_weights(jsonb) IS
    'Raises JQ012 unless fair_weights is NULL or an object of fair keys to whole-number weights 1..1000.';
CREATE FUNCTION jobq._fair_pick(p_queue text, p_n integer, p_settings jobq._queue) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
SET max_parallel_workers_per_gather = 0
AS $$
DECLARE
    v_ids bigint[] := '{}';
    v_weights jsonb := coalesce(p_settings.fair_weights, '{}');
    v_limit integer := p_settings.per_key_concurrency;
    v_running jsonb := '{}';
    v_last text := p_settings.fair_cursor;
    v_used integer := coalesce(p_settings.fair_turns, 0);
    v_left integer;
    v_from text;
    v_want integer;
    v_keys text[];
    v_turns integer[];
    v_rounds integer;
    v_got bigint[];
    v_got_keys text[];
    v_got_used integer[];
BEGIN
    -- Row-lock (SKIP LOCKED) up to p_n ready jobs of the fair queue p_queue
    -- (p_settings: its settings), round-robin across its fair keys: the keys
    -- with due jobs in key order, starting from the cursor on the queue's
    -- row (the key served last: the key itself while it has turns of its
    -- round left, else the next one) and wrapping around; each key gives
    -- its weight's worth of jobs per round (fair_weights, else 1), in
    -- (priority, run_at, id) order, until p_n are taken. Keys that run out
    -- leave their turns to the others (work-conserving: a key alone gets all
    -- p_n). With per_key_concurrency, no key gets more than that many
    -- running: counted under the row lock of the queue's jobq._queue row
    -- (SKIP LOCKED, as for the queue's concurrency limit: a claimer that
    -- finds it taken gets no jobs, never a wait), in a statement after the
    -- lock. Keys come from a skip scan of jobq._job_fair_idx (one probe per
    -- key, never a sort of the backlog), each key's jobs from the same index
    -- (at most 8 passes of up to p_n keys: more keys in a row without a due
    -- job leave the rest to the next claim, which starts after them);
    -- plans pinned (no sort, bitmap or sequential scan, whatever the
    -- statistics). Returns the ids in the order served; moves the cursor when it can lock
    -- the queue's row (a concurrent claim that cannot leaves it to the other).
    IF p_n <= 0 THEN
        RETURN v_ids;
    END IF;
    IF v_limit IS NOT NULL THEN
        PERFORM FROM jobq._queue AS q WHERE q.queue = p_queue FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN v_ids;   -- another claimer is counting this queue's keys right now
        END IF;
        SELECT coalesce(jsonb_object_agg(r.fair_key, r.n), '{}') INTO v_running
        FROM (SELECT j.fair_key, count(*) AS n
              FROM jobq._job AS j
              WHERE j.queue = p_queue AND j.parked AND j.status = 'running' AND j.fair_key IS NOT NULL
              GROUP BY j.fair_key) AS r;
    END IF;
    FOR v_pass IN 1..8 LOOP
        v_want := p_n - cardinality(v_ids);
        EXIT WHEN v_want <= 0;
        -- Where this pass starts: at the cursor's key while it has turns of
        -- its round left (v_left), else at the smallest string after it in
        -- the key's "C" order ('' from the very start).
        v_left := coalesce((v_weights ->> v_last)::integer, 1) - v_used;
        IF v_last IS NOT NULL AND v_left > 0 THEN
            v_from := v_last;
        ELSE
            v_from := coalesce(v_last || chr(1), '');
            v_left := 0;
        END IF;
        -- Up to v_want keys with jobs not running (and, with a limit, a
        -- free slot), in turn order: from v_from to the last key, then from
        -- the first key up to v_from. The order is that of the scans (UNION
        -- ALL appends the second after the first); no sort. A key's turns
        -- per round: its weight (and no more than its free slots). Whether
        -- a key has a due job is found by taking it (a key whose jobs are
        -- all scheduled gives none).
        WITH RECURSIVE upper_keys(key) AS (
            (SELECT j.fair_key FROM jobq._job AS j
             WHERE j.queue = p_queue AND j.fair_key >= v_from AND NOT j.parked
             ORDER BY j.fair_key LIMIT 1)
            UNION ALL
            SELECT (SELECT j.fair_key FROM jobq._job AS j
                    WHERE j.queue = p_queue AND j.fair_key > u.key AND NOT j.parked
                    ORDER BY j.fair_key LIMIT 1)
            FROM upper_keys AS u
            WHERE u.key IS NOT NULL
        ), lower_keys(key) AS (
            (SELECT j.fair_key FROM jobq._job AS j
             WHERE j.queue = p_queue AND j.fair_key >= '' AND j.fair_key < v_from AND NOT j.parked
             ORDER BY j.fair_key LIMIT 1)
            UNION ALL
            SELECT (SELECT j.fair_key FROM jobq._job AS j
                    WHERE j.queue = p_queue AND j.fair_key > l.key AND j.fair_key < v_from AND NOT j.parked
                    ORDER BY j.fair_key LIMIT 1)
            FROM lower_keys AS l
            WHERE l.key IS NOT NULL
        )
        SELECT array_agg(k.key), array_agg(k.turn)
        INTO v_keys, v_turns
        FROM (SELECT a.key,
                     least(coalesce((v_weights ->> a.key)::integer, 1),
                           coalesce(v_limit - coalesce((v_running ->> a.key)::integer, 0), 1000)) AS turn
              FROM (SELECT u.key FROM upper_keys AS u WHERE u.key IS NOT NULL
                    UNION ALL
                    SELECT l.key FROM lower_keys AS l WHERE l.key IS NOT NULL) AS a
              WHERE (v_limit IS NULL OR coalesce((v_running ->> a.key)::integer, 0) < v_limit)
              LIMIT v_want) AS k;
        EXIT WHEN v_keys IS NULL;
        IF v_keys[1] IS DISTINCT FROM v_from THEN
            v_left := 0;   -- the cursor's key has no job now: its round is over
        END IF;
        -- Enough whole rounds for v_want jobs; a key's quota is its turns per
        -- round times the rounds, capped by its free slots under a limit.
        v_rounds := ceil(v_want::numeric / (SELECT sum(t) FROM unnest(v_turns) AS t))::integer;
        -- Each key's most urgent due jobs (row-locked, SKIP LOCKED), served
        -- round by round: round r takes the r-th batch of turn jobs of every
        -- key, keys in turn order (the cursor's key, when it goes on, first
        -- takes the turns it has left); the first v_want of that order, and
        -- for each the turns of its round its key has had with it.
        SELECT array_agg(c.id), array_agg(c.key), array_agg(c.used)
        INTO v_got, v_got_keys, v_got_used
        FROM (SELECT x.id, k.key,
                     CASE WHEN k.pos = 1 AND v_left > 0 AND x.ord <= least(v_left, k.turn) THEN 0
                          WHEN k.pos = 1 AND v_left > 0 THEN 1 + (x.ord - least(v_left, k.turn) - 1) / k.turn
                          ELSE (x.ord - 1) / k.turn END AS round,
                     CASE WHEN k.pos = 1 AND v_left > 0 AND x.ord <= least(v_left, k.turn)
                              THEN k.turn - least(v_left, k.turn) + x.ord
                          WHEN k.pos = 1 AND v_left > 0 THEN (x.ord - least(v_left, k.turn) - 1) % k.turn + 1
                          ELSE (x.ord - 1) % k.turn + 1 END AS used,
                     k.pos, x.ord
              FROM unnest(v_keys, v_turns) WITH ORDINALITY AS k(key, turn, pos),
                   LATERAL (SELECT l.id, row_number() OVER () AS ord
                            FROM (SELECT j.id
                                  FROM jobq._job AS j
                                  WHERE j.queue = p_queue AND j.fair_key = k.key AND NOT j.parked
                                    AND j.status = 'ready' AND j.run_at <= now() AND j.id <> ALL (v_ids)
                                  ORDER BY j.priority, j.run_at, j.id
                                  LIMIT least(k.turn * v_rounds,
                                              coalesce(v_limit - coalesce((v_running ->> k.key)::integer, 0),
                                                       k.turn * v_rounds))
                                  FOR UPDATE SKIP LOCKED) AS l) AS x
              ORDER BY 3, k.pos, x.ord
              LIMIT v_want) AS c;
        IF v_got IS NULL THEN
            -- None of these keys had a due job free (only scheduled ones, or
            -- locked by other claims): the whole rotation when it was all
            -- of it; else they lose this turn, and the next pass goes on
            -- after them.
            EXIT WHEN cardinality(v_keys) < v_want;
            v_last := v_keys[cardinality(v_keys)];
            v_used := coalesce((v_weights ->> v_last)::integer, 1);
            CONTINUE;
        END IF;
        v_ids := v_ids || v_got;
        v_last := v_got_keys[cardinality(v_got_keys)];
        v_used := v_got_used[cardinality(v_got_used)];
        IF v_limit IS NOT NULL THEN
            SELECT v_running || coalesce(jsonb_object_agg(g.key, coalesce((v_running ->> g.key)::integer, 0) + g.n),
                                         '{}')
            INTO v_running
            FROM (SELECT u.key, count(*) AS n FROM unnest(v_got_keys) AS u(key) GROUP BY u.key) AS g;
        END IF;
    END LOOP;
    IF (v_last, v_used) IS DISTINCT FROM (p_settings.fair_cursor, p_settings.fair_turns) THEN
        PERFORM FROM jobq._queue AS q WHERE q.queue = p_queue FOR NO KEY UPDATE SKIP LOCKED;
        IF FOUND THEN
            UPDATE jobq._queue AS q SET fair_cursor = v_last, fair_turns = v_used WHERE q.queue = p_queue;
        END IF;
    END IF;
    RETURN v_ids;
END
$$;
COMMENT ON FUNCTION jobq._fair_pick(text, integer, jobq._queue) IS
    'Row-locks up to n ready jobs of a fair queue, round-robin across its fair keys from the cursor (weights, per_key_concurrency honoured).';
CREATE OR REPLACE FUNCTION jobq._plain_leases(p_queues text[], p_lease interval, OUT names text[], OUT leases interval[])
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_plain boolean;
BEGIN
    -- When every queue of a claim is plain — not paused, no concurrency or
    -- rate limit, no serial-group job in it — their distinct names (first
    -- occurrence order) and leases (p_lease, else each queue's setting), for
    -- the one-statement fast path. NULLs otherwise: the claim takes the full
    -- path (jobq._pick). The arguments are already validated.
    SELECT array_agg(u.name ORDER BY u.ord), array_agg(coalesce(p_lease, s.lease) ORDER BY u.ord),
           bool_and(NOT s.paused AND s.concurrency IS NULL AND s.rate_limit IS NULL AND NOT s.fair
                    AND NOT EXISTS (SELECT FROM jobq._job AS g WHERE g.queue = u.name AND g.group_key IS NOT NULL))
    INTO names, leases, v_plain
    FROM (SELECT q.name, min(q.ord) AS ord
          FROM unnest(p_queues) WITH ORDINALITY AS q(name, ord)
          GROUP BY q.name) AS u,
         LATERAL jobq._settings(u.name) AS s;
    IF NOT v_plain THEN
        names := NULL;
        leases := NULL;
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._plain_leases(text[], interval) IS
    'Names and leases of the queues of a claim when all are plain (no pause, limits or groups); NULLs otherwise.';
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
                            CASE WHEN v_settings.fair THEN '' END)
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
                            CASE WHEN v_settings.fair THEN '' END)
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
DROP FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer, integer, integer, interval, interval, interval);
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
        -- a fair key: the live ones without get '' (the keyless jobs' turn);
        -- and it counts its running jobs per key by the parked index: park
        -- the leases granted before.
        UPDATE jobq._job AS j SET fair_key = ''
        WHERE j.queue = configure_queue.queue AND j.fair_key IS NULL;
        UPDATE jobq._job AS j SET parked = true
        WHERE j.queue = configure_queue.queue AND NOT j.parked AND j.status = 'running';
    END IF;
    IF configure_queue.concurrency > 0 THEN
        -- A limited queue counts its running jobs by the parked index:
        -- park the leases granted before the limit.
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
CREATE OR REPLACE FUNCTION jobq.reset_queue(queue text) RETURNS boolean
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
CREATE OR REPLACE VIEW jobq.queues AS
    -- Effective settings of every configured queue and every queue with jobs:
    -- its overrides over jobq._queue_defaults, as jobq._settings() applies
    -- them (no function call, so a reader needs no EXECUTE on a private one).
    -- No limit shows as 0 (what configure_queue takes to remove one);
    -- updated_at is NULL for a queue never configured. The names of queues
    -- with jobs come from skip scans (one index probe per name), not from
    -- reading every job.
    SELECT n.queue,
           coalesce(q.max_attempts, d.max_attempts) AS max_attempts,
           coalesce(q.backoff_base, d.backoff_base) AS backoff_base,
           coalesce(q.backoff_cap, d.backoff_cap) AS backoff_cap,
           coalesce(q.backoff_jitter, d.backoff_jitter) AS backoff_jitter,
           coalesce(q.lease, d.lease) AS lease,
           coalesce(q.retention, d.retention) AS retention,
           q.dead_retention,
           coalesce(q.max_payload_bytes, d.max_payload_bytes) AS max_payload_bytes,
           q.updated_at,
           coalesce(q.concurrency, 0) AS concurrency,
           coalesce(q.rate_limit, 0) AS rate_limit,
           CASE WHEN q.rate_limit IS NOT NULL THEN coalesce(q.rate_interval, d.rate_interval) END AS rate_interval,
           coalesce(q.paused, d.paused) AS paused,
           q.timeout,
           coalesce(q.result_retention, d.result_retention) AS result_retention,
           coalesce(q.fair, false) AS fair,
           q.fair_weights,
           coalesce(q.per_key_concurrency, 0) AS per_key_concurrency
    FROM (SELECT c.queue FROM jobq._queue AS c
          UNION SELECT l.queue FROM jobq._live_queues AS l
          UNION SELECT d.queue FROM jobq._dead_queues AS d) AS n
    CROSS JOIN jobq._queue_defaults AS d
    LEFT JOIN jobq._queue AS q ON q.queue = n.queue;
COMMENT ON VIEW jobq.queues IS 'Effective settings (overrides over defaults) of every known queue; 0 concurrency, rate_limit or per_key_concurrency: no limit.';
CREATE VIEW jobq.fair_keys AS
    -- The fair queues' keys at a glance: per queue, its 100 busiest fair
    -- keys (running + ready, then key order) with their ready (due now),
    -- scheduled and running jobs and the age of their oldest ready job;
    -- fair_key NULL for the jobs enqueued without one, rank 1 the busiest.
    -- Reads every live job of the fair queues (jobq._job_fair_idx and the
    -- parked running ones): for dashboards and operators, not hot paths.
    SELECT k.queue, nullif(k.fair_key, '') COLLATE "default" AS fair_key, k.ready, k.scheduled, k.running, k.oldest_ready_age, k.rank
    FROM (SELECT j.queue, j.fair_key,
                 count(*) FILTER (WHERE j.status = 'ready' AND j.run_at <= now()) AS ready,
                 count(*) FILTER (WHERE j.status = 'ready' AND j.run_at > now()) AS scheduled,
                 count(*) FILTER (WHERE j.status = 'running') AS running,
                 now() - min(j.run_at) FILTER (WHERE j.status = 'ready' AND j.run_at <= now()) AS oldest_ready_age,
                 row_number() OVER (PARTITION BY j.queue
                                    ORDER BY count(*) FILTER (WHERE j.status = 'running' OR
                                                              (j.status = 'ready' AND j.run_at <= now())) DESC,
                                             j.fair_key) AS rank
          FROM jobq._job AS j
          JOIN jobq._queue AS q ON q.queue = j.queue AND q.fair
          WHERE j.fair_key IS NOT NULL
          GROUP BY j.queue, j.fair_key) AS k
    WHERE k.rank <= 100;
COMMENT ON VIEW jobq.fair_keys IS
    'Per fair queue, its 100 busiest fair keys: ready, scheduled and running jobs, oldest ready age, rank (NULL key: jobs without one).';

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

GRANT EXECUTE ON FUNCTION
    jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text, jsonb, text, text),
    jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text, jsonb[], text[], text)
TO jobq_producer;
GRANT EXECUTE ON FUNCTION jobq.cancel_jobs(text, text, jsonb, jsonb) TO jobq_admin;
GRANT EXECUTE ON FUNCTION jobq.enqueue_callback(text, jsonb, bigint[], timestamptz, integer, integer, jsonb) TO jobq_producer;
GRANT EXECUTE ON FUNCTION
    jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer, integer, integer, interval, interval, interval, boolean, jsonb, integer)
TO jobq_admin;
GRANT SELECT ON jobq.fair_keys TO jobq_viewer;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

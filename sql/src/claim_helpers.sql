CREATE FUNCTION jobq._taken_in_transaction(p_queue text) RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    -- How many jobs of p_queue this transaction took or holds (take, hold on
    -- the full path): they run inside it, so they hold concurrency slots
    -- until it ends. Read from jobq._taken, which only jobq's functions
    -- write: nothing a caller can set changes what a limit allows.
    SELECT coalesce(sum(t.n), 0)::integer
    FROM jobq._taken AS t
    WHERE t.xact = pg_current_xact_id_if_assigned() AND t.queue = p_queue
$$;
COMMENT ON FUNCTION jobq._taken_in_transaction(text) IS 'Jobs of a queue taken by take() in the current transaction.';

CREATE FUNCTION jobq._queue_list(p_literal text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The queue names of an array literal such as '{emails,sms}' that
    -- reached claim(text) untyped; JQ001 when it is not a valid literal.
    RETURN p_literal::text[];
EXCEPTION WHEN invalid_text_representation THEN
    RAISE EXCEPTION 'jobq: queue must be a queue name or an array literal of queue names, got %',
            pg_catalog.quote_literal(pg_catalog.left(p_literal, 200))
        USING ERRCODE = 'JQ001',
              HINT = 'Pass e.g. ''{emails,sms}'', or a text[] (in node-postgres: $1::text[] with a JS array).';
END
$$;
COMMENT ON FUNCTION jobq._queue_list(text) IS 'Parses an untyped array literal of queue names; JQ001 when malformed.';

CREATE FUNCTION jobq._check_claim_args(p_queues text[], p_n bigint, p_lease interval) RETURNS void
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
COMMENT ON FUNCTION jobq._check_claim_args(text[], bigint, interval) IS
    'Raises the JQ error of the first bad claim/take/hold argument (isolation, n, lease, queue names).';

CREATE FUNCTION jobq._claim_args_ok(p_queues text[], p_n bigint, p_lease interval, p_worker text)
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
COMMENT ON FUNCTION jobq._claim_args_ok(text[], bigint, interval, text) IS
    'True when every claim argument is valid (the hot path''s one test; the _check functions name a bad one).';

CREATE FUNCTION jobq._plain_leases(p_queues text[], p_lease interval, OUT names text[], OUT leases interval[])
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_plain boolean;
    v_name text;
BEGIN
    -- When every queue of a claim is plain — not paused, no concurrency or
    -- rate limit, no serial-group job in it — their distinct names (first
    -- occurrence order) and leases (p_lease, else each queue's setting), for
    -- the one-statement fast path. NULLs otherwise: the claim takes the full
    -- path (jobq._pick). The arguments are already validated. The settings
    -- are read as jobq._settings reads them (its defaults, the queue's
    -- overrides), in this one statement: no call per queue; a claim of one
    -- queue (the common case) in a statement without aggregates.
    IF cardinality(p_queues) = 1 THEN
        v_name := p_queues[array_lower(p_queues, 1)];   -- arrays may start at any index
        SELECT ARRAY[v_name], ARRAY[coalesce(p_lease, s.lease, d.lease)],
               NOT coalesce(s.paused, d.paused) AND s.concurrency IS NULL AND s.rate_limit IS NULL
               AND NOT coalesce(s.fair, false)
               AND NOT EXISTS (SELECT FROM jobq._job AS g WHERE g.queue = v_name AND g.group_key IS NOT NULL)
        INTO names, leases, v_plain
        FROM jobq._queue_defaults AS d
        LEFT JOIN jobq._queue AS s ON s.queue = v_name;
    ELSE
        SELECT array_agg(u.name ORDER BY u.ord), array_agg(coalesce(p_lease, s.lease, d.lease) ORDER BY u.ord),
               bool_and(NOT coalesce(s.paused, d.paused) AND s.concurrency IS NULL AND s.rate_limit IS NULL
                        AND NOT coalesce(s.fair, false)
                        AND NOT EXISTS (SELECT FROM jobq._job AS g WHERE g.queue = u.name AND g.group_key IS NOT NULL))
        INTO names, leases, v_plain
        FROM (SELECT q.name, min(q.ord) AS ord
              FROM unnest(p_queues) WITH ORDINALITY AS q(name, ord)
              GROUP BY q.name) AS u
             CROSS JOIN jobq._queue_defaults AS d
             LEFT JOIN LATERAL (SELECT s.lease, s.paused, s.concurrency, s.rate_limit, s.fair
                                FROM jobq._queue AS s
                                WHERE s.queue = u.name
                                OFFSET 0) AS s ON true;  -- OFFSET 0: a probe of jobq._queue's key per queue
    END IF;
    IF NOT v_plain THEN
        names := NULL;
        leases := NULL;
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._plain_leases(text[], interval) IS
    'Names and leases of the queues of a claim when all are plain (no pause, limits or groups); NULLs otherwise.';

CREATE FUNCTION jobq._crowded_queues(p_names text[], p_now timestamptz) RETURNS text[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    -- Older than this (and than the claiming transaction), a lease at the head is no passing one.
    c_stale CONSTANT interval := interval '50 milliseconds';
BEGIN
    -- Which of the plain queues p_names are crowded with leases: the first
    -- due entry of the queue's claim index is a job leased before the
    -- claiming transaction began and over 50 ms before p_now. The fast path
    -- leases in place (a HOT update: the row stays in the claim index until
    -- it ends, heartbeats or is parked by reap after 10 s), and every claim
    -- steps over the leased rows ahead of the ready ones. That is cheap
    -- while leases are short; when they are held longer (a thousand workers
    -- queueing behind PgBouncer for their acks, slow handlers, many
    -- workers) thousands pile up at the head and every claim pays for all
    -- of them. A claim on a crowded queue parks its own leases instead (out
    -- of the claim index, an ordinary update). Costs one index probe per
    -- queue; a head that is ready, scheduled, freshly leased or leased by
    -- this transaction keeps the HOT lease.
    RETURN ARRAY(
        SELECT q.name
        FROM unnest(p_names) AS q(name)
        WHERE EXISTS (
            SELECT
            FROM (SELECT h.status, h.started_at
                  FROM jobq._job AS h
                  WHERE h.queue = q.name AND NOT h.parked AND h.run_at <= now()
                  ORDER BY h.priority, h.run_at, h.id
                  LIMIT 1) AS head
            WHERE head.status = 'running' AND head.started_at < least(now(), p_now - c_stale)));
END
$$;
COMMENT ON FUNCTION jobq._crowded_queues(text[], timestamptz) IS
    'The plain queues whose claim index starts with a lease older than 50 ms (and than the transaction): their claims park.';

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

CREATE FUNCTION jobq._group_heads_only(p_ids bigint[], p_leases interval[], p_queues text[],
                                       OUT ids bigint[], OUT leases interval[], OUT queues text[])
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
BEGIN
    -- Of the jobs jobq._pick chose and row-locked (p_ids, with their leases
    -- and queues, in claim order), those that still head their serial group
    -- (or have none), checked again with a snapshot taken after the row
    -- locks: a claim of the same group that committed meanwhile is now
    -- visible. A job that goes ahead of older members not due yet also locks
    -- the group's oldest one (jobq._lock_group_head): every claim of the
    -- group locks that same row.
    SELECT array_agg(u.id ORDER BY u.ord), array_agg(u.lease ORDER BY u.ord), array_agg(u.queue ORDER BY u.ord)
    INTO ids, leases, queues
    FROM unnest(p_ids, p_leases, p_queues) WITH ORDINALITY AS u(id, lease, queue, ord)
    JOIN jobq._job AS j ON j.id = u.id
    WHERE j.group_key IS NULL
       OR NOT EXISTS (SELECT FROM jobq._job AS g
                      WHERE g.queue = j.queue AND g.group_key = j.group_key AND g.id <> j.id
                        AND (g.status = 'running'
                             OR (g.id < j.id AND NOT (g.status = 'ready' AND g.run_at > now()
                                                      AND g.started_at IS NULL))));
    SELECT array_agg(u.id ORDER BY u.ord), array_agg(u.lease ORDER BY u.ord), array_agg(u.queue ORDER BY u.ord)
    INTO ids, leases, queues
    FROM unnest(ids, leases, queues) WITH ORDINALITY AS u(id, lease, queue, ord)
    JOIN jobq._job AS j ON j.id = u.id
    WHERE j.group_key IS NULL OR jobq._lock_group_head(j.queue, j.group_key, j.id);
END
$$;
COMMENT ON FUNCTION jobq._group_heads_only(bigint[], interval[], text[]) IS
    'Of the jobs jobq._pick locked, those that still head their serial group (re-checked after the locks).';

CREATE FUNCTION jobq._pick_candidates(p_names text[], p_slots integer[], p_leases interval[], p_n integer,
                                       OUT ids bigint[], OUT leases interval[], OUT queues text[],
                                       OUT grouped boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
BEGIN
    -- jobq._pick's candidates, row-locked (SKIP LOCKED): up to p_n jobs
    -- across the queues p_names, at most p_slots[i] of queue i, most urgent
    -- first (priority, run_at, id), with each queue's lease (p_leases), and
    -- whether any belongs to a serial group (the caller re-checks those
    -- after the locks: jobq._group_heads_only). Per queue, its most urgent
    -- unlocked ready rows (one index scan each); a serial-group job only
    -- when it heads its group's due members and none runs (its row lock
    -- makes this transaction the group's only claimer of it). The group-head
    -- test is written here and in jobq._group_heads_only: inline, the
    -- planner runs it as an index probe per candidate; a helper function
    -- would cost a call per candidate row.
    SELECT array_agg(c.id ORDER BY c.priority, c.run_at, c.id),
           array_agg(c.lease ORDER BY c.priority, c.run_at, c.id),
           array_agg(c.queue ORDER BY c.priority, c.run_at, c.id),
           coalesce(bool_or(c.grouped), false)
    INTO ids, leases, queues, grouped
    FROM (
        SELECT c.id, c.priority, c.run_at, c.grouped, q.name AS queue, q.lease
        FROM unnest(p_names, p_slots, p_leases) AS q(name, slots, lease),
             LATERAL (
                 SELECT j.id, j.priority, j.run_at, j.group_key IS NOT NULL AS grouped
                 FROM jobq._job AS j
                 WHERE j.queue = q.name AND NOT j.parked AND j.status = 'ready' AND j.run_at <= now()
                   AND (j.group_key IS NULL
                        OR NOT EXISTS (SELECT FROM jobq._job AS g
                                       WHERE g.queue = j.queue AND g.group_key = j.group_key AND g.id <> j.id
                                         AND (g.status = 'running'
                                              OR (g.id < j.id AND NOT (g.status = 'ready' AND g.run_at > now()
                                                                       AND g.started_at IS NULL)))))
                 ORDER BY j.priority, j.run_at, j.id
                 LIMIT q.slots
                 FOR UPDATE SKIP LOCKED
             ) AS c
        WHERE q.slots > 0
        ORDER BY c.priority, c.run_at, c.id
        LIMIT p_n
    ) AS c;
END
$$;
COMMENT ON FUNCTION jobq._pick_candidates(text[], integer[], interval[], integer) IS
    'jobq._pick''s candidates: up to n ready jobs across queues within each queue''s slots, most urgent first, row-locked.';

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
            v_got := (jobq._fair_pick(p_queue => v_queue,
                                      p_n => least(v_slots.slots, p_n - cardinality(v_fair_ids)),
                                      p_settings => v_settings, p_place => false)).ids;
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

CREATE FUNCTION jobq._lock_group_head(p_queue text, p_group_key text, p_id bigint) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_head bigint;
BEGIN
    -- Whether this transaction holds the row lock of the oldest live job of
    -- serial group p_group_key in p_queue: p_id itself (which the claim has
    -- locked), or an older member not due yet that p_id goes ahead of,
    -- locked here (SKIP LOCKED: false when another transaction holds it,
    -- never a wait). Every claim of a group job thus locks that one row, so
    -- that a member falling due meanwhile is not claimed beside p_id.
    SELECT g.id INTO v_head
    FROM jobq._job AS g
    WHERE g.queue = p_queue AND g.group_key = p_group_key
    ORDER BY g.id
    LIMIT 1;
    IF v_head IS NULL OR v_head = p_id THEN
        RETURN true;
    END IF;
    PERFORM FROM jobq._job AS g WHERE g.id = v_head FOR NO KEY UPDATE SKIP LOCKED;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION jobq._lock_group_head(text, text, bigint) IS
    'Row-locks the oldest live job of a serial group (SKIP LOCKED) for a claim of a later member; false when another transaction holds it.';

-- jobq 0.13.0 → 0.14.0. One line per change:
--   jobq._fair_pick (issue 28): the key walk lands on each key's first job, and a turn of one job per key locks
--     those jobs where the walk found them (a TID scan; their ids checked after the lock), one index descent per
--     key instead of two; the window read inline, and the head probe skipped when the claim leased in place a
--     job at or before the window's half-way job; a claim of one finds a second key in its walk, not in two probes
--   jobq._claim: a plain claim of more than 10 jobs parks behind a crowd only when its last claim stepped over more than 20 rows of the claim index per job (issue 24)
--   jobq._archive_maintain: its one-prune-at-a-time lock is of the archive only, not of its partitions, so a
--     (auto)vacuum of a partition no longer makes prune skip its partition work
--   jobq._archive_add, jobq._archive_drop: lock_timeout outlasts deadlock_timeout by 1 s (new
--     jobq._autovacuum_yield_timeout), so an autovacuum holding the partition is cancelled before prune gives up

-- Applied by ALTER EXTENSION jobq UPDATE TO '0.14.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.13.0 is installed.

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
    IF jobq.version() <> '0.13.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.13.0 to 0.14.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.14.0');

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '0.14.0'::text
$$;
COMMENT ON FUNCTION jobq.version() IS 'Installed jobq version (semver text).';
CREATE OR REPLACE FUNCTION jobq._fair_pick(p_queue text, p_n integer, p_settings jobq._queue, p_place boolean,
                                OUT ids bigint[], OUT parked boolean[])
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
    v_parked boolean[] := '{}';
    v_got_parked boolean[];
    -- The window where leases may stay in place (jobq._fair_window): its
    -- priority and last job (NULL: none, every lease is parked).
    v_window bigint[];
    v_win_priority integer;
    v_win_run_at timestamptz;
    v_win_id bigint;
    -- Its half-way job, and whether this claim leased in place a job at or
    -- before it (then the head of the claim index is there too: no probe).
    v_half_run_at timestamptz;
    v_half_id bigint;
    v_early boolean := false;
    v_got_early boolean;
    v_head record;
    v_single boolean := false;   -- one key in the whole queue: leases in place, no window needed
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
    v_heads bigint[];   -- each key's first job in the fair index (ready or not), as the walk found it
    v_tids tid[];       -- where those rows were
    v_walk integer;     -- keys the walk looks for
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
    -- statistics). Returns the ids (ids, in no particular order) and which
    -- of them to park (parked, in the same order): with p_place, those
    -- outside the window of the claim index where jobq._leased_in_place is
    -- sure to find a lease in place (jobq._fair_window; the others may stay
    -- in place, a HOT update); without, all of them. Moves the cursor when
    -- it can lock the queue's row (a concurrent claim that cannot leaves it
    -- to the other).
    ids := '{}';
    parked := '{}';
    IF p_n <= 0 THEN
        RETURN;
    END IF;
    IF p_place THEN
        -- The session's window (jobq._fair_window keeps it in this setting),
        -- read here; jobq._fair_window only when there is none yet.
        v_window := string_to_array(nullif(current_setting('jobq.fair_window_' || md5(p_queue), true), ''),
                                    ' ')::bigint[];
        IF v_window IS NULL THEN
            v_window := jobq._fair_window(p_queue, false);
        END IF;
        v_win_priority := v_window[1];
        v_win_run_at := 'epoch'::timestamptz + v_window[2] * interval '1 microsecond';
        v_win_id := v_window[3];
        v_half_run_at := 'epoch'::timestamptz + v_window[4] * interval '1 microsecond';
        v_half_id := v_window[5];
    END IF;
    IF v_limit IS NOT NULL THEN
        PERFORM FROM jobq._queue AS q WHERE q.queue = p_queue FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN;   -- another claimer is counting this queue's keys right now
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
        -- all scheduled gives none). Each probe lands on the key's first
        -- entry in the fair index, its most urgent job (v_heads, v_tids):
        -- the job a turn of one takes when it is ready and due. For a turn
        -- of one job, the walk looks for a second key too: whether the
        -- queue has any other key (v_single, below).
        v_walk := CASE WHEN v_want = 1 THEN 2 ELSE v_want END;
        WITH RECURSIVE upper_keys(key, id, tid) AS (
            (SELECT j.fair_key, j.id, j.ctid FROM jobq._job AS j
             WHERE j.queue = p_queue AND j.fair_key >= v_from AND NOT j.parked
             ORDER BY j.fair_key, j.priority, j.run_at, j.id LIMIT 1)
            UNION ALL
            SELECT n.fair_key, n.id, n.ctid
            FROM upper_keys AS u,
                 LATERAL (SELECT j.fair_key, j.id, j.ctid FROM jobq._job AS j
                          WHERE j.queue = p_queue AND j.fair_key > u.key AND NOT j.parked
                          ORDER BY j.fair_key, j.priority, j.run_at, j.id LIMIT 1) AS n
        ), lower_keys(key, id, tid) AS (
            (SELECT j.fair_key, j.id, j.ctid FROM jobq._job AS j
             WHERE j.queue = p_queue AND j.fair_key >= '' AND j.fair_key < v_from AND NOT j.parked
             ORDER BY j.fair_key, j.priority, j.run_at, j.id LIMIT 1)
            UNION ALL
            SELECT n.fair_key, n.id, n.ctid
            FROM lower_keys AS l,
                 LATERAL (SELECT j.fair_key, j.id, j.ctid FROM jobq._job AS j
                          WHERE j.queue = p_queue AND j.fair_key > l.key AND j.fair_key < v_from AND NOT j.parked
                          ORDER BY j.fair_key, j.priority, j.run_at, j.id LIMIT 1) AS n
        )
        SELECT array_agg(k.key), array_agg(k.turn), array_agg(k.id), array_agg(k.tid)
        INTO v_keys, v_turns, v_heads, v_tids
        FROM (SELECT a.key, a.id, a.tid,
                     least(coalesce((v_weights ->> a.key)::integer, 1),
                           coalesce(v_limit - coalesce((v_running ->> a.key)::integer, 0), 1000)) AS turn
              FROM (SELECT u.key, u.id, u.tid FROM upper_keys AS u
                    UNION ALL
                    SELECT l.key, l.id, l.tid FROM lower_keys AS l) AS a
              WHERE (v_limit IS NULL OR coalesce((v_running ->> a.key)::integer, 0) < v_limit)
              LIMIT v_walk) AS k;
        EXIT WHEN v_keys IS NULL;
        IF v_keys[1] IS DISTINCT FROM v_from THEN
            v_left := 0;   -- the cursor's key has no job now: its round is over
        END IF;
        IF v_weights = '{}' AND v_limit IS NULL AND cardinality(v_keys) = 1 THEN
            -- The rotation found one key in all (fewer than it looked for):
            -- the queue has no other key, so its order is the claim
            -- index's, and its leases stay in place as a plain claim's do,
            -- at the head.
            v_single := p_place AND v_pass = 1 AND v_window IS NOT NULL;
        END IF;
        IF cardinality(v_keys) > v_want THEN
            v_keys := v_keys[1:v_want];
            v_turns := v_turns[1:v_want];
            v_heads := v_heads[1:v_want];
            v_tids := v_tids[1:v_want];
        END IF;
        IF v_weights = '{}' AND v_limit IS NULL AND cardinality(v_keys) >= v_want THEN
            -- At least v_want keys (every turn 1, no limit): one round, the
            -- most urgent due job of each key (no window, no sort of the
            -- jobs taken). A key's first entry (v_heads) is that job when it
            -- is ready, due and free: first lock them where the walk found
            -- them, in one small statement: a TID scan, no second index
            -- descent per key (no condition but the TIDs can find the rows,
            -- so no index serves, whatever the statistics say; a ready job
            -- is never parked). The ids are checked after the lock (OFFSET
            -- 0 keeps that check out of the scan), should a slot hold
            -- another row by now. When every key's first job was taken,
            -- that is the round.
            SELECT array_agg(t.id), array_agg(t.park), bool_or(t.early)
            INTO v_got, v_got_parked, v_got_early
            FROM (SELECT t.id,
                         coalesce(NOT (t.priority = v_win_priority
                                       AND (t.run_at, t.id) <= (v_win_run_at, v_win_id)), true) AND NOT v_single
                             AS park,
                         coalesce(t.priority = v_win_priority
                                  AND (t.run_at, t.id) <= (v_half_run_at, v_half_id), false) AS early
                  FROM jobq._job AS t
                  WHERE t.ctid = ANY (v_tids) AND t.status = 'ready' AND t.run_at <= now() AND t.id <> ALL (v_ids)
                  OFFSET 0
                  FOR UPDATE SKIP LOCKED) AS t
            WHERE t.id = ANY (v_heads);
            IF cardinality(v_got) = cardinality(v_keys) THEN
                v_got_keys := v_keys;
                v_got_used := array_fill(1, ARRAY[cardinality(v_keys)]);
            ELSE
                -- Else the other keys look further in the fair index (a locking
                -- scan of their jobs: the first entry of a key that has none
                -- free, or one another claim holds, leads nowhere); the first
                -- jobs locked above are locked again (a row this transaction
                -- holds is not skipped), and all come in turn order.
                WITH locked AS MATERIALIZED (
                    SELECT t.id,
                           coalesce(NOT (t.priority = v_win_priority
                                         AND (t.run_at, t.id) <= (v_win_run_at, v_win_id)), true) AS park,
                           coalesce(t.priority = v_win_priority
                                    AND (t.run_at, t.id) <= (v_half_run_at, v_half_id), false) AS early
                    FROM jobq._job AS t
                    WHERE t.ctid = ANY (v_tids) AND t.status = 'ready' AND t.run_at <= now()
                      AND t.id <> ALL (v_ids)
                    OFFSET 0
                    FOR UPDATE SKIP LOCKED
                )
                SELECT array_agg(x.id ORDER BY k.pos), array_agg(k.key ORDER BY k.pos), array_agg(1),
                       array_agg(x.park AND NOT v_single ORDER BY k.pos), bool_or(x.early)
                INTO v_got, v_got_keys, v_got_used, v_got_parked, v_got_early
                FROM unnest(v_keys, v_heads) WITH ORDINALITY AS k(key, head, pos)
                     LEFT JOIN locked AS h ON h.id = k.head
                     CROSS JOIN LATERAL (
                         SELECT h.id, h.park, h.early
                         WHERE h.id IS NOT NULL
                         UNION ALL
                         SELECT f.id, f.park, f.early
                         FROM (SELECT j.id,
                                      coalesce(NOT (j.priority = v_win_priority
                                                    AND (j.run_at, j.id) <= (v_win_run_at, v_win_id)), true) AS park,
                                      coalesce(j.priority = v_win_priority
                                               AND (j.run_at, j.id) <= (v_half_run_at, v_half_id), false) AS early
                               FROM jobq._job AS j
                               WHERE h.id IS NULL AND j.queue = p_queue AND j.fair_key = k.key AND NOT j.parked
                                 AND j.status = 'ready' AND j.run_at <= now() AND j.id <> ALL (v_ids)
                               ORDER BY j.priority, j.run_at, j.id
                               LIMIT 1
                               FOR UPDATE SKIP LOCKED) AS f) AS x;
            END IF;
        ELSIF v_weights = '{}' AND v_limit IS NULL AND cardinality(v_keys) = 1 THEN
            -- One key (every turn 1, no limit), fewer than v_want: its
            -- v_want most urgent due jobs, one index scan.
            SELECT array_agg(l.id), array_fill(v_keys[1], ARRAY[count(*)::integer]),
                   array_fill(1, ARRAY[count(*)::integer]), array_agg(l.park AND NOT v_single), bool_or(l.early)
            INTO v_got, v_got_keys, v_got_used, v_got_parked, v_got_early
            FROM (SELECT j.id, coalesce(NOT (j.priority = v_win_priority
                                             AND (j.run_at, j.id) <= (v_win_run_at, v_win_id)), true) AS park,
                         coalesce(j.priority = v_win_priority
                                  AND (j.run_at, j.id) <= (v_half_run_at, v_half_id), false) AS early
                  FROM jobq._job AS j
                  WHERE j.queue = p_queue AND j.fair_key = v_keys[1] AND NOT j.parked
                    AND j.status = 'ready' AND j.run_at <= now() AND j.id <> ALL (v_ids)
                  ORDER BY j.priority, j.run_at, j.id
                  LIMIT v_want
                  FOR UPDATE SKIP LOCKED) AS l;
        ELSE
            -- Enough whole rounds for v_want jobs; a key's quota is its turns
            -- per round times the rounds, capped by its free slots under a limit.
            IF v_weights = '{}' AND v_limit IS NULL THEN
                v_rounds := ceil(v_want::numeric / cardinality(v_turns))::integer;   -- every turn is 1: no query
            ELSE
                v_rounds := ceil(v_want::numeric / (SELECT sum(t) FROM unnest(v_turns) AS t))::integer;
            END IF;
            -- Each key's most urgent due jobs (row-locked, SKIP LOCKED), served
            -- round by round: round r takes the r-th batch of turn jobs of every
            -- key, keys in turn order (the cursor's key, when it goes on, first
            -- takes the turns it has left); the first v_want of that order, and
            -- for each the turns of its round its key has had with it.
            SELECT array_agg(c.id), array_agg(c.key), array_agg(c.used), array_agg(c.park), bool_or(c.early)
            INTO v_got, v_got_keys, v_got_used, v_got_parked, v_got_early
            FROM (SELECT x.id, k.key,
                         CASE WHEN k.pos = 1 AND v_left > 0 AND x.ord <= least(v_left, k.turn) THEN 0
                              WHEN k.pos = 1 AND v_left > 0 THEN 1 + (x.ord - least(v_left, k.turn) - 1) / k.turn
                              ELSE (x.ord - 1) / k.turn END AS round,
                         CASE WHEN k.pos = 1 AND v_left > 0 AND x.ord <= least(v_left, k.turn)
                                  THEN k.turn - least(v_left, k.turn) + x.ord
                              WHEN k.pos = 1 AND v_left > 0 THEN (x.ord - least(v_left, k.turn) - 1) % k.turn + 1
                              ELSE (x.ord - 1) % k.turn + 1 END AS used,
                         k.pos, x.ord, x.park, x.early
                  FROM unnest(v_keys, v_turns) WITH ORDINALITY AS k(key, turn, pos),
                       LATERAL (SELECT l.id, l.park, l.early, row_number() OVER () AS ord
                                FROM (SELECT j.id,
                                             coalesce(NOT (j.priority = v_win_priority
                                                           AND (j.run_at, j.id) <= (v_win_run_at, v_win_id)),
                                                      true) AS park,
                                             coalesce(j.priority = v_win_priority
                                                      AND (j.run_at, j.id) <= (v_half_run_at, v_half_id),
                                                      false) AS early
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
        END IF;
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
        v_parked := v_parked || v_got_parked;
        v_early := v_early OR coalesce(v_got_early, false);
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
        -- One statement: lock the queue's row (SKIP LOCKED), then move the cursor.
        UPDATE jobq._queue AS q SET fair_cursor = v_last, fair_turns = v_used
        FROM (SELECT l.queue FROM jobq._queue AS l WHERE l.queue = p_queue FOR NO KEY UPDATE SKIP LOCKED) AS l
        WHERE q.queue = l.queue;
    END IF;
    ids := v_ids;
    parked := v_parked;
    IF p_place AND v_window IS NOT NULL AND NOT v_single AND NOT v_early THEN
        -- Read the window again for the next claims once the head of the
        -- claim index has passed its half-way job (one probe; at most c_step
        -- index entries per c_step / 2 jobs claimed), so that claims keep
        -- taking jobs inside it. Not when this claim leased in place a job
        -- at or before the half-way job (v_early): that lease is an entry of
        -- the claim index, so the head is at or before it.
        SELECT j.run_at, j.id INTO v_head
        FROM jobq._job AS j
        WHERE j.queue = p_queue AND NOT j.parked AND j.priority = v_win_priority AND j.run_at <= now()
        ORDER BY j.run_at, j.id
        LIMIT 1;
        IF NOT FOUND OR (v_head.run_at, v_head.id) > (v_half_run_at, v_half_id) THEN
            PERFORM jobq._fair_window(p_queue, true);
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._fair_pick(text, integer, jobq._queue, boolean) IS
    'Row-locks up to n ready jobs of a fair queue, round-robin across its fair keys from the cursor (weights, per_key_concurrency honoured), and which to park.';
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
CREATE FUNCTION jobq._autovacuum_yield_timeout() RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    -- A lock_timeout (in ms) that outlasts deadlock_timeout by a second. A
    -- lock request that has waited deadlock_timeout cancels an autovacuum
    -- that holds the lock (unless it prevents wraparound), so a prune waiting
    -- this long gets the partition autovacuum was working on instead of
    -- leaving it for the next run. At most 10 s: a waiting lock of the
    -- default partition holds up the jobs archived into it.
    SELECT least((extract(epoch FROM current_setting('deadlock_timeout')::interval) * 1000)::bigint + 1000,
                 10000)::text;
$$;
COMMENT ON FUNCTION jobq._autovacuum_yield_timeout() IS
    'A lock_timeout that outlasts deadlock_timeout by 1 s (at most 10 s), so that a blocking autovacuum is cancelled before the wait gives up.';
CREATE OR REPLACE FUNCTION jobq._archive_add(p_from date, p_to date) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '1s'
AS $$
DECLARE
    v_from timestamptz := p_from::timestamp AT TIME ZONE 'UTC';
    v_to timestamptz := p_to::timestamp AT TIME ZONE 'UTC';
    v_name text := CASE WHEN p_from IS NULL THEN '_job_archive_until' || to_char(p_to, 'YYYYMMDD')
                        ELSE '_job_archive_p' || to_char(p_from, 'YYYYMMDD') END;
BEGIN
    -- Create the archive's partition of the UTC days [p_from, p_to) of
    -- prune_after (one day, as jobq.prune makes them; p_from NULL: all
    -- before p_to, as the upgrade to 0.7.0 makes for rows already expired),
    -- with the rows of those days moved out of the default partition (rows
    -- that arrived before the day had a partition); false when a partition
    -- covers part of it already. Built as a table and then attached: ATTACH
    -- takes only a SHARE UPDATE EXCLUSIVE lock on jobq._job_archive
    -- (finishing jobs go on archiving meanwhile), where CREATE TABLE ...
    -- PARTITION OF would take an ACCESS EXCLUSIVE one. Attaching scans the
    -- default partition (under an ACCESS EXCLUSIVE lock of it alone) to prove
    -- it holds no row of the range; the CHECK constraint spares the scan of
    -- the new table. A lock not granted within lock_timeout (past
    -- deadlock_timeout: an autovacuum of the default partition yields)
    -- raises lock_not_available.
    PERFORM pg_catalog.set_config('lock_timeout', jobq._autovacuum_yield_timeout(), true);
    IF EXISTS (SELECT FROM jobq.archive_partitions AS p
               WHERE coalesce(p.from_time, '-infinity') < v_to AND p.to_time > coalesce(v_from, '-infinity')) THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE jobq.%I (LIKE jobq._job_archive INCLUDING DEFAULTS INCLUDING CONSTRAINTS, '
                   'CONSTRAINT %I CHECK (prune_after IS NOT NULL AND prune_after >= %L AND prune_after < %L)) '
                   'WITH (autovacuum_vacuum_cost_delay = 0)',
                   v_name, v_name || '_range', coalesce(v_from, '-infinity'), v_to);
    EXECUTE format('WITH moved AS (DELETE FROM jobq._job_archive_kept AS k '
                   'WHERE k.prune_after >= $1 AND k.prune_after < $2 RETURNING k.*) '
                   'INSERT INTO jobq.%I SELECT m.* FROM moved AS m', v_name)
        USING coalesce(v_from, '-infinity'), v_to;
    PERFORM jobq._archive_index(v_name);
    EXECUTE format('ALTER TABLE jobq._job_archive ATTACH PARTITION jobq.%I FOR VALUES FROM (%s) TO (%L)',
                   v_name, coalesce(quote_literal(v_from), 'MINVALUE'), v_to);
    -- Created by an extension script (the upgrade to 0.7.0 places the rows
    -- it converts), the table is a member of the extension, which no later
    -- DROP TABLE could remove, and which CREATE EXTENSION would create again
    -- when a dump is restored. A day partition belongs to the data.
    IF EXISTS (SELECT FROM pg_catalog.pg_depend AS d
               WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                 AND d.objid = format('jobq.%I', v_name)::pg_catalog.regclass
                 AND d.deptype = 'e') THEN
        EXECUTE format('ALTER EXTENSION jobq DROP TABLE jobq.%I', v_name);
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq._archive_add(date, date) IS
    'Creates the archive''s partition of the UTC days [p_from, p_to) of prune_after, moving their rows out of the default partition.';
CREATE OR REPLACE FUNCTION jobq._archive_drop(p_partition text, p_from timestamptz, p_to timestamptz) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '1s'
AS $$
DECLARE
    v_count bigint;
BEGIN
    -- Drop one expired partition of the archive (every row in it is past
    -- its prune_after) with its jobs' error history, edges and gates, after
    -- moving out the jobs jobq.prune keeps: a completed parent with a live
    -- child, a dead or cancelled one with any known child (a forgotten
    -- parent counts as completed). They move an hour ahead, to be checked
    -- again then. Returns how many jobs went, or NULL when a lock was not
    -- granted within lock_timeout (nothing changed: the next prune tries
    -- again). The partition is locked first (EXCLUSIVE: readers go on, a
    -- concurrent retry waits and then finds its job gone), then DROP TABLE
    -- takes an ACCESS EXCLUSIVE lock of jobq._job_archive for the moment
    -- until commit: archiving completions wait that long. lock_timeout
    -- outlasts deadlock_timeout: an autovacuum of the partition yields.
    PERFORM pg_catalog.set_config('lock_timeout', jobq._autovacuum_yield_timeout(), true);
    BEGIN
        EXECUTE format('LOCK TABLE jobq.%I IN EXCLUSIVE MODE', p_partition);
        IF EXISTS (SELECT FROM jobq._job_dep) THEN
            UPDATE jobq._job_archive AS a SET prune_after = now() + interval '1 hour'
            WHERE a.prune_after >= coalesce(p_from, '-infinity') AND a.prune_after < p_to
              AND EXISTS (SELECT FROM jobq._job_dep AS d
                          WHERE d.parent_id = a.id
                            AND (a.status <> 'completed' OR EXISTS (SELECT FROM jobq._job AS c WHERE c.id = d.child_id)));
        END IF;
        SELECT count(*) INTO v_count FROM jobq._job_archive AS a
        WHERE a.prune_after >= coalesce(p_from, '-infinity') AND a.prune_after < p_to;
        IF EXISTS (SELECT FROM jobq._job_error) THEN
            DELETE FROM jobq._job_error AS e
            USING jobq._job_archive AS a
            WHERE a.prune_after >= coalesce(p_from, '-infinity') AND a.prune_after < p_to
              AND a.last_error IS NOT NULL AND e.job_id = a.id;
        END IF;
        IF EXISTS (SELECT FROM jobq._job_dep) THEN
            DELETE FROM jobq._job_dep AS d
            USING jobq._job_archive AS a
            WHERE a.prune_after >= coalesce(p_from, '-infinity') AND a.prune_after < p_to AND d.child_id = a.id;
            DELETE FROM jobq._job_wait AS w
            USING jobq._job_archive AS a
            WHERE a.prune_after >= coalesce(p_from, '-infinity') AND a.prune_after < p_to AND w.job_id = a.id;
        END IF;
        EXECUTE format('DROP TABLE jobq.%I', p_partition);
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        RAISE NOTICE 'jobq: archive partition % is busy; the next prune drops it', p_partition;
        RETURN NULL;
    END;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION jobq._archive_drop(text, timestamptz, timestamptz) IS
    'Drops one expired archive partition with its jobs'' side rows (moving kept parents ahead); NULL when busy.';
CREATE OR REPLACE FUNCTION jobq._archive_maintain() RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_day date;
    v_part record;
    v_dropped bigint := 0;
    v_count bigint;
BEGIN
    -- The archive's partitions: create the day partitions from today
    -- through the horizon (jobq._archive_horizon, plus a day), then drop
    -- those whose whole day has passed. Returns how many jobs the drops
    -- took. One session at a time: the SHARE UPDATE EXCLUSIVE lock of
    -- jobq._job_archive (which only roles that may change jobq tables can
    -- take) lets reads and writes of jobs go on; a concurrent prune skips.
    -- The archive ONLY, not its partitions: (auto)vacuum holds that same
    -- lock of each partition it works on, and must not make prune skip.
    BEGIN
        LOCK TABLE ONLY jobq._job_archive IN SHARE UPDATE EXCLUSIVE MODE NOWAIT;
    EXCEPTION WHEN lock_not_available THEN
        RETURN 0;
    END;
    FOR v_day IN
        SELECT d::date FROM generate_series((now() AT TIME ZONE 'UTC')::date,
                                            ((now() + jobq._archive_horizon()) AT TIME ZONE 'UTC')::date + 1,
                                            interval '1 day') AS d
    LOOP
        BEGIN
            PERFORM jobq._archive_add(v_day, v_day + 1);
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            RAISE NOTICE 'jobq: the archive''s default partition is busy; the next prune creates day %', v_day;
            EXIT;
        END;
    END LOOP;
    FOR v_part IN
        SELECT p.partition, p.from_time, p.to_time FROM jobq.archive_partitions AS p
        WHERE p.to_time <= now()
        ORDER BY p.to_time
    LOOP
        v_count := jobq._archive_drop(v_part.partition, v_part.from_time, v_part.to_time);
        v_dropped := v_dropped + coalesce(v_count, 0);
    END LOOP;
    RETURN v_dropped;
END
$$;
COMMENT ON FUNCTION jobq._archive_maintain() IS
    'Creates the archive''s day partitions ahead and drops the expired ones; returns how many jobs the drops took.';

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

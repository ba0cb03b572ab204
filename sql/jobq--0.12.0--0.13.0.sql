-- jobq 0.12.0 → 0.13.0. One line per change:
--   jobq._claim: the plain path picks, locks and leases in one statement; the crowd probe's calm verdict holds 50 ms for the session's next claims (issue 24)
--   jobq._plain_leases: reads the queues' settings in its own statement, no jobq._settings call (issue 24)
--   jobq._history_kept: reads the default retention directly, no jobq._settings call (issue 24)
--   jobq._finish_lean: deletes, counts and finds the queues to wake in one statement; side-row arrays only for jobs with side rows (issue 24)
--   jobq._finish: calls jobq._finish_lean as an assignment, not a query (issue 24)
--   jobq.complete_many: checks the batch size inline, calling jobq._check_batch only to raise (issue 24)
--   fair queues (issue 28): a fair claim without per_key_concurrency leases in place, as the plain path does
--     (a HOT update; they were all parked), the jobs within the first 1,000 due jobs of the claim index's
--     most urgent priority, where reap and the live counts (jobq._leased_in_place's walk) find them; the
--     others are parked: jobq._claim (its fair branch only); jobq._fair_pick (new signature: p_place, and
--     OUT ids, parked; DROP and CREATE) computes which, also taking one key's jobs, or one job of each of
--     n keys, without a window or sort, and moving the cursor in one statement; new jobq._fair_window (the
--     window, kept per session); jobq._pick calls the new _fair_pick
--   configure_queue: turning fair on locks jobq._job (EXCLUSIVE) while it gives the queue's keyless jobs '', so
--     that a job enqueued by a transaction committing meanwhile is no longer left out of jobq._job_fair_idx;
--     enqueue_many decides a job's fair key in its INSERT (was: from settings read before it); turning fair on
--     or off, or setting per_key_concurrency, parks the leases granted in place before
--   the live keyless jobs of fair queues (that race's leftovers) get '' here

-- Applied by ALTER EXTENSION jobq UPDATE TO '0.13.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.12.0 is installed.

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
    IF jobq.version() <> '0.12.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.12.0 to 0.13.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.13.0');

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '0.13.0'::text
$$;
COMMENT ON FUNCTION jobq.version() IS 'Installed jobq version (semver text).';
CREATE OR REPLACE FUNCTION jobq._history_kept() RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Whether any queue keeps completed jobs as history (retention over 0,
    -- by its own setting or by the default): when none does, finishing a
    -- completed job need not copy its row. (The default read from
    -- jobq._queue_defaults directly: no jobq._settings call per finish.)
    RETURN (SELECT d.retention FROM jobq._queue_defaults AS d) > interval '0'
        OR EXISTS (SELECT FROM jobq._queue AS q WHERE q.retention > interval '0');
END
$$;
COMMENT ON FUNCTION jobq._history_kept() IS 'Whether any queue keeps completed jobs in the archive (retention > 0).';
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
CREATE OR REPLACE FUNCTION jobq._finish_lean(p_ids bigint[], p_lease_tokens uuid[], p_held boolean,
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
    v_limited text[];
    v_rare jsonb;   -- the deleted jobs with side rows, dependents or watchers
    v_keyed_ids bigint[];
    v_keyed_queues text[];
    v_keys text[];
    v_erred bigint[];
    v_children bigint[];
    v_now timestamptz := clock_timestamp();
BEGIN
    -- jobq._finish's common case, lean: completed jobs without results
    -- while no queue keeps history, so the rows are deleted, not copied.
    -- Their side rows go with them (error history, edges and gates), a
    -- job_key records its completion in jobq._key_done, and each is
    -- counted. Returns the ids that left, the queues to wake (serial
    -- groups, concurrency limits), and the parents and watched jobs among
    -- them. Rows go in id order. One statement deletes, counts (one
    -- counter row per queue) and finds the queues to wake.
    WITH gone AS (
        DELETE FROM jobq._job AS j
        USING (SELECT u.* FROM unnest(p_ids, p_lease_tokens) AS u(id, lease_token) ORDER BY u.id) AS f
        WHERE j.id = f.id
          AND (f.lease_token IS NULL OR j.lease_token = f.lease_token)
          AND (NOT p_held OR j.status = 'ready')
        RETURNING j.id, j.queue, j.group_key, j.job_key, j.last_error IS NOT NULL AS erred,
                  j.has_children, j.has_parents, j.watched
    ), counted AS (
        INSERT INTO jobq._counter (queue, bucket, completed)
        SELECT g.queue, date_trunc('minute', now()), count(*) FROM gone AS g GROUP BY g.queue
        RETURNING queue
    )
    SELECT array_agg(g.id),
           jsonb_agg(g) FILTER (WHERE g.group_key IS NOT NULL OR g.job_key IS NOT NULL OR g.erred
                                   OR g.has_children OR g.has_parents OR g.watched),
           ARRAY(SELECT q.queue FROM jobq._queue AS q
                 WHERE q.queue IN (SELECT c.queue FROM counted AS c) AND q.concurrency IS NOT NULL)
    INTO ids, v_rare, v_limited
    FROM gone AS g;
    IF v_rare IS NOT NULL THEN
        -- Jobs with more to them (a serial group, a job_key, an error
        -- history, dependents, parents, a watcher): the common case never
        -- builds these arrays.
        SELECT array_agg(DISTINCT r.queue) FILTER (WHERE r.group_key IS NOT NULL),
               array_agg(r.id) FILTER (WHERE r.job_key IS NOT NULL),
               array_agg(r.queue) FILTER (WHERE r.job_key IS NOT NULL),
               array_agg(r.job_key) FILTER (WHERE r.job_key IS NOT NULL),
               array_agg(r.id) FILTER (WHERE r.erred),
               array_agg(r.id) FILTER (WHERE r.has_children),
               array_agg(r.id) FILTER (WHERE r.has_parents),
               array_agg(r.id) FILTER (WHERE r.watched)
        INTO wake, v_keyed_ids, v_keyed_queues, v_keys, v_erred, parents, v_children, watched
        FROM jsonb_to_recordset(v_rare) AS r(id bigint, queue text, group_key text, job_key text, erred boolean,
                                             has_children boolean, has_parents boolean, watched boolean);
    END IF;
    IF ids IS NULL THEN
        RETURN;
    END IF;
    IF v_erred IS NOT NULL THEN
        -- Only jobs that failed before have an error history to delete
        -- (the common case never opens jobq._job_error).
        DELETE FROM jobq._job_error AS e WHERE e.job_id = ANY (v_erred);
    END IF;
    IF v_children IS NOT NULL THEN
        -- Jobs that depended on others, gone without history: so are their edges and gates.
        DELETE FROM jobq._job_dep AS d WHERE d.child_id = ANY (v_children);
        DELETE FROM jobq._job_wait AS w WHERE w.job_id = ANY (v_children);
    END IF;
    IF v_keys IS NOT NULL THEN
        -- A separate statement, so that finishing jobs without keys (the
        -- common case) never opens jobq._key_done.
        INSERT INTO jobq._key_done AS k (queue, job_key, job_id, finished_at)
        SELECT u.queue, u.job_key, u.id, v_now FROM unnest(v_keyed_queues, v_keys, v_keyed_ids) AS u(queue, job_key, id)
        ON CONFLICT (queue, job_key) DO UPDATE SET job_id = excluded.job_id, finished_at = excluded.finished_at;
    END IF;
    wake := wake || v_limited;
END
$$;
COMMENT ON FUNCTION jobq._finish_lean(bigint[], uuid[], boolean) IS
    'jobq._finish when nothing is kept: deletes completed jobs and their side rows, counts them, records their job_key.';
CREATE OR REPLACE FUNCTION jobq._finish(p_ids bigint[], p_lease_tokens uuid[], p_status text, p_error text,
                             p_held boolean DEFAULT false, p_results jsonb[] DEFAULT NULL,
                             p_cause bigint DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_ids bigint[];
    v_wake text[];
    v_parents bigint[];
    v_watched bigint[];
    v_lean record;
BEGIN
    -- Take live jobs out of the live table as p_status (completed, dead or
    -- cancelled). A non-NULL lease token fences: the job must still be held
    -- under exactly that lease. p_held: jobs the caller's transaction holds
    -- without a lease (take, hold): they must be unleased, and this
    -- transaction is their attempt. Every job is counted (one counter row per
    -- queue); history keeps dead and cancelled jobs, and completed ones when
    -- their queue's retention is over 0 (jobq._finish_kept; when nothing is
    -- kept, jobq._finish_lean). A completed job with a job_key records its
    -- completion in jobq._key_done (for enqueue's unique_for). Finishing a
    -- serial-group job or a job of a concurrency-limited queue frees a slot,
    -- so it wakes that queue's workers. A job that leaves no history takes
    -- its error history (jobq._job_error) with it; only a job that failed
    -- before (last_error set) has any. Rows go in id order (as
    -- jobq._settle_at_commit locks parents: no deadlock with an enqueue of
    -- their children). p_results (paired with p_ids): what completed jobs
    -- report; a job with a result is kept for at least its queue's
    -- result_retention. A job others depend on (has_children) updates their
    -- gates (jobq._finish_dependents); a job that depended on others and
    -- leaves no history takes its edges along. p_cause: the root ancestor of
    -- a cascade cancelling these jobs (recorded as cancelled_by; the caller,
    -- jobq._finish_dependents, then handles their dependents itself). A
    -- watched job (jobq.watch) sends NOTIFY jobq_finished with its id. A job
    -- kept in history keeps its gate, so a retry goes through it again.
    -- Returns the ids that left the live table. Its statements take jobs
    -- by id: planned once per session (generic plans), on index paths only,
    -- so that a plan made while the table held a few rows (a hash join over
    -- a sequential scan of it) does not scan a backlog that arrived since.
    IF p_held THEN
        -- Only jobs this transaction holds (or nobody does): a job another
        -- transaction holds is skipped, never waited for.
        p_ids := ARRAY(SELECT j.id FROM jobq._job AS j
                       WHERE j.id = ANY (p_ids) AND j.status = 'ready'
                       FOR UPDATE SKIP LOCKED);
    END IF;
    IF p_status = 'completed' AND coalesce(cardinality(array_remove(p_results, NULL)), 0) = 0
       AND NOT jobq._history_kept() THEN
        -- An assignment, not a query: a simple expression costs no executor start.
        v_lean := jobq._finish_lean(p_ids => p_ids, p_lease_tokens => p_lease_tokens, p_held => p_held);
        v_ids := v_lean.ids;
        v_wake := v_lean.wake;
        v_parents := v_lean.parents;
        v_watched := v_lean.watched;
    ELSE
        SELECT f.ids, f.wake, f.parents, f.watched INTO v_ids, v_wake, v_parents, v_watched
        FROM jobq._finish_kept(p_ids => p_ids, p_lease_tokens => p_lease_tokens, p_status => p_status,
                               p_error => p_error, p_held => p_held, p_results => p_results,
                               p_cause => p_cause) AS f;
    END IF;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    IF current_setting('jobq.named_jobs', true) = 'on' THEN
        -- This transaction named live jobs (depends_on, members, watch)
        -- whose flags wait for its commit (jobq._settle_at_commit): those
        -- it finishes itself are acted on as if flagged already.
        SELECT ARRAY(SELECT DISTINCT u.id FROM unnest(v_parents || n.parents) AS u(id)),
               ARRAY(SELECT DISTINCT u.id FROM unnest(v_watched || n.watched) AS u(id))
        INTO v_parents, v_watched
        FROM (SELECT ARRAY(SELECT p.id FROM jobq._at_commit AS c, unnest(c.parents) AS p(id)
                           WHERE c.xact = pg_current_xact_id() AND p.id = ANY (v_ids)) AS parents,
                     ARRAY(SELECT w.id FROM jobq._at_commit AS c, unnest(c.watched) AS w(id)
                           WHERE c.xact = pg_current_xact_id() AND w.id = ANY (v_ids)) AS watched) AS n;
    END IF;
    IF cardinality(v_watched) > 0 THEN
        PERFORM pg_notify('jobq_finished', w.id::text) FROM unnest(v_watched) AS w(id);
    END IF;
    IF cardinality(v_parents) > 0 AND p_cause IS NULL THEN
        PERFORM jobq._finish_dependents(v_parents, p_status);
    END IF;
    IF cardinality(v_wake) > 0 THEN
        PERFORM pg_notify('jobq', w.queue) FROM (SELECT DISTINCT u.queue FROM unnest(v_wake) AS u(queue)) AS w;
    END IF;
    RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
END
$$;
COMMENT ON FUNCTION jobq._finish(bigint[], uuid[], text, text, boolean, jsonb[], bigint) IS
    'Deletes live jobs (fenced by lease token, or held by this transaction), counts them, keeps the history and results they need, and updates their dependents.';
CREATE OR REPLACE FUNCTION jobq.complete_many(ids bigint[], lease_tokens uuid[], results jsonb[] DEFAULT NULL) RETURNS integer
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
DROP FUNCTION jobq._fair_pick(text, integer, jobq._queue);
CREATE FUNCTION jobq._fair_window(p_queue text, p_refresh boolean) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    -- As jobq._leased_in_place: its walk reads a queue's due jobs this many at a time.
    c_step CONSTANT integer := 1000;
    -- Where this session keeps a queue's window: a setting per queue.
    v_name text := 'jobq.fair_window_' || md5(p_queue);
    v_window bigint[];
    v_priority integer := -32769;
    v_edge record;
BEGIN
    -- The window of p_queue's claim index in which a fair claim may lease
    -- in place (jobq._fair_pick): the jobs jobq._leased_in_place is sure to
    -- find, the first c_step due jobs of the most urgent priority that has
    -- due jobs (the first step of its walk). As {priority, the last job's
    -- run_at (microseconds since 1970) and id, the half-way job's run_at
    -- and id}; NULL when the queue has no due job. Kept in this session (a
    -- setting per queue) and read from the index again when there is none
    -- or p_refresh: at most c_step index entries.
    IF NOT p_refresh THEN
        v_window := string_to_array(nullif(current_setting(v_name, true), ''), ' ')::bigint[];
        IF v_window IS NOT NULL THEN
            RETURN v_window;
        END IF;
    END IF;
    LOOP
        SELECT j.priority INTO v_priority
        FROM jobq._job AS j
        WHERE j.queue = p_queue AND NOT j.parked AND j.priority > v_priority
        ORDER BY j.priority
        LIMIT 1;
        EXIT WHEN NOT FOUND;
        -- In index order (the scan's; no sort).
        SELECT array_agg(h.run_at) AS run_ats, array_agg(h.id) AS ids
        INTO v_edge
        FROM (SELECT j.run_at, j.id
              FROM jobq._job AS j
              WHERE j.queue = p_queue AND j.priority = v_priority AND NOT j.parked AND j.run_at <= now()
              ORDER BY j.run_at, j.id
              LIMIT c_step) AS h;
        IF v_edge.ids IS NOT NULL THEN
            v_window := ARRAY[v_priority,
                              (extract(epoch FROM v_edge.run_ats[cardinality(v_edge.ids)]) * 1000000)::bigint,
                              v_edge.ids[cardinality(v_edge.ids)],
                              (extract(epoch FROM v_edge.run_ats[(cardinality(v_edge.ids) + 1) / 2]) * 1000000)::bigint,
                              v_edge.ids[(cardinality(v_edge.ids) + 1) / 2]];
            EXIT;
        END IF;
    END LOOP;
    PERFORM set_config(v_name, coalesce(array_to_string(v_window, ' '), ''), false);
    RETURN v_window;
END
$$;
COMMENT ON FUNCTION jobq._fair_window(text, boolean) IS
    'Where a fair claim may lease in place: the first 1,000 due jobs of the claim index (the first step of jobq._leased_in_place''s walk), kept per session.';
CREATE FUNCTION jobq._fair_pick(p_queue text, p_n integer, p_settings jobq._queue, p_place boolean,
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
    -- statistics). Returns the ids in the order served (ids) and which
    -- of them to park (parked): with p_place, those outside the window of
    -- the claim index where jobq._leased_in_place is sure to find a lease in
    -- place (jobq._fair_window; the others may stay in place, a HOT update);
    -- without, all of them. Moves the cursor when it can lock
    -- the queue's row (a concurrent claim that cannot leaves it to the other).
    ids := '{}';
    parked := '{}';
    IF p_n <= 0 THEN
        RETURN;
    END IF;
    IF p_place THEN
        v_window := jobq._fair_window(p_queue, false);
        v_win_priority := v_window[1];
        v_win_run_at := 'epoch'::timestamptz + v_window[2] * interval '1 microsecond';
        v_win_id := v_window[3];
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
        IF v_weights = '{}' AND v_limit IS NULL AND cardinality(v_keys) = 1 THEN
            -- One key (every turn 1, no limit): its v_want most urgent due
            -- jobs, one index scan. When the queue has no other key (the
            -- rotation found none), its order is the claim index's: its
            -- leases stay in place as a plain claim's do, at the head.
            IF p_place AND v_pass = 1 AND v_window IS NOT NULL
               AND (cardinality(v_keys) < v_want
                    OR NOT EXISTS (SELECT FROM jobq._job AS o
                                   WHERE o.queue = p_queue AND o.fair_key > v_keys[1] AND NOT o.parked)
                       AND NOT EXISTS (SELECT FROM jobq._job AS o
                                       WHERE o.queue = p_queue AND o.fair_key >= '' AND o.fair_key < v_keys[1]
                                         AND NOT o.parked)) THEN
                v_single := true;
            END IF;
            SELECT array_agg(l.id), array_fill(v_keys[1], ARRAY[count(*)::integer]),
                   array_fill(1, ARRAY[count(*)::integer]), array_agg(l.park AND NOT v_single)
            INTO v_got, v_got_keys, v_got_used, v_got_parked
            FROM (SELECT j.id, coalesce(NOT (j.priority = v_win_priority
                                             AND (j.run_at, j.id) <= (v_win_run_at, v_win_id)), true) AS park
                  FROM jobq._job AS j
                  WHERE j.queue = p_queue AND j.fair_key = v_keys[1] AND NOT j.parked
                    AND j.status = 'ready' AND j.run_at <= now() AND j.id <> ALL (v_ids)
                  ORDER BY j.priority, j.run_at, j.id
                  LIMIT v_want
                  FOR UPDATE SKIP LOCKED) AS l;
        ELSIF v_weights = '{}' AND v_limit IS NULL AND cardinality(v_keys) >= v_want THEN
            -- At least v_want keys (every turn 1, no limit): one round, the
            -- most urgent due job of each key, keys in turn order (no window,
            -- no sort of the jobs taken).
            SELECT array_agg(x.id ORDER BY k.pos), array_agg(k.key ORDER BY k.pos), array_agg(1),
                   array_agg(x.park ORDER BY k.pos)
            INTO v_got, v_got_keys, v_got_used, v_got_parked
            FROM unnest(v_keys) WITH ORDINALITY AS k(key, pos),
                 LATERAL (SELECT j.id, coalesce(NOT (j.priority = v_win_priority
                                                     AND (j.run_at, j.id) <= (v_win_run_at, v_win_id)), true) AS park
                          FROM jobq._job AS j
                          WHERE j.queue = p_queue AND j.fair_key = k.key AND NOT j.parked
                            AND j.status = 'ready' AND j.run_at <= now() AND j.id <> ALL (v_ids)
                          ORDER BY j.priority, j.run_at, j.id
                          LIMIT 1
                          FOR UPDATE SKIP LOCKED) AS x;
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
            SELECT array_agg(c.id), array_agg(c.key), array_agg(c.used), array_agg(c.park)
            INTO v_got, v_got_keys, v_got_used, v_got_parked
            FROM (SELECT x.id, k.key,
                         CASE WHEN k.pos = 1 AND v_left > 0 AND x.ord <= least(v_left, k.turn) THEN 0
                              WHEN k.pos = 1 AND v_left > 0 THEN 1 + (x.ord - least(v_left, k.turn) - 1) / k.turn
                              ELSE (x.ord - 1) / k.turn END AS round,
                         CASE WHEN k.pos = 1 AND v_left > 0 AND x.ord <= least(v_left, k.turn)
                                  THEN k.turn - least(v_left, k.turn) + x.ord
                              WHEN k.pos = 1 AND v_left > 0 THEN (x.ord - least(v_left, k.turn) - 1) % k.turn + 1
                              ELSE (x.ord - 1) % k.turn + 1 END AS used,
                         k.pos, x.ord, x.park
                  FROM unnest(v_keys, v_turns) WITH ORDINALITY AS k(key, turn, pos),
                       LATERAL (SELECT l.id, l.park, row_number() OVER () AS ord
                                FROM (SELECT j.id,
                                             coalesce(NOT (j.priority = v_win_priority
                                                           AND (j.run_at, j.id) <= (v_win_run_at, v_win_id)),
                                                      true) AS park
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
    IF p_place AND v_window IS NOT NULL AND NOT v_single THEN
        -- Read the window again for the next claims once the head of the
        -- claim index has passed its half-way job (one probe; at most c_step
        -- index entries per c_step / 2 jobs claimed), so that claims keep
        -- taking jobs inside it.
        SELECT j.run_at, j.id INTO v_head
        FROM jobq._job AS j
        WHERE j.queue = p_queue AND NOT j.parked AND j.priority = v_win_priority AND j.run_at <= now()
        ORDER BY j.run_at, j.id
        LIMIT 1;
        IF NOT FOUND OR (v_head.run_at, v_head.id)
                        > ('epoch'::timestamptz + v_window[4] * interval '1 microsecond', v_window[5]) THEN
            PERFORM jobq._fair_window(p_queue, true);
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._fair_pick(text, integer, jobq._queue, boolean) IS
    'Row-locks up to n ready jobs of a fair queue, round-robin across its fair keys from the cursor (weights, per_key_concurrency honoured), and which to park.';
CREATE OR REPLACE FUNCTION jobq._pick(p_queues text[], p_n integer, p_lease interval)
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
CREATE OR REPLACE FUNCTION jobq.configure_queue(
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
CREATE OR REPLACE FUNCTION jobq.enqueue_many(
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
                            (SELECT '' FROM jobq._queue AS q WHERE q.queue = enqueue_many.queue AND q.fair))
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
                            (SELECT '' FROM jobq._queue AS q WHERE q.queue = enqueue_many.queue AND q.fair))
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

-- A job enqueued without a fair key while configure_queue turned its queue
-- fair (0.12.0 had that race) is in no fair index: give it the keyless turn.
UPDATE jobq._job AS j SET fair_key = ''
WHERE j.fair_key IS NULL AND j.queue IN (SELECT q.queue FROM jobq._queue AS q WHERE q.fair);

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

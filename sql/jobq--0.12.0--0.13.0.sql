-- jobq 0.12.0 → 0.13.0. One line per change:
--   jobq._claim: the plain path picks, locks and leases in one statement; the crowd probe's calm verdict holds 50 ms for the session's next claims (issue 24)
--   jobq._plain_leases: reads the queues' settings in its own statement, no jobq._settings call (issue 24)
--   jobq._history_kept: reads the default retention directly, no jobq._settings call (issue 24)
--   jobq._finish_lean: deletes, counts and finds the queues to wake in one statement; side-row arrays only for jobs with side rows (issue 24)
--   jobq._finish: calls jobq._finish_lean as an assignment, not a query (issue 24)
--   jobq.complete_many: checks the batch size inline, calling jobq._check_batch only to raise (issue 24)

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

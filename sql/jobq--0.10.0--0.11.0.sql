-- jobq 0.10.0 → 0.11.0. One line per change:
--   running jobs under control (issue 26, items 1-2):
--   * jobq.cancel() and jobq.cancel_jobs() of a running job send NOTIFY jobq_cancel ('id:lease_token' pairs, new
--     jobq._notify_cancelled) at commit, so that its worker stops the handler at once, not at its next heartbeat
--   * new jobq.progress(id, lease_token, progress jsonb) (jobq_worker): a running job's progress in the new column
--     jobq._job.progress (capped by max_payload_bytes, JQ003), shown by jobq.jobs (new last column progress) and
--     returned by claim (jobq.job gets the attribute progress; jobq._claim and jobq._lock_ready return it)

-- Applied by ALTER EXTENSION jobq UPDATE TO '0.11.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.10.0 is installed.

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
    IF jobq.version() <> '0.10.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.10.0 to 0.11.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.11.0');

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '0.11.0'::text
$$;
COMMENT ON FUNCTION jobq.version() IS 'Installed jobq version (semver text).';

-- running jobs (issue 26): a job's progress, on the live row and in the row a claim returns
ALTER TABLE jobq._job ADD COLUMN progress jsonb;
COMMENT ON COLUMN jobq._job.progress IS
    'The last progress its holder reported (jobq.progress: any small JSON value); kept while the job is live, so that a later attempt can resume from it.';
ALTER TYPE jobq.job ADD ATTRIBUTE progress jsonb;
COMMENT ON TYPE jobq.job IS 'A claimed job. Pass lease_token to complete/fail/heartbeat/progress: it fences the lease. progress: the last one reported (by an earlier attempt, after a retry).';

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
        SELECT array_agg(p.id), array_agg(p.lease), array_agg(true) INTO v_ids, v_leases, v_parked
        FROM jobq._pick(p_queues => p_queues, p_n => p_n, p_lease => p_lease, p_now => v_now) AS p;
    END IF;
    RETURN QUERY
    WITH leased AS (
        UPDATE jobq._job AS j
        SET status = 'running',
            parked = p.parked,
            attempts = j.attempts + 1,
            lease_token = gen_random_uuid(),
            lease_expires_at = v_now + p.lease,
            worker = p_worker,
            started_at = v_now
        FROM unnest(v_ids, v_leases, v_parked) AS p(id, lease, parked)
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
    SELECT array_agg(p.id) INTO v_ids FROM jobq._pick(ARRAY[p_queue], p_n, NULL, clock_timestamp()) AS p;
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
CREATE OR REPLACE FUNCTION jobq.cancel(id bigint) RETURNS boolean
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
CREATE OR REPLACE FUNCTION jobq.cancel_jobs(queue text, status text DEFAULT NULL, payload_contains jsonb DEFAULT NULL)
RETURNS integer
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
    -- payload_contains (@>) when given. Running jobs' holders are notified
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
COMMENT ON FUNCTION jobq.cancel_jobs(text, text, jsonb) IS
    'Cancels the live jobs of a queue (optionally only ready, scheduled, running or waiting ones, or those whose payload contains a filter); returns how many (running ones'' holders are notified).';
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
               j.progress
        FROM jobq._job AS j
        UNION ALL
        SELECT a.id, a.queue, a.payload, a.status, a.priority::integer, a.run_at, a.attempts, a.max_attempts,
               a.job_key, a.worker, NULL::timestamptz, a.last_error, a.created_at, a.started_at, a.finished_at,
               a.group_key, a.timeout, NULL::timestamptz, a.result, a.cancelled_by, NULL::jsonb
        FROM jobq._job_archive AS a
    ) AS u
    WHERE (SELECT NOT EXISTS (SELECT FROM jobq._queue_grant AS g WHERE g.privilege = 'read'))
       OR coalesce((SELECT bool_or(p.held) FROM jobq._read_pattern AS p
                    WHERE u.queue LIKE p.queue_like), true);
COMMENT ON VIEW jobq.jobs IS 'All live and finished jobs with a single status column (for operators).';

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

GRANT EXECUTE ON FUNCTION jobq.progress(bigint, uuid, jsonb) TO jobq_worker;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

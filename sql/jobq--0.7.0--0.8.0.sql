-- jobq 0.7.0 → 0.8.0: claims that do not pile up behind their own leases. One line per change:
--   * new jobq._crowded_queues(names, now): the plain queues whose claim index starts with a lease older
--     than 50 ms
--   * jobq._claim(): on such a crowded queue the fast path parks its leases (out of the claim index)
--     instead of leasing in place, so a thousand workers whose acks queue behind PgBouncer, or many
--     slow handlers, no longer make every claim step over thousands of leased rows
--
-- Applied by ALTER EXTENSION jobq UPDATE TO '0.8.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.7.0 is installed.

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
    IF jobq.version() <> '0.7.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.7.0 to 0.8.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.8.0');

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '0.8.0'::text
$$;
COMMENT ON FUNCTION jobq.version() IS 'Installed jobq version (semver text).';

CREATE FUNCTION jobq._crowded_queues(p_names text[], p_now timestamptz) RETURNS text[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
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

CREATE OR REPLACE FUNCTION jobq._claim(p_queues text[], p_n integer, p_worker text, p_lease interval)
RETURNS SETOF jobq.job
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    v_plain record;
    v_ids bigint[];
    v_leases interval[];
    v_now timestamptz;
    v_park text[];
BEGIN
    -- What both claim() overloads do once their arguments are checked:
    -- lease up to p_n ready jobs across p_queues, most urgent first
    -- (priority, run_at, id), each under its queue's lease unless given;
    -- paused queues, concurrency and rate limits and serial groups honoured.
    v_now := clock_timestamp();
    v_plain := jobq._plain_leases(p_queues, p_lease);
    IF v_plain.names IS NOT NULL THEN
        -- Plain queues: one statement picks (an index scan per queue) and
        -- leases. The lease writes no indexed column: a HOT update on the
        -- row's own page; the row stays in the claim index, and claims skip
        -- it by its status. On a queue crowded with older leases
        -- (jobq._crowded_queues) the lease parks the row instead, so that
        -- leases do not pile up ahead of every later claim.
        v_park := jobq._crowded_queues(v_plain.names, v_now);
        RETURN QUERY
        WITH leased AS (
            UPDATE jobq._job AS j
            SET status = 'running',
                parked = (j.queue = ANY (v_park)),
                attempts = j.attempts + 1,
                lease_token = gen_random_uuid(),
                lease_expires_at = v_now + v_plain.leases[array_position(v_plain.names, j.queue)],
                worker = p_worker,
                started_at = v_now
            WHERE j.id = ANY (ARRAY(
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
                LIMIT p_n))
            RETURNING j.*
        )
        SELECT l.id, l.queue, l.payload, l.priority::integer, l.attempts, l.max_attempts, l.run_at,
               l.created_at, l.lease_token, l.lease_expires_at, l.worker, l.job_key, l.last_error, l.group_key,
               l.timeout
        FROM leased AS l
        ORDER BY l.priority, l.run_at, l.id;
        RETURN;
    END IF;
    -- Limits, pause or serial groups: jobq._pick counts and locks. These
    -- leases are parked at once: limited queues count their running jobs by
    -- the parked index.
    SELECT array_agg(p.id), array_agg(p.lease) INTO v_ids, v_leases
    FROM jobq._pick(p_queues, p_n, p_lease, v_now) AS p;
    RETURN QUERY
    WITH leased AS (
        UPDATE jobq._job AS j
        SET status = 'running',
            parked = true,
            attempts = j.attempts + 1,
            lease_token = gen_random_uuid(),
            lease_expires_at = v_now + p.lease,
            worker = p_worker,
            started_at = v_now
        FROM unnest(v_ids, v_leases) AS p(id, lease)
        WHERE j.id = p.id
        RETURNING j.*
    )
    SELECT l.id, l.queue, l.payload, l.priority::integer, l.attempts, l.max_attempts, l.run_at,
           l.created_at, l.lease_token, l.lease_expires_at, l.worker, l.job_key, l.last_error, l.group_key,
           l.timeout
    FROM leased AS l
    ORDER BY l.priority, l.run_at, l.id;
END
$$;
COMMENT ON FUNCTION jobq._claim(text[], integer, text, interval) IS
    'The claim itself (arguments already checked): fast path for plain queues, jobq._pick otherwise.';

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

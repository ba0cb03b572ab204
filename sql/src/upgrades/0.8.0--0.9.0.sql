-- jobq 0.8.0 → 0.9.0: a producer's open transaction no longer freezes the jobs it names. One line per change:
--   workflows, watch and cascades (issue 25, items 1-3):
--   plans that do not depend on statistics, costs that do not grow with the backlog (issue 24):
--     the claim paths (_claim, _pick, _lock_ready, _plain_leases, _crowded_queues) pin their plans: no sort, no bitmap scan
--     _job.parked_expires_at (generated) and _job_parked_expiry_idx: parked leases by expiry, without the ready or waiting jobs
--     _leased_in_place: the leases in place, walked at the head of each queue's claim order; _running: every running job
--     reap reads only leases (parked by index, in place by _leased_in_place), its plans pinned
--     _queue_counts, _live_queues, _dead_queues: counts exact up to 10,000 jobs per queue, estimated above, names by skip scans
--     stats (new column estimated), queues and workers read those; jobq_viewer may call _queue_counts and _running
--   per-queue privileges (issue 25, item 4):
--   smaller fixes (issue 25, item 5):
--
-- Applied by ALTER EXTENSION jobq UPDATE TO '0.9.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.8.0 is installed.

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
    IF jobq.version() <> '0.8.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.8.0 to 0.9.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.9.0');

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

-- @replace-function jobq.version()

-- tables (new or changed), each section its own

-- plans and costs (issue 24): the lease expiry of parked jobs, by an index of its own
ALTER TABLE jobq._job ADD COLUMN parked_expires_at timestamptz
    GENERATED ALWAYS AS (CASE WHEN parked THEN lease_expires_at END) STORED;
COMMENT ON COLUMN jobq._job.parked_expires_at IS
    'The lease expiry of a parked running job (generated from parked and lease_expires_at; NULL otherwise): what jobq.reap finds expired parked leases by.';
CREATE INDEX _job_parked_expiry_idx ON jobq._job (parked_expires_at)
    WHERE parked_expires_at IS NOT NULL;

-- workflows, watch and cascades (issue 25, items 1-3)

-- plans and costs (issue 24)

-- @view jobq._live_queues
-- @view jobq._dead_queues
-- @function jobq._leased_in_place(timestamptz)
-- @function jobq._running()
-- @function jobq._live_sample(timestamptz)
-- @function jobq._queue_counts()
-- @replace-function jobq._plain_leases(text[], interval)
-- @replace-function jobq._crowded_queues(text[], timestamptz)
-- @replace-function jobq._pick(text[], integer, interval, timestamptz)
-- @replace-function jobq._claim(text[], integer, text, interval)
-- @replace-function jobq._lock_ready(text, integer)
-- @replace-function jobq.reap(integer)
-- @replace-view jobq.stats
-- @replace-view jobq.queues
-- @replace-view jobq.workers
GRANT EXECUTE ON FUNCTION jobq._queue_counts(), jobq._running() TO jobq_viewer;
GRANT SELECT ON jobq._live_queues, jobq._dead_queues TO jobq_admin;

-- per-queue privileges (issue 25, item 4)

-- smaller fixes (issue 25, item 5)

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

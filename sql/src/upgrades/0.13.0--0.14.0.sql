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

-- @replace-function jobq.version()
-- @replace-function jobq._fair_pick(text, integer, jobq._queue, boolean)
-- @replace-function jobq._claim(text[], integer, text, interval)
-- @function jobq._autovacuum_yield_timeout()
-- @replace-function jobq._archive_add(date, date)
-- @replace-function jobq._archive_drop(text, timestamptz, timestamptz)
-- @replace-function jobq._archive_maintain()

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

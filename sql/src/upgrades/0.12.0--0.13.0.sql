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

-- @replace-function jobq.version()
-- @replace-function jobq._history_kept()
-- @replace-function jobq._plain_leases(text[], interval)
-- @replace-function jobq._claim(text[], integer, text, interval)
-- @replace-function jobq._finish_lean(bigint[], uuid[], boolean)
-- @replace-function jobq._finish(bigint[], uuid[], text, text, boolean, jsonb[], bigint)
-- @replace-function jobq.complete_many(bigint[], uuid[], jsonb[])

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

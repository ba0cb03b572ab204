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

-- @replace-function jobq.version()
-- @replace-function jobq._history_kept()
-- @replace-function jobq._plain_leases(text[], interval)
-- @replace-function jobq._claim(text[], integer, text, interval)
-- @replace-function jobq._finish_lean(bigint[], uuid[], boolean)
-- @replace-function jobq._finish(bigint[], uuid[], text, text, boolean, jsonb[], bigint)
-- @replace-function jobq.complete_many(bigint[], uuid[], jsonb[])
DROP FUNCTION jobq._fair_pick(text, integer, jobq._queue);
-- @function jobq._fair_window(text, boolean)
-- @function jobq._fair_pick(text, integer, jobq._queue, boolean)
-- @replace-function jobq._pick(text[], integer, interval)
-- @replace-function jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer, integer, integer, interval, interval, interval, boolean, jsonb, integer)
-- @replace-function jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text, jsonb[], text[], text)

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

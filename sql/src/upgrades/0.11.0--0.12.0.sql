-- jobq 0.11.0 → 0.12.0. One line per change:
--   claim of a rate-limited queue (jobq._pick, jobq._queue_slots): the time its starts are counted,
--     recorded and stamped as started_at is read after the queue's lock (it was read when the claim
--     began), so a claim that stalls before the lock no longer counts a window whose starts a newer
--     claim had deleted, and over-admits no more.
--   next_run_at: JQ020 for a queue with consume grants the caller lacks (as claim), so that only who may
--     claim a queue learns when its next job falls due.
--   enqueue, enqueue_many: on_duplicate ('keep', the default; 'replace': debounce; 'replace_payload':
--     throttle) for keyed jobs (issue 28 §3); new helpers _check_on_duplicate, _replace_job

-- Applied by ALTER EXTENSION jobq UPDATE TO '0.12.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.11.0 is installed.

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
    IF jobq.version() <> '0.11.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.11.0 to 0.12.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.12.0');

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

-- @replace-function jobq.version()

-- The rate limit's clock after the queue's lock: new signatures (no p_now; the start time returned).
DROP FUNCTION jobq._pick(text[], integer, interval, timestamptz);
DROP FUNCTION jobq._queue_slots(text, integer, timestamptz);
-- @function jobq._queue_slots(text, integer)
-- @function jobq._pick(text[], integer, interval)
-- @replace-function jobq._claim(text[], integer, text, interval)
-- @replace-function jobq._lock_ready(text, integer)
-- @replace-function jobq.next_run_at(text[])
-- on_duplicate (issue 28): a new trailing parameter, so DROP and CREATE (and the GRANTs below).
DROP FUNCTION jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text);
DROP FUNCTION jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text);
-- @function jobq._check_on_duplicate(text, boolean, text)
-- @function jobq._replace_job(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, boolean, boolean)
-- @function jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text, text)
-- @function jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text, text)

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text, text),
    jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text, text)
TO jobq_producer;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

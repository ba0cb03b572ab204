-- jobq 0.11.0 → 0.12.0. One line per change:
--   claim of a rate-limited queue (jobq._pick, jobq._queue_slots): the time its starts are counted,
--     recorded and stamped as started_at is read after the queue's lock (it was read when the claim
--     began), so a claim that stalls before the lock no longer counts a window whose starts a newer
--     claim had deleted, and over-admits no more.
--   next_run_at: JQ020 for a queue with consume grants the caller lacks (as claim), so that only who may
--     claim a queue learns when its next job falls due.
--   enqueue, enqueue_many: on_duplicate ('keep', the default; 'replace': debounce; 'replace_payload':
--     throttle) for keyed jobs (issue 28 §3); new helpers _check_on_duplicate, _replace_job
--   job metadata (issue 27): new column jobq._job.meta (and jobq._job_archive.meta), a JSON object beside the
--     payload capped like it (JQ002 not an object, JQ003 over max_payload_bytes; new jobq._check_meta,
--     jobq._check_metas); enqueue(…, meta jsonb), enqueue_many(…, metas jsonb[]), enqueue_callback(…, meta jsonb)
--     and jobq._insert_job(…, p_meta) take it (new signatures: DROP and CREATE, GRANTs again); claim returns it
--     (jobq.job gets the attribute meta; jobq._claim, jobq._lock_ready), jobq.jobs shows it (new last column meta),
--     _finish_kept keeps it in the archive, retry, retry_dead and _restore_descendants bring it back;
--     cancel_jobs(…, meta_contains jsonb) cancels only jobs whose meta contains it (@>)
--   fair queues (issue 28): configure_queue(…, fair, fair_weights, per_key_concurrency) (new signature, with
--     jobq._queue.fair, fair_weights, per_key_concurrency, fair_cursor, fair_turns); enqueue(…, fair_key) and
--     enqueue_many(…, fair_keys) (new signatures, with jobq._job.fair_key and jobq._job_fair_idx);
--     a fair queue is claimed round-robin across its keys (new jobq._fair_pick, called by jobq._claim for
--     one fair queue and by jobq._pick for fair queues among others;
--     jobq._plain_leases sends fair queues to it); _insert_job takes the fair key; _settings, reset_queue
--     know the new settings; new checks _check_fair_key, _check_fair_keys, _check_fair_grouping,
--     _check_fair_weights; jobq.queues shows fair, fair_weights, per_key_concurrency; new view jobq.fair_keys
--     (a fair queue's 100 busiest keys: ready, scheduled, running, oldest ready age); the archive keeps a
--     finished job's fair key (jobq._job_archive.fair_key, written by _finish_kept) and retry, retry_dead and
--     _restore_descendants put it back ('' in a fair queue when it had none)

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

-- job metadata (issue 27)
ALTER TABLE jobq._job ADD COLUMN meta jsonb;
COMMENT ON COLUMN jobq._job.meta IS
    'The JSON object its producer attached beside the payload (enqueue''s meta: tags, W3C trace context), capped like the payload; NULL when none.';
ALTER TABLE jobq._job_archive ADD COLUMN meta jsonb;
COMMENT ON COLUMN jobq._job_archive.meta IS 'The job''s meta (enqueue''s meta), kept with it.';
ALTER TYPE jobq.job ADD ATTRIBUTE meta jsonb;
COMMENT ON TYPE jobq.job IS 'A claimed job. Pass lease_token to complete/fail/heartbeat/progress: it fences the lease. progress: the last one reported (by an earlier attempt, after a retry). meta: what the producer attached beside the payload (tags, trace context), or NULL.';
-- @function jobq._check_meta(jsonb, text, integer)
-- @function jobq._check_metas(jsonb[], integer, integer)

-- fair queues (issue 28): the settings, the job's key and the index the fair claim reads.
ALTER TABLE jobq._queue ADD COLUMN fair boolean;
ALTER TABLE jobq._queue ADD COLUMN fair_weights jsonb;
ALTER TABLE jobq._queue ADD COLUMN per_key_concurrency integer;
ALTER TABLE jobq._queue ADD COLUMN fair_cursor text;
ALTER TABLE jobq._queue ADD COLUMN fair_turns integer;
ALTER TABLE jobq._queue ADD CONSTRAINT queue_per_key_concurrency_range CHECK (per_key_concurrency BETWEEN 1 AND 10000);
ALTER TABLE jobq._job ADD COLUMN fair_key text COLLATE "C";
ALTER TABLE jobq._job ADD CONSTRAINT job_fair_key_length CHECK (char_length(fair_key) <= 512);
COMMENT ON COLUMN jobq._job.fair_key IS
    'The fair key (enqueue''s fair_key): a fair queue serves its keys round-robin; '''' for a job of a fair queue enqueued without one.';
CREATE INDEX _job_fair_idx ON jobq._job (queue, fair_key, priority, run_at, id)
    WHERE fair_key IS NOT NULL AND NOT parked;
ALTER TABLE jobq._job_archive ADD COLUMN fair_key text COLLATE "C";
COMMENT ON COLUMN jobq._job_archive.fair_key IS
    'The job''s fair key (enqueue''s fair_key), kept so that a retry puts it back in its key''s turn.';

DROP FUNCTION jobq._insert_job(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, boolean);
-- @function jobq._insert_job(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, boolean, jsonb, text)
DROP FUNCTION jobq.enqueue_callback(text, jsonb, bigint[], timestamptz, integer, integer);
-- @function jobq.enqueue_callback(text, jsonb, bigint[], timestamptz, integer, integer, jsonb)
-- @replace-function jobq._finish_kept(bigint[], uuid[], text, text, boolean, jsonb[], bigint)
-- @replace-function jobq.retry(bigint)
-- @replace-function jobq.retry_dead(text)
-- @replace-function jobq._restore_descendants(bigint)
DROP FUNCTION jobq.cancel_jobs(text, text, jsonb);
-- @function jobq.cancel_jobs(text, text, jsonb, jsonb)
-- @replace-view jobq.jobs

-- meta (issue 27), fair_key and on_duplicate (issue 28): new trailing parameters, so DROP and CREATE
-- (and the GRANTs below).
DROP FUNCTION jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text);
DROP FUNCTION jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text);
-- @function jobq._check_on_duplicate(text, boolean, text)
-- @function jobq._replace_job(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, boolean, boolean, jsonb, text)
-- @replace-function jobq._settings(text)
-- @function jobq._check_fair_key(text, text)
-- @function jobq._check_fair_keys(text[], integer)
-- @function jobq._check_fair_grouping(boolean, text)
-- @function jobq._check_fair_weights(jsonb)
-- @function jobq._fair_pick(text, integer, jobq._queue)
-- @replace-function jobq._plain_leases(text[], interval)
-- @function jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text, jsonb, text, text)
-- @function jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text, jsonb[], text[], text)
DROP FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer, integer, integer, interval, interval, interval);
-- @function jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer, integer, integer, interval, interval, interval, boolean, jsonb, integer)
-- @replace-function jobq.reset_queue(text)
-- @replace-view jobq.queues
-- @view jobq.fair_keys

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

GRANT EXECUTE ON FUNCTION
    jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text, jsonb, text, text),
    jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text, jsonb[], text[], text)
TO jobq_producer;
GRANT EXECUTE ON FUNCTION jobq.cancel_jobs(text, text, jsonb, jsonb) TO jobq_admin;
GRANT EXECUTE ON FUNCTION jobq.enqueue_callback(text, jsonb, bigint[], timestamptz, integer, integer, jsonb) TO jobq_producer;
GRANT EXECUTE ON FUNCTION
    jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer, integer, integer, interval, interval, interval, boolean, jsonb, integer)
TO jobq_admin;
GRANT SELECT ON jobq.fair_keys TO jobq_viewer;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

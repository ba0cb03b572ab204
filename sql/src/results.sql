---------------------------------------------------------------------------
-- 7b. results and states of single jobs
---------------------------------------------------------------------------

CREATE FUNCTION jobq.status(id bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_status text;
BEGIN
    -- The state of one job: waiting, ready, scheduled, running, completed,
    -- dead or cancelled. (VOLATILE, as result and parent_results: called in
    -- the statement that enqueued or completed the job, it sees that.) JQ019 for an id jobq does not know (never issued,
    -- or finished and gone: completed without history, or pruned), and
    -- alike for a job of a queue the caller may not read (per-queue grants).
    IF status.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass a job id.';
    END IF;
    SELECT CASE WHEN j.status = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.status END INTO v_status
    FROM jobq._job AS j WHERE j.id = status.id;
    IF v_status IS NULL THEN
        SELECT a.status INTO v_status FROM jobq._job_archive AS a WHERE a.id = status.id;
    END IF;
    IF v_status IS NULL OR NOT jobq._job_allowed(status.id, 'read') THEN
        RAISE EXCEPTION 'jobq: job % is unknown: never enqueued, or finished and no longer kept', status.id
            USING ERRCODE = 'JQ019',
                  HINT = 'Completed jobs are kept for the queue''s retention (result_retention when they have a result).';
    END IF;
    RETURN v_status;
END
$$;
COMMENT ON FUNCTION jobq.status(bigint) IS
    'The state of one job (waiting, ready, scheduled, running, completed, dead, cancelled); JQ019 when unknown.';

CREATE FUNCTION jobq.result(id bigint) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job record;
BEGIN
    -- The result a completed job reported (jobq.complete's result). NULL
    -- while the job is unfinished, when it completed without one, and when
    -- it is dead or cancelled (jobq.status tells these apart). JQ019 for an
    -- id jobq does not know, or of a queue the caller may not read.
    IF result.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass a job id.';
    END IF;
    IF EXISTS (SELECT FROM jobq._job AS j WHERE j.id = result.id) AND jobq._job_allowed(result.id, 'read') THEN
        RETURN NULL;
    END IF;
    SELECT a.status, a.result INTO v_job FROM jobq._job_archive AS a
    WHERE a.id = result.id AND jobq._job_allowed(result.id, 'read');
    IF NOT FOUND THEN
        RAISE EXCEPTION 'jobq: job % is unknown: never enqueued, or finished and no longer kept', result.id
            USING ERRCODE = 'JQ019',
                  HINT = 'A result is kept for the queue''s result_retention (or retention, when longer).';
    END IF;
    RETURN CASE WHEN v_job.status = 'completed' THEN v_job.result END;
END
$$;
COMMENT ON FUNCTION jobq.result(bigint) IS
    'The result of a completed job; NULL while unfinished, without one, or dead/cancelled; JQ019 when unknown.';

CREATE FUNCTION jobq.parent_results(id bigint) RETURNS TABLE (parent_id bigint, result jsonb)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_open boolean := NOT EXISTS (SELECT FROM jobq._queue_grant AS g WHERE g.privilege = 'read');
BEGIN
    -- One row per parent of a job (its depends_on, or a callback's members),
    -- by parent id, with the result that parent completed with: NULL when
    -- it has none, has not completed, or jobq no longer keeps it (a parent's
    -- result is kept while a child of it is live), or is of a queue the
    -- caller may not read. No rows for a job without parents; JQ019 for an
    -- id jobq does not know, or of a queue the caller may not read.
    IF parent_results.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass a job id.';
    END IF;
    IF NOT jobq._job_allowed(parent_results.id, 'read')
       OR (NOT EXISTS (SELECT FROM jobq._job AS j WHERE j.id = parent_results.id)
           AND NOT EXISTS (SELECT FROM jobq._job_archive AS a WHERE a.id = parent_results.id)) THEN
        RAISE EXCEPTION 'jobq: job % is unknown: never enqueued, or finished and no longer kept', parent_results.id
            USING ERRCODE = 'JQ019', HINT = 'Read the results of a job''s parents while it is live, e.g. in its handler.';
    END IF;
    RETURN QUERY
    SELECT d.parent_id, a.result
    FROM jobq._job_dep AS d
    LEFT JOIN jobq._job_archive AS a ON a.id = d.parent_id AND a.status = 'completed'
                                        AND (v_open OR jobq._denied_queue(ARRAY[a.queue], 'read') IS NULL)
    WHERE d.child_id = parent_results.id
    ORDER BY d.parent_id;
END
$$;
COMMENT ON FUNCTION jobq.parent_results(bigint) IS
    'The parents of a job with the results they completed with (NULL when none); JQ019 when the job is unknown.';

CREATE FUNCTION jobq.watch(id bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_status text;
BEGIN
    -- Ask to be told when a job finishes: finishing it (completed, dead or
    -- cancelled) sends NOTIFY jobq_finished with its id. Returns its state
    -- now, as jobq.status() (JQ019 for an unknown id, and for a job of a
    -- queue the caller may not read, which is not watched). LISTEN
    -- jobq_finished before calling this: a job that finishes in between is then either
    -- notified or already finished here. Jobs nobody watches send nothing
    -- when they finish. The job is marked watched when this transaction
    -- commits (jobq._settle_at_commit), not here: a watcher's open
    -- transaction never holds up the job's worker. A job that finishes
    -- between this call and that commit is notified by the commit itself.
    v_status := jobq.status(watch.id);
    IF v_status NOT IN ('completed', 'dead', 'cancelled') THEN
        INSERT INTO jobq._at_commit (watched) VALUES (ARRAY[watch.id]);
        PERFORM set_config('jobq.named_jobs', 'on', true);   -- for jobq._finish in this transaction
    END IF;
    RETURN v_status;
END
$$;
COMMENT ON FUNCTION jobq.watch(bigint) IS
    'Marks a live job so that finishing it sends NOTIFY jobq_finished with its id; returns its state (as jobq.status).';

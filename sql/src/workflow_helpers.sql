CREATE FUNCTION jobq._check_parents_issued(p_parents bigint[], p_arg text) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_last bigint;
    v_unknown bigint;
BEGIN
    -- Raise JQ019 when p_parents (validated by _check_dependencies) names an
    -- id jobq never issued. Reads the id sequence only: it locks no job, so
    -- naming a job never holds up its claim, heartbeat or acknowledgement.
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END INTO v_last FROM jobq._job_id_seq AS s;
    SELECT u.id INTO v_unknown
    FROM unnest(p_parents) AS u(id)
    WHERE u.id NOT BETWEEN 1 AND v_last
    ORDER BY u.id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'jobq: % names job %, which does not exist', p_arg, v_unknown
            USING ERRCODE = 'JQ019', HINT = 'Pass ids that jobq.enqueue() returned.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_parents_issued(bigint[], text) IS
    'Raises JQ019 when a depends_on/members id was never issued by jobq; locks nothing.';

CREATE FUNCTION jobq._gate_recount(p_children bigint[]) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    -- Set the gates of waiting jobs from their parents' states now: live
    -- (in jobq._job), completed, dead or cancelled (history), and completed
    -- when jobq no longer knows the parent (finished without history, or
    -- pruned). The gates are locked first, in id order, so the count runs in
    -- a statement that starts after every finishing parent that held them
    -- committed.
    PERFORM FROM jobq._job_wait AS w WHERE w.job_id = ANY (p_children) ORDER BY w.job_id FOR UPDATE;
    WITH state AS (
        SELECT d.child_id,
               CASE WHEN j.id IS NOT NULL THEN 'live' ELSE coalesce(a.status, 'completed') END AS outcome
        FROM jobq._job_dep AS d
        LEFT JOIN jobq._job AS j ON j.id = d.parent_id
        LEFT JOIN jobq._job_archive AS a ON a.id = d.parent_id
        WHERE d.child_id = ANY (p_children)
    ), counted AS (
        SELECT s.child_id,
               count(*) FILTER (WHERE s.outcome = 'live') AS live,
               count(*) FILTER (WHERE s.outcome = 'completed') AS completed,
               count(*) FILTER (WHERE s.outcome = 'dead') AS dead,
               count(*) FILTER (WHERE s.outcome = 'cancelled') AS cancelled
        FROM state AS s
        GROUP BY s.child_id
    )
    UPDATE jobq._job_wait AS w
    SET parents_left = c.live, completed = c.completed, dead = c.dead, cancelled = c.cancelled
    FROM counted AS c
    WHERE w.job_id = c.child_id;
END
$$;
COMMENT ON FUNCTION jobq._gate_recount(bigint[]) IS
    'Recounts the gates of waiting jobs from their parents'' current states (live, completed, dead, cancelled).';

CREATE FUNCTION jobq._settle(p_children bigint[]) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_cause record;
    v_cancelled bigint[] := '{}';
    v_queues text[];
BEGIN
    -- Act on the gates of waiting jobs (locked by the caller): cancel those
    -- that take a parent's failure as theirs ('cancel') and have a dead or
    -- cancelled parent, recording the root of it (the parent, or the root
    -- that cancelled the parent); release those with no parent left: ready
    -- (scheduled when their own run_at is later), a batch callback with its
    -- members' counts in its payload, and their queues woken. A released job
    -- keeps its gate (its on_parent_failure): a retry after it ran goes
    -- through it again. Returns the ids cancelled here: their own
    -- dependents are the caller's next step.
    FOR v_cause IN
        SELECT c.cause, array_agg(c.job_id ORDER BY c.job_id) AS ids,
               coalesce((SELECT r.status FROM jobq._job_archive AS r WHERE r.id = c.cause), 'dead') AS fate
        FROM (SELECT w.job_id, min(coalesce(a.cancelled_by, a.id)) AS cause
              FROM jobq._job_wait AS w
              JOIN jobq._job_dep AS d ON d.child_id = w.job_id
              JOIN jobq._job_archive AS a ON a.id = d.parent_id AND a.status IN ('dead', 'cancelled')
              WHERE w.job_id = ANY (p_children) AND w.on_parent_failure = 'cancel' AND w.dead + w.cancelled > 0
              GROUP BY w.job_id) AS c
        GROUP BY c.cause
    LOOP
        v_cancelled := v_cancelled || ARRAY(
            SELECT jobq._finish(p_ids => v_cause.ids, p_lease_tokens => NULL, p_status => 'cancelled',
                                p_error => format('cancelled: ancestor job %s %s', v_cause.cause,
                                                  CASE v_cause.fate WHEN 'cancelled' THEN 'was cancelled' ELSE 'is dead' END),
                                p_cause => v_cause.cause));
    END LOOP;
    WITH released AS (
        UPDATE jobq._job AS j
        SET status = 'ready',
            parked = false,
            payload = CASE WHEN w.report
                           THEN j.payload || jsonb_build_object('batch', jsonb_build_object(
                                    'members', w.completed + w.dead + w.cancelled, 'completed', w.completed,
                                    'dead', w.dead, 'cancelled', w.cancelled))
                           ELSE j.payload END
        FROM jobq._job_wait AS w
        WHERE w.job_id = j.id AND j.id = ANY (p_children) AND j.status = 'waiting'
          AND w.parents_left = 0 AND (w.on_parent_failure = 'run' OR w.dead + w.cancelled = 0)
        RETURNING j.id, j.queue
    )
    SELECT array_agg(DISTINCT r.queue) INTO v_queues FROM released AS r;
    PERFORM pg_notify('jobq', q.queue) FROM unnest(v_queues) AS q(queue);
    RETURN v_cancelled;
END
$$;
COMMENT ON FUNCTION jobq._settle(bigint[]) IS
    'Cancels waiting jobs whose parent failed (on_parent_failure cancel) and releases those with no parent left; returns the cancelled ids.';

CREATE FUNCTION jobq._finish_dependents(p_parents bigint[], p_status text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
SET jit = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_seqscan = off
SET join_collapse_limit = 1
AS $$
DECLARE
    v_doomed bigint[] := '{}';
    v_cause record;
    v_released bigint[];
BEGIN
    -- Jobs p_parents just left the live table as p_status (completed, dead
    -- or cancelled): cancel the descendants their failure dooms, count the
    -- finished jobs in the gates of the waiting children that remain, and
    -- release those with no parent left. The cascade is one pass, linear in
    -- the edges it follows (0.8.0 went level by level, re-planning nothing,
    -- and a chain 3,000 deep took 15 s): every waiting descendant with
    -- on_parent_failure 'cancel' reachable from a failed parent through
    -- such jobs, each cancelled with the lowest root among its failed
    -- ancestors (a failed parent's root: itself, or the root that
    -- cancelled it) as cancelled_by, one jobq._finish per root. The
    -- remaining waiting children of the parents and of the cancelled jobs
    -- ('run' children, and any child of a completed parent) have their
    -- gates updated by outcome in one statement, locked in id order as late
    -- as possible, so that a wide fan-in's completions hold a gate only for
    -- their commit. The gates the cancelled jobs keep are left as they are
    -- (a retry recounts them). Planned at each call (force_custom_plan),
    -- with the tables' sizes of then, on index paths only and joining in
    -- the order written (each step from the jobs found in the last): a
    -- plan cached while a graph was small (or never analyzed) scanned a
    -- whole table at each step, and so does a recursion whose step starts
    -- from the table instead of from the last step's jobs.
    IF p_status <> 'completed' THEN
        FOR v_cause IN
            WITH RECURSIVE doomed (id, root) AS (
                SELECT d.child_id, coalesce(a.cancelled_by, a.id)
                FROM unnest(p_parents) AS p(id)
                JOIN jobq._job_archive AS a ON a.id = p.id
                JOIN jobq._job_dep AS d ON d.parent_id = p.id
                JOIN jobq._job_wait AS w ON w.job_id = d.child_id AND w.on_parent_failure = 'cancel'
                JOIN jobq._job AS j ON j.id = d.child_id AND j.status = 'waiting'
              UNION
                SELECT d.child_id, x.root
                FROM doomed AS x
                JOIN jobq._job_dep AS d ON d.parent_id = x.id
                JOIN jobq._job_wait AS w ON w.job_id = d.child_id AND w.on_parent_failure = 'cancel'
                JOIN jobq._job AS j ON j.id = d.child_id AND j.status = 'waiting'
            )
            SELECT r.root AS cause, array_agg(r.id ORDER BY r.id) AS ids,
                   coalesce((SELECT a.status FROM jobq._job_archive AS a WHERE a.id = r.root), 'dead') AS fate
            FROM (SELECT x.id, min(x.root) AS root FROM doomed AS x GROUP BY x.id) AS r
            GROUP BY r.root
            ORDER BY r.root
        LOOP
            v_doomed := v_doomed || ARRAY(
                SELECT jobq._finish(p_ids => v_cause.ids, p_lease_tokens => NULL, p_status => 'cancelled',
                                    p_error => format('cancelled: ancestor job %s %s', v_cause.cause,
                                                      CASE v_cause.fate WHEN 'cancelled' THEN 'was cancelled' ELSE 'is dead' END),
                                    p_cause => v_cause.cause));
        END LOOP;
    END IF;
    WITH counted AS (
        SELECT d.child_id,
               count(*) FILTER (WHERE f.doomed)::integer AS cancelled_here,
               count(*) FILTER (WHERE NOT f.doomed)::integer AS finished_here
        FROM (SELECT u.id, false AS doomed FROM unnest(p_parents) AS u(id)
              UNION ALL
              SELECT u.id, true FROM unnest(v_doomed) AS u(id)) AS f
        JOIN jobq._job_dep AS d ON d.parent_id = f.id
        GROUP BY d.child_id
    ), locked AS MATERIALIZED (
        SELECT w.job_id, c.cancelled_here, c.finished_here
        FROM counted AS c
        JOIN jobq._job_wait AS w ON w.job_id = c.child_id
        JOIN jobq._job AS j ON j.id = c.child_id AND j.status = 'waiting'
        ORDER BY w.job_id
        FOR UPDATE OF w
    ), updated AS (
        UPDATE jobq._job_wait AS w
        SET parents_left = w.parents_left - l.cancelled_here - l.finished_here,
            completed = w.completed + CASE WHEN p_status = 'completed' THEN l.finished_here ELSE 0 END,
            dead = w.dead + CASE WHEN p_status = 'dead' THEN l.finished_here ELSE 0 END,
            cancelled = w.cancelled + l.cancelled_here
                        + CASE WHEN p_status = 'cancelled' THEN l.finished_here ELSE 0 END
        FROM locked AS l
        WHERE w.job_id = l.job_id
        RETURNING w.job_id, w.parents_left = 0 OR (w.on_parent_failure = 'cancel' AND w.dead + w.cancelled > 0)
                            AS settles
    )
    SELECT coalesce(array_agg(u.job_id ORDER BY u.job_id) FILTER (WHERE u.settles), '{}')
    INTO v_released
    FROM updated AS u;
    IF cardinality(v_released) > 0 THEN
        -- Released here; a 'cancel' child found with a failed parent (one
        -- not waiting when the cascade looked) is cancelled, and its own
        -- dependents follow.
        v_doomed := jobq._settle(v_released);
        IF cardinality(v_doomed) > 0 THEN
            PERFORM jobq._finish_dependents(v_doomed, 'cancelled');
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._finish_dependents(bigint[], text) IS
    'Cancels the descendants that finished parents'' failure dooms (one pass), counts the finished jobs in the remaining waiting children''s gates, and releases those with no parent left.';

CREATE FUNCTION jobq._attach(p_children bigint[], p_parents bigint[], p_on_parent_failure text, p_report boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_new bigint[];
    v_counts record;
    v_waiting bigint[];
BEGIN
    -- Link jobs just enqueued as waiting (jobq._insert_job with p_waiting)
    -- to p_parents (ids checked by jobq._check_parents_issued): edges, a
    -- gate counting the parents' states as this statement sees them, then
    -- cancel or release at once what needs no wait. Ids that came back for
    -- a held job_key (an existing job) are left as they are: only waiting
    -- jobs without a gate are new. No parent is locked or written here:
    -- those still waiting are handed to jobq._settle_at_commit, which flags
    -- their parents and counts their gates again when this transaction
    -- commits, so a parent that finishes meanwhile is never missed and this
    -- transaction never holds up a worker (see that function).
    v_new := ARRAY(SELECT j.id FROM jobq._job AS j
                   WHERE j.id = ANY (p_children) AND j.status = 'waiting'
                     AND NOT EXISTS (SELECT FROM jobq._job_wait AS w WHERE w.job_id = j.id)
                   ORDER BY j.id);
    IF cardinality(v_new) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO jobq._job_dep (parent_id, child_id)
    SELECT p.id, c.id FROM unnest(p_parents) AS p(id) CROSS JOIN unnest(v_new) AS c(id);
    -- Every new job has the same parents: count their states once (live,
    -- else as history says; completed when jobq no longer knows it).
    SELECT count(*) FILTER (WHERE s.outcome = 'live') AS live,
           count(*) FILTER (WHERE s.outcome = 'completed') AS completed,
           count(*) FILTER (WHERE s.outcome = 'dead') AS dead,
           count(*) FILTER (WHERE s.outcome = 'cancelled') AS cancelled
    INTO v_counts
    FROM (SELECT CASE WHEN EXISTS (SELECT FROM jobq._job AS j WHERE j.id = p.id) THEN 'live'
                      ELSE coalesce((SELECT a.status FROM jobq._job_archive AS a WHERE a.id = p.id), 'completed')
                 END AS outcome
          FROM unnest(p_parents) AS p(id)) AS s;
    INSERT INTO jobq._job_wait (job_id, parents_left, completed, dead, cancelled, on_parent_failure, report)
    SELECT c.id, v_counts.live, v_counts.completed, v_counts.dead, v_counts.cancelled, p_on_parent_failure, p_report
    FROM unnest(v_new) AS c(id);
    IF v_counts.live > 0 AND (p_on_parent_failure = 'run' OR v_counts.dead + v_counts.cancelled = 0) THEN
        v_waiting := v_new;   -- the common case: a live parent, no failure yet
    ELSE
        PERFORM jobq._settle(v_new);
        v_waiting := ARRAY(SELECT j.id FROM jobq._job AS j
                           WHERE j.id = ANY (v_new) AND j.status = 'waiting'
                           ORDER BY j.id);
    END IF;
    IF cardinality(v_waiting) > 0 THEN
        INSERT INTO jobq._at_commit (parents, children) VALUES (p_parents, v_waiting);
        PERFORM set_config('jobq.named_jobs', 'on', true);   -- for jobq._finish in this transaction
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._attach(bigint[], bigint[], text, boolean) IS
    'Links newly enqueued waiting jobs to their parents (edges, gates), settles what need not wait, and leaves the rest to the commit.';

CREATE FUNCTION jobq._settle_at_commit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_parents bigint[];
    v_children bigint[];
    v_watched bigint[];
    v_cancelled bigint[];
BEGIN
    -- What naming a job (depends_on, members, watch) needs from that job,
    -- done when the naming transaction commits: jobq._at_commit's deferred
    -- constraint trigger runs this at COMMIT, before the commit itself. The
    -- first run takes every row of this transaction, in one pass.
    -- In id order, the named jobs still live are key-share-locked and
    -- flagged: has_children for parents, watched for watched jobs. From
    -- then until the commit ends (a moment), a finishing DELETE of one of
    -- them waits and then sees the flag and the committed edges; one that
    -- finished before is no longer live here. So the waiting children's
    -- gates are counted again now, in statements that start after the
    -- locks: a parent that finished since the enqueue is counted finished,
    -- and the children it released or cancelled are settled (cancelled
    -- ones' own dependents too). A watched job that finished since watch()
    -- saw it live is notified from here. Nothing is locked before the
    -- commit, so an open producer transaction never holds up a claim,
    -- heartbeat or acknowledgement of the jobs it names (0.8.0 locked them
    -- at the enqueue, until the commit). Locks go in id order, as
    -- jobq._finish deletes: no deadlock with a completion. A later run
    -- finds its own row gone (one probe of the primary key) and stops.
    IF NOT EXISTS (SELECT FROM jobq._at_commit AS c WHERE c.id = NEW.id) THEN
        RETURN NULL;
    END IF;
    WITH mine AS (
        DELETE FROM jobq._at_commit AS c WHERE c.xact = pg_current_xact_id()
        RETURNING c.parents, c.children, c.watched
    )
    SELECT ARRAY(SELECT DISTINCT u.id FROM mine AS m, unnest(m.parents) AS u(id)),
           ARRAY(SELECT DISTINCT u.id FROM mine AS m, unnest(m.children) AS u(id)),
           ARRAY(SELECT DISTINCT u.id FROM mine AS m, unnest(m.watched) AS u(id))
    INTO v_parents, v_children, v_watched;
    IF cardinality(v_parents) + cardinality(v_children) + cardinality(v_watched) = 0 THEN
        RETURN NULL;
    END IF;
    PERFORM FROM jobq._job AS j
    WHERE j.id = ANY (v_parents || v_watched)
    ORDER BY j.id
    FOR KEY SHARE OF j;
    UPDATE jobq._job AS j
    SET has_children = j.has_children OR j.id = ANY (v_parents),
        watched = j.watched OR j.id = ANY (v_watched)
    WHERE j.id IN (SELECT u.id FROM jobq._job AS u
                   WHERE (u.id = ANY (v_parents) AND NOT u.has_children)
                      OR (u.id = ANY (v_watched) AND NOT u.watched)
                   ORDER BY u.id
                   FOR NO KEY UPDATE OF u);
    PERFORM pg_notify('jobq_finished', w.id::text)
    FROM unnest(v_watched) AS w(id)
    WHERE NOT EXISTS (SELECT FROM jobq._job AS j WHERE j.id = w.id);
    v_children := ARRAY(SELECT j.id FROM jobq._job AS j
                        WHERE j.id = ANY (v_children) AND j.status = 'waiting'
                        ORDER BY j.id);
    IF cardinality(v_children) > 0 THEN
        PERFORM jobq._gate_recount(v_children);
        v_cancelled := jobq._settle(v_children);
        IF cardinality(v_cancelled) > 0 THEN
            PERFORM jobq._finish_dependents(v_cancelled, 'cancelled');
        END IF;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION jobq._settle_at_commit() IS
    'At commit: flags the live jobs this transaction named (has_children, watched) and settles its waiting children against their parents'' states then.';

CREATE CONSTRAINT TRIGGER _500_settle_at_commit
    AFTER INSERT ON jobq._at_commit
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION jobq._settle_at_commit();

CREATE FUNCTION jobq._restore_descendants(p_root bigint) RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_set bigint[];
    v_blocked bigint[];
    v_moved bigint[];
    v_gates bigint[];
    v_cancelled bigint[];
BEGIN
    -- p_root (dead or cancelled) is live again (jobq.retry): bring back the
    -- descendants its failure cancelled (cancelled_by = p_root) as waiting,
    -- put the children its failure (or theirs) released and nobody claimed
    -- back to waiting, and recount the gates of the waiting children of all
    -- of these, which counted them as failed. A descendant with another dead or cancelled parent
    -- outside that set stays cancelled, re-rooted to that parent's root (a
    -- retry of that one restores it), and so do its own descendants in the
    -- set. One whose job_key an active job now holds stays cancelled.
    -- Returns how many came back.
    v_set := ARRAY(SELECT a.id FROM jobq._job_archive AS a
                   WHERE a.cancelled_by = p_root AND a.status = 'cancelled'
                   ORDER BY a.id
                   FOR UPDATE);
    LOOP
        v_blocked := ARRAY(
            SELECT DISTINCT d.child_id
            FROM jobq._job_dep AS d
            JOIN jobq._job_archive AS a ON a.id = d.parent_id AND a.status IN ('dead', 'cancelled')
            WHERE d.child_id = ANY (v_set) AND a.id <> ALL (v_set));
        EXIT WHEN cardinality(v_blocked) = 0;
        UPDATE jobq._job_archive AS c
        SET cancelled_by = (SELECT min(coalesce(p.cancelled_by, p.id))
                            FROM jobq._job_dep AS d
                            JOIN jobq._job_archive AS p ON p.id = d.parent_id AND p.status IN ('dead', 'cancelled')
                            WHERE d.child_id = c.id AND p.id <> ALL (v_set))
        WHERE c.id = ANY (v_blocked);
        v_set := ARRAY(SELECT u.id FROM unnest(v_set) AS u(id) WHERE u.id <> ALL (v_blocked));
    END LOOP;
    IF cardinality(v_set) > 0 THEN
        WITH moved AS (
            INSERT INTO jobq._job (id, queue, payload, status, parked, priority, run_at, attempts, max_attempts,
                                   job_key, created_at, group_key, timeout, has_children, has_parents, meta,
                                   fair_key)
            SELECT a.id, a.queue, a.payload, 'waiting', true, a.priority, a.run_at, a.attempts, a.max_attempts,
                   a.job_key, a.created_at, a.group_key, a.timeout,
                   EXISTS (SELECT FROM jobq._job_dep AS d WHERE d.parent_id = a.id), true, a.meta,
                   coalesce(a.fair_key, (SELECT '' FROM jobq._queue AS q WHERE q.queue = a.queue AND q.fair))
            FROM jobq._job_archive AS a
            WHERE a.id = ANY (v_set)
            ORDER BY a.id
            ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
            RETURNING id
        )
        SELECT coalesce(array_agg(m.id ORDER BY m.id), '{}') INTO v_moved FROM moved AS m;
        DELETE FROM jobq._job_archive AS a WHERE a.id = ANY (v_moved);
        IF cardinality(v_moved) < cardinality(v_set) THEN
            RAISE NOTICE 'jobq: % descendants of job % stay cancelled: their job_key is held by an active job',
                cardinality(v_set) - cardinality(v_moved), p_root;
        END IF;
        -- They kept their gates (and on_parent_failure) when cancelled.
        INSERT INTO jobq._job_wait (job_id, parents_left, on_parent_failure)
        SELECT m.id, 0, 'cancel' FROM unnest(v_moved) AS m(id)
        ON CONFLICT (job_id) DO NOTHING;
    ELSE
        v_moved := '{}';
    END IF;
    -- Children of p_root or of those moved back that a failure released
    -- ('run' children, batch callbacks) and no worker has claimed yet wait
    -- again: a parent of theirs is live again. (One claimed meanwhile runs
    -- with the counts it was released with.)
    UPDATE jobq._job AS j SET status = 'waiting', parked = true
    WHERE j.id IN (SELECT r.id FROM jobq._job AS r
                   WHERE r.id IN (SELECT d.child_id FROM jobq._job_dep AS d
                                  WHERE d.parent_id = p_root OR d.parent_id = ANY (v_moved))
                     AND r.status = 'ready'
                     AND EXISTS (SELECT FROM jobq._job_wait AS w WHERE w.job_id = r.id)
                   ORDER BY r.id
                   FOR NO KEY UPDATE OF r);
    -- The gates to recount: those moved back, and the waiting children of
    -- p_root and of those moved back (the gates of finished ones are
    -- recounted by their own retry).
    v_gates := ARRAY(SELECT w.job_id FROM jobq._job_wait AS w
                     JOIN jobq._job AS j ON j.id = w.job_id AND j.status = 'waiting'
                     WHERE w.job_id IN (SELECT d.child_id FROM jobq._job_dep AS d
                                        WHERE d.parent_id = p_root OR d.parent_id = ANY (v_moved))
                        OR w.job_id = ANY (v_moved)
                     ORDER BY w.job_id);
    PERFORM jobq._gate_recount(v_gates);
    v_cancelled := jobq._settle(v_gates);
    IF cardinality(v_cancelled) > 0 THEN
        PERFORM jobq._finish_dependents(v_cancelled, 'cancelled');
    END IF;
    RETURN cardinality(v_moved);
END
$$;
COMMENT ON FUNCTION jobq._restore_descendants(bigint) IS
    'After a retry of a dead or cancelled job: its cascade-cancelled descendants wait again (unless another failed parent holds them).';

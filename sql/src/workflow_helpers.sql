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
            SELECT jobq._finish(v_cause.ids, NULL, 'cancelled',
                                format('cancelled: ancestor job %s %s', v_cause.cause,
                                       CASE v_cause.fate WHEN 'cancelled' THEN 'was cancelled' ELSE 'is dead' END),
                                false, NULL, v_cause.cause));
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
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    v_frontier bigint[] := p_parents;
    v_status text := p_status;
    v_gates record;
BEGIN
    -- Jobs p_parents just left the live table as p_status (completed, dead
    -- or cancelled): count them in the gates of their waiting children,
    -- then cancel or release the children whose gate says so (jobq._settle).
    -- Cancelled children are the next round's parents, so a cascade goes
    -- down the whole graph in a loop, not in recursion. A gate is one row
    -- per waiting child, whatever its number of parents: it is locked (in
    -- id order) by the one statement that updates it, as late as possible,
    -- so that a wide fan-in's completions hold it only for their commit.
    -- The gates jobs cancelled while waiting keep are left as they are (a
    -- retry recounts them).
    WHILE cardinality(v_frontier) > 0 LOOP
        WITH counted AS (
            SELECT d.child_id, count(*)::integer AS n
            FROM jobq._job_dep AS d
            WHERE d.parent_id = ANY (v_frontier)
            GROUP BY d.child_id
        ), locked AS MATERIALIZED (
            SELECT w.job_id, c.n
            FROM counted AS c
            JOIN jobq._job_wait AS w ON w.job_id = c.child_id
            JOIN jobq._job AS j ON j.id = c.child_id AND j.status = 'waiting'
            ORDER BY w.job_id
            FOR UPDATE OF w
        ), updated AS (
            UPDATE jobq._job_wait AS w
            SET parents_left = w.parents_left - l.n,
                completed = w.completed + CASE WHEN v_status = 'completed' THEN l.n ELSE 0 END,
                dead = w.dead + CASE WHEN v_status = 'dead' THEN l.n ELSE 0 END,
                cancelled = w.cancelled + CASE WHEN v_status = 'cancelled' THEN l.n ELSE 0 END
            FROM locked AS l
            WHERE w.job_id = l.job_id
            RETURNING w.job_id, w.parents_left = 0 OR (w.on_parent_failure = 'cancel' AND w.dead + w.cancelled > 0)
                                AS settles
        )
        SELECT coalesce(array_agg(u.job_id ORDER BY u.job_id) FILTER (WHERE u.settles), '{}') AS ids
        INTO v_gates
        FROM updated AS u;
        EXIT WHEN cardinality(v_gates.ids) = 0;
        v_frontier := jobq._settle(v_gates.ids);
        v_status := 'cancelled';
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq._finish_dependents(bigint[], text) IS
    'Counts parents that just finished (as p_status) in their waiting children''s gates, then cancels or releases those children, down the graph.';

CREATE FUNCTION jobq._attach(p_children bigint[], p_parents bigint[], p_on_parent_failure text, p_report boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_new bigint[];
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
    INSERT INTO jobq._job_wait (job_id, parents_left, on_parent_failure, report)
    SELECT c.id, 0, p_on_parent_failure, p_report FROM unnest(v_new) AS c(id);
    PERFORM jobq._gate_recount(v_new);
    PERFORM jobq._settle(v_new);
    v_waiting := ARRAY(SELECT j.id FROM jobq._job AS j
                       WHERE j.id = ANY (v_new) AND j.status = 'waiting'
                       ORDER BY j.id);
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
    -- first run takes every row of this transaction (later runs find none).
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
    -- jobq._finish deletes: no deadlock with a completion.
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
    WHERE j.id = ANY (v_parents) OR j.id = ANY (v_watched)
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
    -- and recount the gates of its waiting children that counted it as
    -- failed ('run'). A descendant with another dead or cancelled parent
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
                                   job_key, created_at, group_key, timeout, has_children, has_parents)
            SELECT a.id, a.queue, a.payload, 'waiting', true, a.priority, a.run_at, a.attempts, a.max_attempts,
                   a.job_key, a.created_at, a.group_key, a.timeout,
                   EXISTS (SELECT FROM jobq._job_dep AS d WHERE d.parent_id = a.id), true
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
    -- The gates to recount: those moved back, and p_root's other waiting
    -- children (the gates of finished ones are recounted by their own retry).
    v_gates := ARRAY(SELECT w.job_id FROM jobq._job_wait AS w
                     JOIN jobq._job AS j ON j.id = w.job_id AND j.status = 'waiting'
                     WHERE w.job_id IN (SELECT d.child_id FROM jobq._job_dep AS d WHERE d.parent_id = p_root)
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

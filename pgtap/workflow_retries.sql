-- Workflows: retries, pruning and discarding around dependencies. A job
-- never runs before its parents completed: a retried job with parents goes
-- through its gate again, and a dead or cancelled parent is not forgotten
-- (a parent jobq forgot counts as completed) while a child of it is known.
BEGIN;
SET LOCAL client_min_messages = warning;
SELECT plan(22);

CREATE FUNCTION pg_temp.finish(p_id bigint, p_ok boolean) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_job jobq.job;
BEGIN
    -- Claim exactly p_id (it must be the only ready job of its queue) and
    -- complete it, or fail it for good (its max_attempts is 1).
    SELECT * INTO v_job FROM jobq.claim((SELECT queue FROM jobq._job WHERE id = p_id), 10);
    IF v_job.id IS DISTINCT FROM p_id THEN
        RAISE EXCEPTION 'claimed % instead of %', v_job.id, p_id;
    END IF;
    IF p_ok THEN
        PERFORM jobq.complete(v_job.id, v_job.lease_token);
    ELSE
        PERFORM jobq.fail(v_job.id, 'fatal', v_job.lease_token);
    END IF;
    RETURN v_job.id;
END
$$;

-- a 'run' child that ran and died, and its dead parent: both retried, the child waits again
SELECT jobq.enqueue('r_parent', '{}', max_attempts => 1) AS p \gset
SELECT jobq.enqueue('r_child', '{}', max_attempts => 1, depends_on => ARRAY[:p]::bigint[],
                    on_parent_failure => 'run') AS c \gset
SELECT is(pg_temp.finish(:p, false), :p::bigint, 'setup: the parent goes dead');
SELECT is(jobq.status(:c), 'ready', 'the ''run'' child is released by its parent''s death');
SELECT is(pg_temp.finish(:c, false), :c::bigint, 'setup: the child runs and goes dead too');
SELECT ok(jobq.retry(:c), 'the child is retried first');
SELECT is(jobq.status(:c), 'ready', 'its parent is dead (finished): it is ready at once');
SELECT ok(jobq.cancel(:c), 'setup: cancel it again');
SELECT ok(jobq.retry(:p), 'the parent is retried');
SELECT ok(jobq.retry(:c), 'then the child');
SELECT is(jobq.status(:c), 'waiting', 'the child now waits for its live parent: it never runs before it');
SELECT is(pg_temp.finish(:p, true), :p::bigint, 'the parent completes');
SELECT is(jobq.status(:c), 'ready', 'and releases the child');
SELECT is((SELECT payload FROM jobq._job WHERE id = :c), '{}'::jsonb, 'a plain child''s payload is untouched');

-- the last_error of a cascade names the root and its fate
SELECT jobq.enqueue('r_parent', '{}') AS q \gset
SELECT jobq.enqueue('r_child', '{}', depends_on => ARRAY[:q]::bigint[]) AS qc \gset
SELECT ok(jobq.cancel(:q), 'setup: a parent is cancelled');
SELECT is((SELECT last_error FROM jobq.jobs WHERE id = :qc), format('cancelled: ancestor job %s was cancelled', :q),
          'its child says which ancestor was cancelled');
SELECT jobq.enqueue('r_parent', '{}', max_attempts => 1) AS d \gset
SELECT jobq.enqueue('r_child', '{}', depends_on => ARRAY[:d]::bigint[]) AS dc \gset
SELECT is(pg_temp.finish(:d, false), :d::bigint, 'setup: another parent goes dead');
SELECT is((SELECT last_error FROM jobq.jobs WHERE id = :dc), format('cancelled: ancestor job %s is dead', :d),
          'its child says which ancestor is dead');

-- prune does not forget a failed parent while a child of it is known
UPDATE jobq._job_archive SET prune_after = now() - interval '2 days' WHERE id IN (:d, :dc, :q, :qc);
UPDATE jobq._job_archive SET prune_after = NULL WHERE id IN (:dc, :qc);
SELECT is(jobq.prune(), 0, 'prune keeps dead and cancelled parents whose children are still known');
UPDATE jobq._job_archive SET prune_after = now() - interval '2 days' WHERE id = :qc;
SELECT is(jobq.prune(), 1, 'the child goes first');
SELECT is(jobq.prune(), 1, 'then the parent it kept');

-- discard_dead takes the descendants the death cancelled along
SELECT is(jobq.discard_dead('r_parent'), 1, 'discard_dead counts the dead jobs it discards');
SELECT is((SELECT count(*)::int FROM jobq.jobs WHERE id IN (:d, :dc)), 0,
          'the dead parent and the child its death cancelled are both gone');

-- status, result and parent_results see what the same statement did
SELECT is(jobq.status(jobq.enqueue('r_now', '{}')), 'ready', 'status() of a job enqueued in the same statement');

SELECT * FROM finish();
ROLLBACK;

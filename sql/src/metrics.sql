---------------------------------------------------------------------------
-- 8. metrics (after the views it reads)
---------------------------------------------------------------------------

CREATE FUNCTION jobq.metrics() RETURNS TABLE (name text, labels jsonb, value double precision)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    -- Prometheus-style samples of every known queue, from jobq.stats (so
    -- every scrape agrees, whichever host serves it): jobq_jobs by state
    -- (zeros included), jobq_oldest_ready_age_seconds (0 when nothing is
    -- ready), and the completed / failed-attempt / dead-lettered totals of
    -- the counters (never reset by pruning). Ordered by name, then labels.
    SELECT m.name, m.labels, m.value
    FROM jobq.stats AS s
    CROSS JOIN LATERAL (VALUES
        ('jobq_jobs', pg_catalog.jsonb_build_object('queue', s.queue, 'state', 'ready'), s.ready::double precision),
        ('jobq_jobs', pg_catalog.jsonb_build_object('queue', s.queue, 'state', 'scheduled'), s.scheduled::double precision),
        ('jobq_jobs', pg_catalog.jsonb_build_object('queue', s.queue, 'state', 'running'), s.running::double precision),
        ('jobq_jobs', pg_catalog.jsonb_build_object('queue', s.queue, 'state', 'dead'), s.dead::double precision),
        ('jobq_jobs', pg_catalog.jsonb_build_object('queue', s.queue, 'state', 'waiting'), s.waiting::double precision),
        ('jobq_oldest_ready_age_seconds', pg_catalog.jsonb_build_object('queue', s.queue),
         coalesce(pg_catalog.date_part('epoch', s.oldest_ready_age), 0)),
        ('jobq_completed_total', pg_catalog.jsonb_build_object('queue', s.queue), s.completed_total::double precision),
        ('jobq_failed_total', pg_catalog.jsonb_build_object('queue', s.queue), s.failed_total::double precision),
        ('jobq_dead_total', pg_catalog.jsonb_build_object('queue', s.queue), s.dead_total::double precision)
    ) AS m(name, labels, value)
    ORDER BY m.name, m.labels
$$;
COMMENT ON FUNCTION jobq.metrics() IS
    'Metrics of every known queue as (name, labels, value) rows: jobq_jobs{queue,state}, jobq_oldest_ready_age_seconds, jobq_*_total.';

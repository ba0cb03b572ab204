-- jobq 0.9.0 (issue 24): what reap, jobq.workers and jobq.stats know
-- without reading a backlog. Parked running jobs carry their lease expiry in
-- a generated column with an index of its own; leases in place are found at
-- the head of their queue's claim order (jobq._leased_in_place); counts are
-- exact up to 10,000 jobs of a queue. On every install path (the upgrade
-- adds the column to the rows already there).
BEGIN;
SELECT plan(17);

SET LOCAL client_min_messages = warning;
DO $$ BEGIN
    PERFORM jobq.enqueue_many('heads', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 30) AS g));
    PERFORM jobq.enqueue_many('later', ARRAY['{}'::jsonb, '{}'], run_at => now() + interval '1 hour');
END $$;
CREATE TEMP TABLE leased AS SELECT * FROM jobq.claim('heads', 5, 'in-place');
CREATE TEMP TABLE beat AS SELECT * FROM jobq.claim('heads', 1, 'beaten', interval '1 minute');

-- the column and its index ----------------------------------------------------------------------
SELECT col_is_null('jobq', '_job', 'parked_expires_at', 'jobq._job.parked_expires_at is nullable');
SELECT is((SELECT a.attgenerated::text FROM pg_catalog.pg_attribute AS a
           WHERE a.attrelid = 'jobq._job'::regclass AND a.attname = 'parked_expires_at'),
          's', 'parked_expires_at is a stored generated column');
SELECT has_index('jobq', '_job', '_job_parked_expiry_idx', ARRAY['parked_expires_at'],
                 'parked leases by expiry: _job_parked_expiry_idx');
SELECT is((SELECT pg_catalog.pg_get_expr(i.indpred, i.indrelid) FROM pg_catalog.pg_index AS i
           WHERE i.indexrelid = 'jobq._job_parked_expiry_idx'::regclass),
          '(parked_expires_at IS NOT NULL)', 'the expiry index holds only parked running jobs');
SELECT is((SELECT count(*) FROM jobq._job WHERE parked_expires_at IS NOT NULL), 0::bigint,
          'a fast-path lease in place has no parked_expiry (its claim writes no indexed value)');
SELECT ok(jobq.heartbeat(b.id, b.lease_token, interval '2 minutes'), 'a heartbeat parks a lease...') FROM beat AS b;
SELECT is((SELECT parked_expires_at = lease_expires_at FROM jobq._job WHERE id = (SELECT id FROM beat)), true,
          '... and its parked_expires_at is its lease expiry, moved by the heartbeat');
SELECT ok(jobq.release(b.id, b.lease_token), 'released...') FROM beat AS b;
SELECT is((SELECT parked_expires_at FROM jobq._job WHERE id = (SELECT id FROM beat)), NULL,
          '... the job has no parked_expires_at any more');

-- leases in place ---------------------------------------------------------------------------------
SELECT set_eq($$SELECT id FROM jobq._leased_in_place(clock_timestamp())$$, $$SELECT id FROM leased$$,
              'jobq._leased_in_place finds the leases in place at the head of the claim order');
SELECT set_eq($$SELECT id FROM jobq._running()$$, $$SELECT id FROM leased$$,
              'jobq._running: every running job');
SELECT results_eq($$SELECT worker, jobs FROM jobq.workers$$, $$VALUES ('in-place'::text, 5::bigint)$$,
                  'jobq.workers counts them');

-- counts ------------------------------------------------------------------------------------------
SELECT results_eq(
    $$SELECT queue, ready, scheduled, running, waiting, dead, estimated FROM jobq.stats ORDER BY queue$$,
    $$VALUES ('heads'::text, 25::bigint, 0::bigint, 5::bigint, 0::bigint, 0::bigint, false),
             ('later', 0, 2, 0, 0, 0, false)$$,
    'jobq.stats counts exactly below 10,000 jobs, estimated false');
SELECT ok((SELECT oldest_ready_age >= interval '0' FROM jobq.stats WHERE queue = 'heads'),
          'the oldest ready age steps over the leases at the head');
SELECT results_eq($$SELECT queue FROM jobq.queues ORDER BY queue$$, $$VALUES ('heads'::text), ('later')$$,
                  'jobq.queues names the queues with jobs (skip scans)');

-- reap ----------------------------------------------------------------------------------------------
UPDATE jobq._job SET started_at = started_at - interval '11 seconds' WHERE id IN (SELECT id FROM leased);
SELECT is(jobq.reap(), 0, 'reap: nothing expired');
SELECT is((SELECT count(*) FROM jobq._job WHERE parked AND parked_expires_at = lease_expires_at
             AND id IN (SELECT id FROM leased)), 5::bigint,
          'reap parks the leases in place held over 10 seconds, with their parked_expires_at');

SELECT * FROM finish();
ROLLBACK;

-- jobq schema: objects exist with the contracted signatures, SECURITY
-- DEFINER only where intended, pinned search_path (and lock_timeout on the
-- claim and worker functions) and a comment everywhere.
BEGIN;
SELECT plan(168);

-- objects ------------------------------------------------------------------
SELECT has_schema('jobq', 'schema jobq exists');
SELECT has_role('jobq_producer', 'role jobq_producer exists');
SELECT has_role('jobq_worker', 'role jobq_worker exists');
SELECT has_role('jobq_admin', 'role jobq_admin exists');
SELECT has_table('jobq', '_job', 'live job table jobq._job exists');
SELECT has_table('jobq', '_job_archive', 'archive table jobq._job_archive exists');
SELECT has_table('jobq', '_queue', 'queue settings table jobq._queue exists');
SELECT has_table('jobq', '_migration', 'version bookkeeping table jobq._migration exists');
SELECT has_table('jobq', '_rate_start', 'rate-limit window table jobq._rate_start exists');
SELECT has_table('jobq', '_periodic', 'periodic job table jobq._periodic exists');
SELECT has_table('jobq', '_counter', 'finished-job counter table jobq._counter exists');
SELECT has_table('jobq', '_job_dep', 'dependency edge table jobq._job_dep exists');
SELECT has_table('jobq', '_job_wait', 'gate table of waiting jobs jobq._job_wait exists');
SELECT has_view('jobq', 'job_dependencies', 'view jobq.job_dependencies exists');
SELECT has_view('jobq', 'stats', 'view jobq.stats exists');
SELECT has_view('jobq', 'jobs', 'view jobq.jobs exists');
SELECT has_view('jobq', 'queues', 'view jobq.queues exists');
SELECT has_view('jobq', 'schedules', 'view jobq.schedules exists');
SELECT has_type('jobq', 'job', 'type jobq.job exists');

SELECT is(jobq.version(), '0.14.0', 'jobq.version() is 0.14.0');
-- A fresh install records 0.14.0 only; an upgraded one records every step.
SELECT is((SELECT version FROM jobq._migration
           ORDER BY string_to_array(version, '.')::int[] DESC LIMIT 1), '0.14.0',
          'the newest version recorded in jobq._migration is 0.14.0');
SELECT is_empty($$SELECT version FROM jobq._migration WHERE version NOT IN ('0.1.0', '0.2.0', '0.3.0', '0.4.0', '0.5.0', '0.6.0', '0.7.0', '0.8.0', '0.9.0', '0.10.0', '0.11.0', '0.12.0', '0.13.0', '0.14.0')$$,
                'jobq._migration records only released versions up to 0.14.0');

SELECT set_has(
    $$SELECT attname::text FROM pg_catalog.pg_attribute
      WHERE attrelid = 'jobq.job'::regclass AND attnum > 0 AND NOT attisdropped$$,
    $$VALUES ('id'), ('queue'), ('payload'), ('priority'), ('attempts'), ('max_attempts'),
             ('run_at'), ('created_at'), ('lease_token'), ('group_key')$$,
    'jobq.job has every column the spec requires (incl. the fencing lease_token) and group_key');
SELECT has_column('jobq', '_job', 'group_key', 'jobq._job has group_key');
SELECT has_column('jobq', '_job_archive', 'group_key', 'jobq._job_archive keeps group_key');
SELECT set_has(
    $$SELECT column_name::text FROM information_schema.columns
      WHERE table_schema = 'jobq' AND table_name = 'jobs'$$,
    $$VALUES ('group_key'), ('started_at'), ('finished_at'), ('status')$$,
    'jobq.jobs shows group_key');
SELECT set_has(
    $$SELECT column_name::text FROM information_schema.columns
      WHERE table_schema = 'jobq' AND table_name = 'queues'$$,
    $$VALUES ('concurrency'), ('rate_limit'), ('rate_interval'), ('paused')$$,
    'jobq.queues shows concurrency, rate_limit, rate_interval and paused');
SELECT is((SELECT column_name::text FROM information_schema.columns
           WHERE table_schema = 'jobq' AND table_name = 'queues' ORDER BY ordinal_position DESC LIMIT 1),
          'per_key_concurrency', 'per_key_concurrency (after fair and fair_weights) is the last column of jobq.queues');
SELECT is(ARRAY(SELECT column_name::text FROM information_schema.columns
                WHERE table_schema = 'jobq' AND table_name = 'jobs' ORDER BY ordinal_position DESC LIMIT 4),
          ARRAY['meta', 'progress', 'cancelled_by', 'result'], 'jobq.jobs ends with result, cancelled_by, progress (0.11.0), meta (0.12.0)');
SELECT is(ARRAY(SELECT column_name::text FROM information_schema.columns
                WHERE table_schema = 'jobq' AND table_name = 'job_dependencies' ORDER BY ordinal_position),
          ARRAY['child_id', 'parent_id'], 'jobq.job_dependencies has child_id, parent_id');
SELECT has_column('jobq', '_job_archive', 'result', 'jobq._job_archive keeps result');
SELECT has_column('jobq', '_job_archive', 'cancelled_by', 'jobq._job_archive keeps cancelled_by');
SELECT set_eq(
    $$SELECT column_name::text FROM information_schema.columns
      WHERE table_schema = 'jobq' AND table_name = 'schedules'$$,
    $$VALUES ('name'), ('schedule'), ('queue'), ('payload'), ('priority'), ('max_attempts'), ('created_at'), ('updated_at'),
             ('runner'), ('next_run_at'), ('last_run_at')$$,
    'jobq.schedules has name, schedule, queue, payload, priority, max_attempts, created_at, updated_at, runner, next_run_at, last_run_at');

SELECT set_eq(
    $$SELECT column_name::text FROM information_schema.columns
      WHERE table_schema = 'jobq' AND table_name = 'stats'$$,
    $$VALUES ('queue'), ('ready'), ('scheduled'), ('running'), ('dead'), ('oldest_ready_age'), ('paused'),
             ('completed_total'), ('failed_total'), ('dead_total'), ('waiting'), ('estimated')$$,
    'jobq.stats has queue, ready, scheduled, running, dead, oldest_ready_age, paused, the completed/failed/dead totals, waiting and estimated');

-- the public API, exactly ----------------------------------------------------
SELECT set_eq(
    $$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
      WHERE p.pronamespace = 'jobq'::regnamespace AND p.proname !~ '^_'$$,
    ARRAY[
        'jobq.version()',
        'jobq.enqueue(text,jsonb,timestamp with time zone,integer,integer,text,text,interval,interval,bigint[],text,jsonb,text,text)',
        'jobq.enqueue_many(text,jsonb[],timestamp with time zone,integer,integer,text[],text,interval,interval,bigint[],text,jsonb[],text[],text)',
        'jobq.claim(text,bigint,text,interval)',
        'jobq.claim(text[],bigint,text,interval)',
        'jobq.complete(bigint,uuid,jsonb)',
        'jobq.complete_many(bigint[],uuid[],jsonb[])',
        'jobq.fail(bigint,text,uuid,timestamp with time zone)',
        'jobq.heartbeat(bigint,uuid,interval)',
        'jobq.progress(bigint,uuid,jsonb)',
        'jobq.release(bigint,uuid)',
        'jobq.reap(integer)',
        'jobq.next_run_at(text[])',
        'jobq.retry(bigint)',
        'jobq.retry_dead(text)',
        'jobq.cancel(bigint)',
        'jobq.prune(integer)',
        'jobq.configure_queue(text,integer,interval,interval,double precision,interval,interval,interval,integer,integer,integer,interval,interval,interval,boolean,jsonb,integer)',
        'jobq.cancel_jobs(text,text,jsonb,jsonb)',
        'jobq.discard_dead(text,interval)',
        'jobq.run_schedules()',
        'jobq.reset_queue(text)',
        'jobq.schedule_maintenance(text,text)',
        'jobq.unschedule_maintenance()',
        'jobq.take(text,bigint)',
        'jobq.hold(text,bigint)',
        'jobq.complete_held(bigint[],jsonb[])',
        'jobq.fail_held(bigint,text,timestamp with time zone)',
        'jobq.snooze(bigint,uuid,timestamp with time zone)',
        'jobq.pause(text)',
        'jobq.resume(text)',
        'jobq.every(text,text,text,jsonb,integer,integer,text)',
        'jobq.unschedule(text)',
        'jobq.enqueue_periodic(text)',
        'jobq.run_now(bigint)',
        'jobq.metrics()',
        'jobq.enqueue_callback(text,jsonb,bigint[],timestamp with time zone,integer,integer,jsonb)',
        'jobq.result(bigint)',
        'jobq.status(bigint)',
        'jobq.parent_results(bigint)',
        'jobq.watch(bigint)',
        'jobq.grant_queue(name,text,text)',
        'jobq.revoke_queue(name,text,text)'
    ],
    'the public jobq functions are exactly the documented API');

SELECT has_function('jobq', 'version', ARRAY[]::text[], 'jobq.version() exists');
SELECT has_function('jobq', 'enqueue', ARRAY['text', 'jsonb', 'timestamp with time zone', 'integer', 'integer', 'text', 'text', 'interval', 'interval', 'bigint[]', 'text', 'jsonb', 'text', 'text'], 'jobq.enqueue(text, jsonb, timestamptz, int, int, text, text, interval, interval, bigint[], text, jsonb, text, text) exists (group_key, timeout, unique_for, depends_on, on_parent_failure, meta, fair_key, on_duplicate)');
SELECT has_function('jobq', 'enqueue_many', ARRAY['text', 'jsonb[]', 'timestamp with time zone', 'integer', 'integer', 'text[]', 'text', 'interval', 'interval', 'bigint[]', 'text', 'jsonb[]', 'text[]', 'text'], 'jobq.enqueue_many(..., text[], text, interval, interval, bigint[], text, jsonb[], text[], text) exists (group_key, timeout, unique_for, depends_on, on_parent_failure, metas, fair_keys, on_duplicate)');
SELECT has_function('jobq', 'claim', ARRAY['text', 'bigint', 'text', 'interval'], 'jobq.claim(text, bigint, text, interval) exists');
SELECT has_function('jobq', 'claim', ARRAY['text[]', 'bigint', 'text', 'interval'], 'jobq.claim(text[], bigint, text, interval) exists');
SELECT has_function('jobq', 'complete', ARRAY['bigint', 'uuid', 'jsonb'], 'jobq.complete(bigint, uuid, jsonb) exists (result)');
SELECT has_function('jobq', 'complete_many', ARRAY['bigint[]', 'uuid[]', 'jsonb[]'], 'jobq.complete_many(bigint[], uuid[], jsonb[]) exists (results)');
SELECT has_function('jobq', 'fail', ARRAY['bigint', 'text', 'uuid', 'timestamp with time zone'], 'jobq.fail(bigint, text, uuid, timestamptz) exists');
SELECT has_function('jobq', 'heartbeat', ARRAY['bigint', 'uuid', 'interval'], 'jobq.heartbeat(bigint, uuid, interval) exists');
SELECT has_function('jobq', 'release', ARRAY['bigint', 'uuid'], 'jobq.release(bigint, uuid) exists');
SELECT has_function('jobq', 'reap', ARRAY['integer'], 'jobq.reap(int) exists');
SELECT has_function('jobq', 'next_run_at', ARRAY['text[]'], 'jobq.next_run_at(text[]) exists');
SELECT has_function('jobq', 'retry', ARRAY['bigint'], 'jobq.retry(bigint) exists');
SELECT has_function('jobq', 'retry_dead', ARRAY['text'], 'jobq.retry_dead(text) exists');
SELECT has_function('jobq', 'cancel', ARRAY['bigint'], 'jobq.cancel(bigint) exists');
SELECT has_function('jobq', 'prune', ARRAY['integer'], 'jobq.prune(int) exists');
SELECT has_function('jobq', 'configure_queue', ARRAY['text', 'integer', 'interval', 'interval', 'double precision', 'interval', 'interval', 'interval', 'integer', 'integer', 'integer', 'interval', 'interval', 'interval', 'boolean', 'jsonb', 'integer'], 'jobq.configure_queue(..., concurrency, rate_limit, rate_interval, timeout, result_retention, fair, fair_weights, per_key_concurrency) exists');
SELECT has_function('jobq', 'reset_queue', ARRAY['text'], 'jobq.reset_queue(text) exists');
SELECT has_function('jobq', 'schedule_maintenance', ARRAY['text', 'text'], 'jobq.schedule_maintenance(text, text) exists');
SELECT has_function('jobq', 'unschedule_maintenance', ARRAY[]::text[], 'jobq.unschedule_maintenance() exists');
SELECT has_function('jobq', 'take', ARRAY['text', 'bigint'], 'jobq.take(text, bigint) exists');
SELECT has_function('jobq', 'hold', ARRAY['text', 'bigint'], 'jobq.hold(text, bigint) exists');
SELECT has_function('jobq', 'complete_held', ARRAY['bigint[]', 'jsonb[]'], 'jobq.complete_held(bigint[], jsonb[]) exists (results)');
SELECT has_function('jobq', 'fail_held', ARRAY['bigint', 'text', 'timestamp with time zone'], 'jobq.fail_held(bigint, text, timestamptz) exists');
SELECT has_function('jobq', 'snooze', ARRAY['bigint', 'uuid', 'timestamp with time zone'], 'jobq.snooze(bigint, uuid, timestamptz) exists');
SELECT has_function('jobq', 'pause', ARRAY['text'], 'jobq.pause(text) exists');
SELECT has_function('jobq', 'resume', ARRAY['text'], 'jobq.resume(text) exists');
SELECT has_function('jobq', 'every', ARRAY['text', 'text', 'text', 'jsonb', 'integer', 'integer', 'text'], 'jobq.every(name, schedule, queue, payload, priority, max_attempts, runner) exists');
SELECT has_function('jobq', 'unschedule', ARRAY['text'], 'jobq.unschedule(text) exists');
SELECT has_function('jobq', 'enqueue_periodic', ARRAY['text'], 'jobq.enqueue_periodic(text) exists');
SELECT has_function('jobq', 'enqueue_callback', ARRAY['text', 'jsonb', 'bigint[]', 'timestamp with time zone', 'integer', 'integer', 'jsonb'],
                    'jobq.enqueue_callback(text, jsonb, bigint[], timestamptz, int, int) exists');
SELECT has_function('jobq', 'result', ARRAY['bigint'], 'jobq.result(bigint) exists');
SELECT has_function('jobq', 'status', ARRAY['bigint'], 'jobq.status(bigint) exists');
SELECT has_function('jobq', 'parent_results', ARRAY['bigint'], 'jobq.parent_results(bigint) exists');
SELECT has_function('jobq', 'watch', ARRAY['bigint'], 'jobq.watch(bigint) exists');

SELECT function_returns('jobq', 'version', ARRAY[]::text[], 'text', 'version() returns text');
SELECT function_returns('jobq', 'enqueue', ARRAY['text', 'jsonb', 'timestamp with time zone', 'integer', 'integer', 'text', 'text', 'interval', 'interval', 'bigint[]', 'text', 'jsonb', 'text', 'text'], 'bigint', 'enqueue() returns bigint');
SELECT function_returns('jobq', 'enqueue_many', ARRAY['text', 'jsonb[]', 'timestamp with time zone', 'integer', 'integer', 'text[]', 'text', 'interval', 'interval', 'bigint[]', 'text', 'jsonb[]', 'text[]', 'text'], 'setof bigint', 'enqueue_many() returns setof bigint');
SELECT function_returns('jobq', 'claim', ARRAY['text', 'bigint', 'text', 'interval'], 'setof jobq.job', 'claim(text, ...) returns setof jobq.job');
SELECT function_returns('jobq', 'claim', ARRAY['text[]', 'bigint', 'text', 'interval'], 'setof jobq.job', 'claim(text[], ...) returns setof jobq.job');
SELECT function_returns('jobq', 'complete', ARRAY['bigint', 'uuid', 'jsonb'], 'boolean', 'complete() returns boolean');
SELECT function_returns('jobq', 'complete_many', ARRAY['bigint[]', 'uuid[]', 'jsonb[]'], 'integer', 'complete_many() returns integer');
SELECT function_returns('jobq', 'fail', ARRAY['bigint', 'text', 'uuid', 'timestamp with time zone'], 'boolean', 'fail() returns boolean');
SELECT function_returns('jobq', 'heartbeat', ARRAY['bigint', 'uuid', 'interval'], 'boolean', 'heartbeat() returns boolean');
SELECT function_returns('jobq', 'release', ARRAY['bigint', 'uuid'], 'boolean', 'release() returns boolean');
SELECT function_returns('jobq', 'reap', ARRAY['integer'], 'integer', 'reap() returns integer');
SELECT function_returns('jobq', 'next_run_at', ARRAY['text[]'], 'timestamp with time zone', 'next_run_at() returns timestamptz');
SELECT function_returns('jobq', 'retry', ARRAY['bigint'], 'boolean', 'retry() returns boolean');
SELECT function_returns('jobq', 'retry_dead', ARRAY['text'], 'integer', 'retry_dead() returns integer');
SELECT function_returns('jobq', 'cancel', ARRAY['bigint'], 'boolean', 'cancel() returns boolean');
SELECT function_returns('jobq', 'prune', ARRAY['integer'], 'integer', 'prune() returns integer');
SELECT function_returns('jobq', 'configure_queue', ARRAY['text', 'integer', 'interval', 'interval', 'double precision', 'interval', 'interval', 'interval', 'integer', 'integer', 'integer', 'interval', 'interval', 'interval', 'boolean', 'jsonb', 'integer'], 'jobq._queue', 'configure_queue() returns the effective settings row');
SELECT function_returns('jobq', 'reset_queue', ARRAY['text'], 'boolean', 'reset_queue() returns boolean');
SELECT function_returns('jobq', 'schedule_maintenance', ARRAY['text', 'text'], 'setof record', 'schedule_maintenance() returns a table');
SELECT function_returns('jobq', 'unschedule_maintenance', ARRAY[]::text[], 'integer', 'unschedule_maintenance() returns integer');
SELECT function_returns('jobq', 'take', ARRAY['text', 'bigint'], 'setof jobq.job', 'take() returns setof jobq.job');
SELECT function_returns('jobq', 'hold', ARRAY['text', 'bigint'], 'setof jobq.job', 'hold() returns setof jobq.job');
SELECT function_returns('jobq', 'complete_held', ARRAY['bigint[]', 'jsonb[]'], 'integer', 'complete_held() returns integer');
SELECT function_returns('jobq', 'fail_held', ARRAY['bigint', 'text', 'timestamp with time zone'], 'boolean', 'fail_held() returns boolean');
SELECT function_returns('jobq', 'snooze', ARRAY['bigint', 'uuid', 'timestamp with time zone'], 'boolean', 'snooze() returns boolean');
SELECT function_returns('jobq', 'pause', ARRAY['text'], 'boolean', 'pause() returns boolean');
SELECT function_returns('jobq', 'resume', ARRAY['text'], 'boolean', 'resume() returns boolean');
SELECT function_returns('jobq', 'every', ARRAY['text', 'text', 'text', 'jsonb', 'integer', 'integer', 'text'], 'bigint', 'every() returns the pg_cron job id (bigint, NULL under the workers)');
SELECT function_returns('jobq', 'unschedule', ARRAY['text'], 'boolean', 'unschedule() returns boolean');
SELECT function_returns('jobq', 'enqueue_periodic', ARRAY['text'], 'bigint', 'enqueue_periodic() returns the job id');
SELECT function_returns('jobq', 'enqueue_callback', ARRAY['text', 'jsonb', 'bigint[]', 'timestamp with time zone', 'integer', 'integer', 'jsonb'],
                        'bigint', 'enqueue_callback() returns the callback job id');
SELECT function_returns('jobq', 'result', ARRAY['bigint'], 'jsonb', 'result() returns jsonb');
SELECT function_returns('jobq', 'status', ARRAY['bigint'], 'text', 'status() returns text');
SELECT function_returns('jobq', 'parent_results', ARRAY['bigint'], 'setof record', 'parent_results() returns a table');
SELECT function_returns('jobq', 'watch', ARRAY['bigint'], 'text', 'watch() returns the state (text)');
SELECT is((SELECT pg_catalog.pg_get_function_result('jobq.parent_results(bigint)'::regprocedure)),
          'TABLE(parent_id bigint, result jsonb)', 'parent_results() returns TABLE (parent_id bigint, result jsonb)');

-- SECURITY DEFINER exactly where intended -----------------------------------
SELECT is_definer('jobq', 'enqueue', ARRAY['text', 'jsonb', 'timestamp with time zone', 'integer', 'integer', 'text', 'text', 'interval', 'interval', 'bigint[]', 'text', 'jsonb', 'text', 'text'], 'enqueue() is SECURITY DEFINER');
SELECT is_definer('jobq', 'claim', ARRAY['text[]', 'bigint', 'text', 'interval'], 'claim(text[], ...) is SECURITY DEFINER');
SELECT is_definer('jobq', 'complete', ARRAY['bigint', 'uuid', 'jsonb'], 'complete() is SECURITY DEFINER');
SELECT is_definer('jobq', 'fail', ARRAY['bigint', 'text', 'uuid', 'timestamp with time zone'], 'fail() is SECURITY DEFINER');
SELECT isnt_definer('jobq', 'version', ARRAY[]::text[], 'version() is not SECURITY DEFINER');
SELECT isnt_definer('jobq', 'schedule_maintenance', ARRAY['text', 'text'], 'schedule_maintenance() is not SECURITY DEFINER (pg_cron jobs run as the caller)');
SELECT isnt_definer('jobq', '_finish', ARRAY['bigint[]', 'uuid[]', 'text', 'text', 'boolean', 'jsonb[]', 'bigint'], 'private _finish() is not SECURITY DEFINER');
SELECT isnt_definer('jobq', '_lock_ready', ARRAY['text', 'integer'], 'private _lock_ready() is not SECURITY DEFINER');
SELECT isnt_definer('jobq', '_fold_counters', ARRAY[]::text[], 'private _fold_counters() is not SECURITY DEFINER');
SELECT isnt_definer('jobq', '_pick', ARRAY['text[]', 'integer', 'interval'], 'private _pick() is not SECURITY DEFINER');
SELECT isnt_definer('jobq', 'every', ARRAY['text', 'text', 'text', 'jsonb', 'integer', 'integer', 'text'],
                    'every() is not SECURITY DEFINER (its pg_cron job runs as the caller)');
SELECT isnt_definer('jobq', 'unschedule', ARRAY['text'], 'unschedule() is not SECURITY DEFINER (pg_cron checks the caller owns the job)');
SELECT is_definer('jobq', 'enqueue_periodic', ARRAY['text'], 'enqueue_periodic() is SECURITY DEFINER (what the pg_cron job calls)');
SELECT is_definer('jobq', 'take', ARRAY['text', 'bigint'], 'take() is SECURITY DEFINER');
SELECT is_definer('jobq', 'hold', ARRAY['text', 'bigint'], 'hold() is SECURITY DEFINER');
SELECT is_definer('jobq', 'complete_held', ARRAY['bigint[]', 'jsonb[]'], 'complete_held() is SECURITY DEFINER');
SELECT is_definer('jobq', 'fail_held', ARRAY['bigint', 'text', 'timestamp with time zone'], 'fail_held() is SECURITY DEFINER');
SELECT is_definer('jobq', 'enqueue_callback', ARRAY['text', 'jsonb', 'bigint[]', 'timestamp with time zone', 'integer', 'integer', 'jsonb'],
                  'enqueue_callback() is SECURITY DEFINER');
SELECT is_definer('jobq', 'result', ARRAY['bigint'], 'result() is SECURITY DEFINER');
SELECT is_definer('jobq', 'status', ARRAY['bigint'], 'status() is SECURITY DEFINER');
SELECT is_definer('jobq', 'parent_results', ARRAY['bigint'], 'parent_results() is SECURITY DEFINER');
SELECT is_definer('jobq', 'watch', ARRAY['bigint'], 'watch() is SECURITY DEFINER');
SELECT isnt_definer('jobq', '_settle', ARRAY['bigint[]'], 'private _settle() is not SECURITY DEFINER');
SELECT isnt_definer('jobq', '_finish_dependents', ARRAY['bigint[]', 'text'], 'private _finish_dependents() is not SECURITY DEFINER');
SELECT set_eq(
    $$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
      WHERE p.pronamespace = 'jobq'::regnamespace AND p.prosecdef$$,
    ARRAY[
        'jobq.enqueue(text,jsonb,timestamp with time zone,integer,integer,text,text,interval,interval,bigint[],text,jsonb,text,text)',
        'jobq.enqueue_many(text,jsonb[],timestamp with time zone,integer,integer,text[],text,interval,interval,bigint[],text,jsonb[],text[],text)',
        'jobq.claim(text,bigint,text,interval)',
        'jobq.claim(text[],bigint,text,interval)',
        'jobq.complete(bigint,uuid,jsonb)',
        'jobq.complete_many(bigint[],uuid[],jsonb[])',
        'jobq.fail(bigint,text,uuid,timestamp with time zone)',
        'jobq.heartbeat(bigint,uuid,interval)',
        'jobq.progress(bigint,uuid,jsonb)',
        'jobq.release(bigint,uuid)',
        'jobq.reap(integer)',
        'jobq.next_run_at(text[])',
        'jobq.retry(bigint)',
        'jobq.retry_dead(text)',
        'jobq.cancel(bigint)',
        'jobq.prune(integer)',
        'jobq.configure_queue(text,integer,interval,interval,double precision,interval,interval,interval,integer,integer,integer,interval,interval,interval,boolean,jsonb,integer)',
        'jobq.cancel_jobs(text,text,jsonb,jsonb)',
        'jobq.discard_dead(text,interval)',
        'jobq.run_schedules()',
        'jobq.reset_queue(text)',
        'jobq.take(text,bigint)',
        'jobq.hold(text,bigint)',
        'jobq.complete_held(bigint[],jsonb[])',
        'jobq.fail_held(bigint,text,timestamp with time zone)',
        'jobq.snooze(bigint,uuid,timestamp with time zone)',
        'jobq.pause(text)',
        'jobq.resume(text)',
        'jobq.enqueue_periodic(text)',
        'jobq.run_now(bigint)',
        'jobq.metrics()',
        'jobq.enqueue_callback(text,jsonb,bigint[],timestamp with time zone,integer,integer,jsonb)',
        'jobq.result(bigint)',
        'jobq.status(bigint)',
        'jobq.parent_results(bigint)',
        'jobq.watch(bigint)',
        'jobq.grant_queue(name,text,text)',
        'jobq.revoke_queue(name,text,text)',
        'jobq._periodic_save(text,text,text,jsonb,integer,integer,text)',
        'jobq._periodic_delete(text)',
        'jobq._settle_at_commit()',
        'jobq._queue_counts()',
        'jobq._running()'
    ],
    'SECURITY DEFINER functions are exactly the role-gated API, the two periodic-job helpers that every()/unschedule() (which run as the caller) need, the commit trigger that runs as whoever commits, and the two that jobq.stats and jobq.workers read (a view cannot pin its plans)');

-- pinned search_path and comments ------------------------------------------
SELECT cmp_ok((SELECT count(*)::int FROM pg_catalog.pg_proc WHERE pronamespace = 'jobq'::regnamespace),
              '>=', 45, 'jobq has at least the 45 functions of 0.2.0 (the checks below are not vacuous)');
SELECT is_empty(
    $$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
      WHERE p.pronamespace = 'jobq'::regnamespace
        AND NOT EXISTS (SELECT FROM unnest(p.proconfig) AS c WHERE c LIKE 'search\_path=%')$$,
    'every jobq function pins search_path');
SELECT is_empty(
    $$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
      WHERE p.pronamespace = 'jobq'::regnamespace
        AND NOT ('search_path=pg_catalog, pg_temp' = ANY (coalesce(p.proconfig, '{}')))$$,
    'every jobq function pins search_path to exactly pg_catalog, pg_temp (pg_temp last)');
SELECT is_empty(
    $$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
      WHERE p.pronamespace = 'jobq'::regnamespace
        AND coalesce(pg_catalog.obj_description(p.oid, 'pg_proc'), '') = ''$$,
    'every jobq function has a COMMENT');
SELECT is_empty(
    $$SELECT c.relname::text FROM pg_catalog.pg_class AS c
      WHERE c.relnamespace = 'jobq'::regnamespace AND c.relkind IN ('r', 'v')
        AND coalesce(pg_catalog.obj_description(c.oid, 'pg_class'), '') = ''$$,
    'every jobq table and view has a COMMENT');
SELECT isnt(pg_catalog.obj_description('jobq'::regnamespace, 'pg_namespace'), NULL, 'schema jobq has a COMMENT');

-- lock_timeout: no claim or acknowledgement hangs forever behind a stuck lock ----
SELECT set_eq(
    $$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
      WHERE p.pronamespace = 'jobq'::regnamespace AND 'lock_timeout=5s' = ANY (coalesce(p.proconfig, '{}'))$$,
    ARRAY[
        'jobq.claim(text,bigint,text,interval)',
        'jobq.claim(text[],bigint,text,interval)',
        'jobq.take(text,bigint)',
        'jobq.hold(text,bigint)',
        'jobq.complete_held(bigint[],jsonb[])',
        'jobq.fail_held(bigint,text,timestamp with time zone)',
        'jobq.snooze(bigint,uuid,timestamp with time zone)',
        'jobq.complete(bigint,uuid,jsonb)',
        'jobq.complete_many(bigint[],uuid[],jsonb[])',
        'jobq.fail(bigint,text,uuid,timestamp with time zone)',
        'jobq.heartbeat(bigint,uuid,interval)',
        'jobq.progress(bigint,uuid,jsonb)',
        'jobq.release(bigint,uuid)',
        'jobq.reap(integer)',
        'jobq.run_schedules()'
    ],
    'lock_timeout = 5s is pinned on exactly claim, take, hold, complete_held, fail_held, snooze, complete, complete_many, fail, heartbeat, progress, release, reap, run_schedules');
SELECT is_empty(
    $$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p, unnest(p.proconfig) AS c
      WHERE p.pronamespace = 'jobq'::regnamespace AND c LIKE 'lock\_timeout=%' AND c <> 'lock_timeout=5s'
        AND NOT (c = 'lock_timeout=1s' AND p.oid IN ('jobq._archive_add(date,date)'::regprocedure,
                                                     'jobq._archive_drop(text,timestamptz,timestamptz)'::regprocedure))$$,
    'no jobq function pins another lock_timeout, except 1s on the archive''s partition DDL (which must give up before claims and acks queued behind it do)');
SELECT set_eq(
    $$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
      WHERE p.pronamespace = 'jobq'::regnamespace AND 'lock_timeout=1s' = ANY (coalesce(p.proconfig, '{}'))$$,
    ARRAY['jobq._archive_add(date,date)',
          'jobq._archive_drop(text,timestamp with time zone,timestamp with time zone)'],
    'lock_timeout = 1s is pinned on exactly the archive''s partition DDL (_archive_add, _archive_drop)');
SELECT is((SELECT p.proconfig FROM pg_catalog.pg_proc AS p WHERE p.oid = 'jobq.claim(text[],bigint,text,interval)'::regprocedure),
          ARRAY['search_path=pg_catalog, pg_temp', 'lock_timeout=5s'],
          'claim(text[]) pins exactly search_path and lock_timeout (no statement_timeout that a long claim could trip)');
SELECT is((SELECT p.proconfig FROM pg_catalog.pg_proc AS p WHERE p.oid = 'jobq._claim(text[],integer,text,interval)'::regprocedure),
          ARRAY['search_path=pg_catalog, pg_temp', 'plan_cache_mode=force_generic_plan', 'jit=off',
                'enable_sort=off', 'enable_bitmapscan=off'],
          'the claim itself (jobq._claim) pins search_path, generic plans, no JIT, and its plan: no sort, no bitmap scan');
SELECT set_eq(
    $$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p, unnest(p.proconfig) AS c
      WHERE p.pronamespace = 'jobq'::regnamespace AND c = 'plan_cache_mode=force_generic_plan'$$,
    ARRAY['jobq._claim(text[],integer,text,interval)',
          'jobq.take(text,bigint)',
          'jobq._plain_leases(text[],interval)',
          'jobq._crowded_queues(text[],timestamp with time zone)',
          'jobq._pick(text[],integer,interval)',
          'jobq._fair_pick(text,integer,jobq._queue,boolean)',
          'jobq._fair_window(text,boolean)',
          'jobq._queue_slots(text,integer)',
          'jobq._pick_candidates(text[],integer[],interval[],integer)',
          'jobq._group_heads_only(bigint[],interval[],text[])',
          'jobq._lock_ready(text,integer)',
          'jobq._finish(bigint[],uuid[],text,text,boolean,jsonb[],bigint)',
          'jobq._finish_lean(bigint[],uuid[],boolean)',
          'jobq._finish_kept(bigint[],uuid[],text,text,boolean,jsonb[],bigint)',
          'jobq.reap(integer)',
          'jobq._leased_in_place(timestamp with time zone)',
          'jobq._live_sample(timestamp with time zone)',
          'jobq._queue_counts()',
          'jobq._denied_queue(text[],text)'],
    'the claim, finish and reap paths, the live counts and the per-queue privilege check run generic plans (planning once, not per call)');
SELECT set_eq(
    $$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p, unnest(p.proconfig) AS c
      WHERE p.pronamespace = 'jobq'::regnamespace AND c = 'plan_cache_mode=force_custom_plan'$$,
    ARRAY['jobq._gate_recount(bigint[])',
          'jobq._settle(bigint[])',
          'jobq._finish_dependents(bigint[],text)',
          'jobq._attach(bigint[],bigint[],text,boolean)',
          'jobq._settle_at_commit()',
          'jobq._restore_descendants(bigint)'],
    'the workflow functions plan at each call, with the sizes of then (a plan cached while a graph was small scanned it whole at every step)');
SELECT set_eq(
    $$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p, unnest(p.proconfig) AS c
      WHERE p.pronamespace = 'jobq'::regnamespace AND c = 'jit=off'$$,
    ARRAY['jobq._claim(text[],integer,text,interval)',
          'jobq.take(text,bigint)',
          'jobq._plain_leases(text[],interval)',
          'jobq._crowded_queues(text[],timestamp with time zone)',
          'jobq._pick(text[],integer,interval)',
          'jobq._fair_pick(text,integer,jobq._queue,boolean)',
          'jobq._fair_window(text,boolean)',
          'jobq._queue_slots(text,integer)',
          'jobq._pick_candidates(text[],integer[],interval[],integer)',
          'jobq._group_heads_only(bigint[],interval[],text[])',
          'jobq._lock_ready(text,integer)',
          'jobq._finish(bigint[],uuid[],text,text,boolean,jsonb[],bigint)',
          'jobq._finish_lean(bigint[],uuid[],boolean)',
          'jobq._finish_kept(bigint[],uuid[],text,text,boolean,jsonb[],bigint)',
          'jobq._finish_dependents(bigint[],text)',
          'jobq.reap(integer)',
          'jobq._leased_in_place(timestamp with time zone)',
          'jobq._live_sample(timestamp with time zone)',
          'jobq._running()',
          'jobq._queue_counts()'],
    'the generic plans of the claim, finish and reap paths and of the live counts are never JIT-compiled (their cost estimates would trigger it)');
-- Plans that do not depend on the statistics: what reads the claim index in
-- its order, or must read only by index, may not sort or bitmap-scan (a
-- table never analyzed, or analyzed while empty, would otherwise get a sort
-- of the whole backlog).
SELECT set_eq(
    $$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
      WHERE p.pronamespace = 'jobq'::regnamespace
        AND p.proconfig @> ARRAY['enable_sort=off', 'enable_bitmapscan=off']$$,
    ARRAY['jobq._claim(text[],integer,text,interval)',
          'jobq._plain_leases(text[],interval)',
          'jobq._crowded_queues(text[],timestamp with time zone)',
          'jobq._pick(text[],integer,interval)',
          'jobq._fair_pick(text,integer,jobq._queue,boolean)',
          'jobq._fair_window(text,boolean)',
          'jobq._queue_slots(text,integer)',
          'jobq._pick_candidates(text[],integer[],interval[],integer)',
          'jobq._group_heads_only(bigint[],interval[],text[])',
          'jobq._lock_ready(text,integer)',
          'jobq.reap(integer)',
          'jobq._leased_in_place(timestamp with time zone)',
          'jobq._running()',
          'jobq._queue_counts()'],
    'the claim paths, reap and the live counts pin their plans: no sort, no bitmap scan');
SELECT set_eq(
    $$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
      WHERE p.pronamespace = 'jobq'::regnamespace AND 'enable_seqscan=off' = ANY (p.proconfig)$$,
    ARRAY['jobq.reap(integer)',
          'jobq._leased_in_place(timestamp with time zone)',
          'jobq._running()',
          'jobq._queue_counts()',
          'jobq._fair_pick(text,integer,jobq._queue,boolean)',
          'jobq._finish(bigint[],uuid[],text,text,boolean,jsonb[],bigint)',
          'jobq._finish_lean(bigint[],uuid[],boolean)',
          'jobq._finish_kept(bigint[],uuid[],text,text,boolean,jsonb[],bigint)',
          'jobq._record_errors(bigint[],integer[],text[],text[])',
          'jobq._finish_dependents(bigint[],text)'],
    'reap, the live counts, finishing jobs (and their errors and dependents) read the live tables only by index (no sequential scan of a backlog, whatever the size when the plan was made)');

-- the hot table ---------------------------------------------------------------
SELECT has_index('jobq', '_job', '_job_claim_idx', ARRAY['queue', 'priority', 'run_at', 'id'],
                 'claim index on (queue, priority, run_at, id)');
SELECT is((SELECT pg_catalog.pg_get_expr(i.indpred, i.indrelid) FROM pg_catalog.pg_index AS i
           WHERE i.indexrelid = 'jobq._job_claim_idx'::regclass),
          '(NOT parked)', 'the claim index is partial: every row but the parked ones');
SELECT hasnt_index('jobq', '_job', '_job_lease_idx', 'no lease index (a claim writes no indexed column: HOT)');
SELECT is_empty(
    $$SELECT a.attname::text
      FROM pg_catalog.pg_index AS i
      JOIN pg_catalog.pg_attribute AS a ON a.attrelid = i.indrelid
      WHERE i.indrelid = 'jobq._job'::regclass
        AND a.attname IN ('status', 'attempts', 'lease_token', 'lease_expires_at', 'worker', 'started_at')
        AND (a.attnum = ANY (i.indkey)
             OR pg_catalog.pg_get_expr(i.indpred, i.indrelid) ~ ('\m' || a.attname || '\M')
             OR pg_catalog.pg_get_expr(i.indexprs, i.indrelid) ~ ('\m' || a.attname || '\M'))$$,
    'no index of jobq._job covers (as key, expression or predicate) a column a claim writes: its UPDATE can be HOT');
SELECT has_index('jobq', '_job', '_job_parked_idx', ARRAY['queue'], 'parked index on (queue)');
SELECT is((SELECT pg_catalog.pg_get_expr(i.indpred, i.indrelid) FROM pg_catalog.pg_index AS i
           WHERE i.indexrelid = 'jobq._job_parked_idx'::regclass),
          'parked', 'the parked index holds parked rows only');
SELECT ok((SELECT 'fillfactor=40' = ANY (c.reloptions) FROM pg_catalog.pg_class AS c WHERE c.oid = 'jobq._job'::regclass),
          'jobq._job has fillfactor 40 (room on the page for the HOT row version)');
SELECT col_not_null('jobq', '_job', 'parked', 'parked is NOT NULL');
SELECT col_default_is('jobq', '_job', 'parked', 'false', 'a new job is not parked');
SELECT throws_ok(
    $$INSERT INTO jobq._job (queue, payload, max_attempts, parked) VALUES ('q', '{}', 1, true)$$,
    '23514', NULL, 'only a running or waiting job can be parked');
SELECT index_is_unique('jobq', '_job', '_job_key_idx', 'one active job per (queue, job_key)');
SELECT has_index('jobq', '_job', '_job_group_idx', ARRAY['queue', 'group_key', 'id'],
                 'serial-group index on (queue, group_key, id)');
SELECT is((SELECT pg_catalog.pg_get_expr(i.indpred, i.indrelid) FROM pg_catalog.pg_index AS i
           WHERE i.indexrelid = 'jobq._job_group_idx'::regclass),
          '(group_key IS NOT NULL)', 'the group index is partial: grouped rows only');
SELECT has_index('jobq', '_rate_start', '_rate_start_idx', ARRAY['queue', 'started_at'],
                 'rate window index on (queue, started_at)');
SELECT throws_ok(
    $$INSERT INTO jobq._job (queue, payload, max_attempts, group_key) VALUES ('q', '{}', 1, '')$$,
    '23514', NULL, 'the live table rejects an empty group_key');
SELECT throws_ok(
    $$INSERT INTO jobq._queue (queue, concurrency) VALUES ('q', 0)$$,
    '23514', NULL, 'the settings table rejects concurrency 0 (0 means "no limit" only as a configure_queue argument)');
SELECT throws_ok(
    $$INSERT INTO jobq._periodic (name, schedule, queue, payload) VALUES ('a b', '* * * * *', 'q', '{}')$$,
    '23514', NULL, 'the periodic table rejects a badly spelled name');
SELECT throws_ok(
    $$INSERT INTO jobq._job (queue, payload, status, max_attempts) VALUES ('q', '{}', 'completed', 1)$$,
    '23514', NULL, 'the live table only holds waiting, ready and running jobs');
SELECT lives_ok(
    $$INSERT INTO jobq._job (queue, payload, status, max_attempts, parked) VALUES ('q', '{}', 'waiting', 1, true)$$,
    'the live table holds waiting jobs, parked (off the claim index)');
SELECT throws_ok(
    $$INSERT INTO jobq._job (queue, payload, status, max_attempts) VALUES ('q', '{}', 'waiting', 1)$$,
    '23514', NULL, 'a waiting job is always parked');
SELECT throws_ok(
    $$INSERT INTO jobq._job (queue, payload, status, max_attempts) VALUES ('q', '{}', 'running', 1)$$,
    '23514', NULL, 'a running row must carry a lease token and expiry');

SELECT * FROM finish();
ROLLBACK;

-- Debounce and throttle (issue 28): enqueue's on_duplicate with a job_key.
-- 'keep' (the default) returns the holder unchanged; 'replace' gives a
-- waiting, ready or scheduled holder the new payload, run_at and priority;
-- 'replace_payload' only the payload; a running holder is never changed: it
-- hands its key to a new job. Multi-session races: tests/test_debounce.py.
BEGIN;
SELECT plan(69);
SET LOCAL client_min_messages = warning;

-- ready: 'replace' takes payload, run_at and priority, keeps id and the rest
SELECT jobq.enqueue('r', '{"v": 1}', max_attempts => 4, job_key => 'k', group_key => 'g',
                    timeout => interval '1 minute') AS r1 \gset
SELECT is(jobq.enqueue('r', '{"v": 2}', now() + interval '1 hour', 7, 9, 'k', 'other', interval '2 minutes',
                       on_duplicate => 'replace'),
          :r1::bigint, 'replace of a ready job returns its id');
SELECT results_eq($$SELECT payload, run_at, priority::int FROM jobq._job WHERE queue = 'r'$$,
                  $$VALUES ('{"v": 2}'::jsonb, now() + interval '1 hour', 7)$$,
                  'it took the new payload, run_at and priority (and it is the only job)');
SELECT results_eq($$SELECT max_attempts, group_key, timeout, attempts, status FROM jobq._job WHERE id = $$ || :r1,
                  $$VALUES (4, 'g', interval '1 minute', 0, 'ready')$$,
                  'and kept its max_attempts, group_key, timeout, attempts and status');

-- scheduled: debounce pushes the run back, or brings it forward
SELECT jobq.enqueue('s', '{"n": 1}', now() + interval '10 seconds', job_key => 'sk', on_duplicate => 'replace') AS s1 \gset
SELECT is((SELECT run_at FROM jobq._job WHERE id = :s1), now() + interval '10 seconds',
          'replace with no holder inserts a job, as keep would');
SELECT is(jobq.enqueue('s', '{"n": 2}', now() + interval '30 seconds', job_key => 'sk', on_duplicate => 'replace'),
          :s1::bigint, 'replace of a scheduled job returns its id');
SELECT results_eq($$SELECT payload, run_at FROM jobq._job WHERE queue = 's'$$,
                  $$VALUES ('{"n": 2}'::jsonb, now() + interval '30 seconds')$$,
                  'debounce: the scheduled job runs later, with the last payload');
SELECT is(jobq.enqueue('s', '{"n": 3}', job_key => 'sk', on_duplicate => 'replace'), :s1::bigint,
          'replace with run_at now() of a scheduled job returns its id');
SELECT is((SELECT run_at FROM jobq._job WHERE id = :s1), now(), 'and makes it due at once');

-- 'replace_payload' (throttle): the payload only
SELECT jobq.enqueue('t', '{"n": 1}', now() + interval '1 minute', 3, job_key => 'tk') AS t1 \gset
SELECT is(jobq.enqueue('t', '{"n": 2}', now() + interval '5 minutes', 9, job_key => 'tk',
                       on_duplicate => 'replace_payload'),
          :t1::bigint, 'replace_payload of a scheduled job returns its id');
SELECT results_eq($$SELECT payload, run_at, priority::int FROM jobq._job WHERE queue = 't'$$,
                  $$VALUES ('{"n": 2}'::jsonb, now() + interval '1 minute', 3)$$,
                  'throttle: new payload, run_at and priority kept');
SELECT is(jobq.enqueue('t', '{"n": 9}', job_key => 'tk2', on_duplicate => 'replace_payload') IS NOT NULL, true,
          'replace_payload with no holder inserts');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 't'), 2, 'so queue t has two jobs');

-- meta goes with the payload: replaced by both modes (the trace context of the last enqueue)
SELECT jobq.enqueue('dm', '{"n": 1}', now() + interval '1 minute', job_key => 'mk', meta => '{"tag": "first"}') AS m1 \gset
SELECT is(jobq.enqueue('dm', '{"n": 2}', now() + interval '2 minutes', job_key => 'mk', meta => '{"tag": "second"}',
                       on_duplicate => 'replace'), :m1::bigint, 'replace with meta returns the holder');
SELECT is((SELECT meta FROM jobq._job WHERE id = :m1), '{"tag": "second"}'::jsonb, 'replace gives it the new meta');
SELECT is(jobq.enqueue('dm', '{"n": 3}', job_key => 'mk', on_duplicate => 'replace_payload'), :m1::bigint,
          'replace_payload without meta returns the holder');
SELECT results_eq($$SELECT payload, meta FROM jobq._job WHERE queue = 'dm'$$,
                  $$VALUES ('{"n": 3}'::jsonb, NULL::jsonb)$$,
                  'replace_payload replaces the meta with the payload (none given: none kept)');
SELECT x AS m2 FROM jobq.enqueue_many('dm', ARRAY['{"n": 4}']::jsonb[], job_keys => ARRAY['mk'],
                                       metas => ARRAY['{"tag": "many"}']::jsonb[], on_duplicate => 'replace') AS x \gset
SELECT is(:m2::bigint, :m1::bigint, 'enqueue_many''s replace returns the holder');
SELECT is((SELECT meta FROM jobq._job WHERE id = :m1), '{"tag": "many"}'::jsonb, 'and gives it its metas[i]');

-- 'keep' (the default) changes nothing, as before
SELECT jobq.enqueue('kp', '{"v": 1}', job_key => 'kk') AS kp1 \gset
SELECT is(jobq.enqueue('kp', '{"v": 2}', now() + interval '1 day', 5, job_key => 'kk'), :kp1::bigint,
          'keep (default) returns the holder');
SELECT is(jobq.enqueue('kp', '{"v": 3}', job_key => 'kk', on_duplicate => 'keep'), :kp1::bigint,
          'keep (explicit) returns the holder');
SELECT results_eq($$SELECT payload, run_at, priority::int FROM jobq._job WHERE queue = 'kp'$$,
                  $$VALUES ('{"v": 1}'::jsonb, now(), 0)$$, 'keep left the job as it was');

-- waiting (for a parent): replaced, stays waiting with its parents
SELECT jobq.enqueue('wp', '{}') AS parent \gset
SELECT jobq.enqueue('w', '{"v": 1}', job_key => 'wk', depends_on => ARRAY[:parent]::bigint[]) AS w1 \gset
SELECT jobq.enqueue('wp', '{}') AS other_parent \gset
SELECT is(jobq.enqueue('w', '{"v": 2}', now() + interval '1 minute', 2, job_key => 'wk',
                       depends_on => ARRAY[:other_parent]::bigint[], on_duplicate => 'replace'),
          :w1::bigint, 'replace of a waiting job returns its id');
SELECT results_eq($$SELECT payload, run_at, priority::int, status FROM jobq._job WHERE id = $$ || :w1,
                  $$VALUES ('{"v": 2}'::jsonb, now() + interval '1 minute', 2, 'waiting')$$,
                  'it took the new payload, run_at and priority and still waits');
SELECT results_eq($$SELECT parent_id FROM jobq._job_dep WHERE child_id = $$ || :w1,
                  ARRAY[:parent::bigint], 'its parents stay: the duplicate''s depends_on is not added');
SELECT jobq.enqueue('w2', '{"v": 1}', job_key => 'w2k', on_duplicate => 'replace',
                    depends_on => ARRAY[:parent]::bigint[]) AS w2 \gset
SELECT results_eq($$SELECT status FROM jobq._job WHERE id = $$ || :w2, $$VALUES ('waiting')$$,
                  'replace with depends_on and no holder inserts a waiting job');
SELECT results_eq($$SELECT parent_id FROM jobq._job_dep WHERE child_id = $$ || :w2,
                  ARRAY[:parent::bigint], 'linked to its parent');

-- running: never changed; the key moves to a new job
SELECT jobq.enqueue('run', '{"v": 1}', job_key => 'rk', priority => 1) AS run1 \gset
CREATE TEMP TABLE claimed AS SELECT * FROM jobq.claim('run');
SELECT is((SELECT id FROM claimed), :run1::bigint, 'setup: the keyed job is running');
CREATE TEMP TABLE before_run AS
    SELECT payload, run_at, priority, attempts, lease_token, lease_expires_at, worker, started_at
    FROM jobq._job WHERE id = :run1;
SELECT is(jobq.enqueue('run', '{"v": 2}', job_key => 'rk'), :run1::bigint,
          'keep of a running job returns the running job');
SELECT jobq.enqueue('run', '{"v": 3}', now() + interval '1 minute', 5, job_key => 'rk', on_duplicate => 'replace') AS run2 \gset
SELECT isnt(:run2::bigint, :run1::bigint, 'replace of a running job makes a second job');
SELECT results_eq($$SELECT payload, run_at, priority, attempts, lease_token, lease_expires_at, worker, started_at
                    FROM jobq._job WHERE id = $$ || :run1,
                  $$SELECT * FROM before_run$$, 'the running job is not changed');
SELECT is((SELECT job_key FROM jobq._job WHERE id = :run1), NULL, 'it handed its key over');
SELECT results_eq($$SELECT payload, run_at, priority::int, job_key, status FROM jobq._job WHERE id = $$ || :run2,
                  $$VALUES ('{"v": 3}'::jsonb, now() + interval '1 minute', 5, 'rk', 'ready')$$,
                  'the new job holds the key, with the new payload, run_at and priority');
SELECT is(jobq.enqueue('run', '{"v": 4}', job_key => 'rk', on_duplicate => 'replace'), :run2::bigint,
          'the next replace replaces the new job, not the running one');
SELECT is(jobq.enqueue('run', '{"v": 5}', job_key => 'rk'), :run2::bigint, 'keep returns the new holder');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'run'), 2, 'two jobs: the running one and the new one');
SELECT ok(jobq.complete(:run1, (SELECT lease_token FROM claimed)), 'the running job still completes');
SELECT is((SELECT job_id FROM jobq._key_done WHERE queue = 'run' AND job_key = 'rk'), NULL,
          'its completion does not count for the key it handed over (unique_for)');
SELECT is((SELECT payload FROM jobq._job WHERE id = :run2), '{"v": 4}'::jsonb, 'the new job has the last payload');

-- replace_payload of a running job: the same hand-over
SELECT jobq.enqueue('rp', '{"v": 1}', job_key => 'rpk') AS rp1 \gset
CREATE TEMP TABLE claimed_rp AS SELECT * FROM jobq.claim('rp');
SELECT jobq.enqueue('rp', '{"v": 2}', job_key => 'rpk', on_duplicate => 'replace_payload') AS rp2 \gset
SELECT isnt(:rp2::bigint, :rp1::bigint, 'replace_payload of a running job makes a second job');
SELECT is((SELECT payload FROM jobq._job WHERE id = :rp1), '{"v": 1}'::jsonb, 'the running job keeps its payload');
-- a running job that handed its key over and fails comes back without it
SELECT ok(jobq.fail(:rp1, 'boom', (SELECT lease_token FROM claimed_rp)), 'the hand-over job fails');
SELECT results_eq($$SELECT status, job_key FROM jobq._job WHERE id = $$ || :rp1,
                  $$VALUES ('ready', NULL::text)$$, 'and is retried without a key (no clash with the new holder)');
SELECT is((SELECT job_key FROM jobq._job WHERE id = :rp2), 'rpk', 'the new job still holds the key');

-- finished holders (completed, dead, cancelled) do not block: a new job
SELECT jobq.enqueue('f', '{"v": 1}', job_key => 'fk', max_attempts => 1) AS f1 \gset
CREATE TEMP TABLE claimed_f AS SELECT * FROM jobq.claim('f');
SELECT ok(jobq.complete(:f1, (SELECT lease_token FROM claimed_f)), 'complete the keyed job');
SELECT jobq.enqueue('f', '{"v": 2}', job_key => 'fk', on_duplicate => 'replace') AS f2 \gset
SELECT isnt(:f2::bigint, :f1::bigint, 'replace after the key''s job completed inserts a new job');
SELECT is(jobq.enqueue('f', '{"v": 3}', job_key => 'fk2', on_duplicate => 'replace', unique_for => interval '1 hour')
          IS NOT NULL, true, 'replace with unique_for and no history inserts');
SELECT ok(jobq.cancel(:f2), 'cancel the new job');
SELECT jobq.enqueue('f', '{"v": 4}', job_key => 'fk', on_duplicate => 'replace', unique_for => interval '1 hour') AS f3 \gset
SELECT is(:f3::bigint, :f1::bigint,
          'replace with unique_for, no active holder and a completion within it returns the completed job');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'f' AND job_key = 'fk'), 0, 'and adds nothing');
SELECT jobq.enqueue('f', '{"v": 5}', job_key => 'fk', on_duplicate => 'replace') AS f4 \gset
SELECT isnt(:f4::bigint, :f1::bigint, 'without unique_for the cancelled and completed jobs do not block');
SELECT is(jobq.enqueue('f', '{"v": 6}', job_key => 'fk', on_duplicate => 'replace', unique_for => interval '1 hour'),
          :f4::bigint, 'with an active holder and unique_for, replace replaces the holder');
SELECT is((SELECT payload FROM jobq._job WHERE id = :f4), '{"v": 6}'::jsonb, 'with the new payload');

-- enqueue_many
SELECT jobq.enqueue('m', '{"v": 0}', job_key => 'a') AS ma \gset
CREATE TEMP TABLE many AS
    SELECT * FROM jobq.enqueue_many('m', ARRAY['{"v": 1}', '{"v": 2}', '{"v": 3}', '{"v": 4}']::jsonb[],
                                    now() + interval '1 minute', job_keys => ARRAY['a', 'b', NULL, 'b'],
                                    on_duplicate => 'replace') WITH ORDINALITY AS e(id, o);
SELECT is((SELECT id FROM many WHERE o = 1), :ma::bigint, 'enqueue_many replace returns the holder''s id');
SELECT is((SELECT id FROM many WHERE o = 4), (SELECT id FROM many WHERE o = 2),
          'a key given twice in one call: one job, its id twice');
SELECT is((SELECT id FROM many WHERE o = 3), (SELECT id FROM jobq._job WHERE queue = 'm' AND job_key IS NULL),
          'a NULL key: a plain job');
SELECT results_eq($$SELECT job_key, payload, run_at FROM jobq._job WHERE queue = 'm' ORDER BY id$$,
                  $$VALUES ('a', '{"v": 1}'::jsonb, now() + interval '1 minute'),
                           ('b', '{"v": 4}'::jsonb, now() + interval '1 minute'),
                           (NULL, '{"v": 3}'::jsonb, now() + interval '1 minute')$$,
                  'a held key replaced, a key given twice: the last wins, NULL keys: plain jobs');
SELECT results_eq(
    $$SELECT * FROM jobq.enqueue_many('m', ARRAY['{"v": 5}']::jsonb[], now() + interval '1 hour', 4,
                                      job_keys => ARRAY['a'], on_duplicate => 'replace_payload')$$,
    ARRAY[:ma::bigint], 'enqueue_many replace_payload returns the holder');
SELECT results_eq($$SELECT payload, run_at, priority::int FROM jobq._job WHERE id = $$ || :ma,
                  $$VALUES ('{"v": 5}'::jsonb, now() + interval '1 minute', 0)$$, 'with the payload only replaced');
SELECT results_eq(
    $$SELECT * FROM jobq.enqueue_many('m', ARRAY['{"v": 6}']::jsonb[], job_keys => ARRAY['a'])$$,
    ARRAY[:ma::bigint], 'enqueue_many keep (default) returns the holder');
SELECT is((SELECT payload FROM jobq._job WHERE id = :ma), '{"v": 5}'::jsonb, 'unchanged');

-- bad input: a JQ error, nothing changed
CREATE TEMP TABLE snap AS SELECT to_jsonb(j) AS row FROM jobq._job AS j;
SELECT throws_ok($$SELECT jobq.enqueue('b', '{}', job_key => 'x', on_duplicate => 'merge')$$, 'JQ017',
                 'jobq: on_duplicate must be ''keep'', ''replace'' or ''replace_payload'', got ''merge''',
                 'an unknown on_duplicate raises JQ017 naming it');
SELECT throws_ok($$SELECT jobq.enqueue('b', '{}', job_key => 'x', on_duplicate => NULL)$$, 'JQ017', NULL,
                 'a NULL on_duplicate raises JQ017');
SELECT throws_ok($$SELECT jobq.enqueue('b', '{}', on_duplicate => NULL)$$, 'JQ017', NULL,
                 'a NULL on_duplicate without a key raises JQ017 (not the fast path)');
SELECT throws_ok($$SELECT jobq.enqueue('b', '{}', on_duplicate => 'replace')$$, 'JQ009',
                 'jobq: on_duplicate ''replace'' needs job_key (it replaces the job holding that key)',
                 'replace without job_key raises JQ009 naming job_key');
SELECT throws_ok($$SELECT jobq.enqueue('b', '{}', on_duplicate => 'replace_payload', depends_on => ARRAY[1]::bigint[])$$,
                 'JQ009', NULL, 'replace_payload without job_key raises JQ009 on the general path too');
SELECT throws_ok($$SELECT jobq.enqueue_many('b', ARRAY['{}']::jsonb[], on_duplicate => 'replace')$$, 'JQ009',
                 'jobq: on_duplicate ''replace'' needs job_keys (it replaces the job holding that key)',
                 'enqueue_many replace without job_keys raises JQ009 naming job_keys');
SELECT throws_ok($$SELECT jobq.enqueue_many('b', ARRAY['{}']::jsonb[], job_keys => ARRAY['x'], on_duplicate => 'x')$$,
                 'JQ017', NULL, 'enqueue_many: an unknown on_duplicate raises JQ017');
SELECT throws_ok($$SELECT jobq.enqueue_many('b', ARRAY['{}']::jsonb[], job_keys => ARRAY['x'], on_duplicate => NULL)$$,
                 'JQ017', NULL, 'enqueue_many: a NULL on_duplicate raises JQ017');
SELECT set_eq($$SELECT to_jsonb(j) FROM jobq._job AS j$$, $$SELECT row FROM snap$$, 'the bad calls changed nothing');

SELECT * FROM finish();
ROLLBACK;

-- Fair queues (issue 28): configure_queue(q, fair => true) claims round-robin
-- across the fair keys with due jobs (enqueue's fair_key), from the key
-- served last, one job per key per turn (fair_weights: more turns), until n
-- are taken; a key alone gets everything; per_key_concurrency caps the
-- running jobs of each key. Bad input is a JQ error that changes nothing.
-- (Many sessions and worker processes: tests/test_fair_queues.py.)
BEGIN;
SELECT plan(100);

-- The fair keys of the jobs a claim returns, sorted ('-' for a keyless job).
CREATE FUNCTION pg_temp.claim_keys(p_queue text, p_n int) RETURNS text LANGUAGE sql AS $$
    SELECT coalesce(string_agg(coalesce(nullif(f.fair_key, ''), '-'), ',' ORDER BY f.fair_key, f.id), '')
    FROM jobq.claim(p_queue, p_n) AS c JOIN jobq._job AS f ON f.id = c.id
$$;
CREATE FUNCTION pg_temp.add(p_queue text, p_key text, p_count int) RETURNS void LANGUAGE sql AS $$
    SELECT count(*) FROM jobq.enqueue_many(p_queue, array_fill('{}'::jsonb, ARRAY[p_count]),
                                           fair_keys => array_fill(p_key, ARRAY[p_count]))
$$;
-- The fair keys of jobs by id, read after the statement that made them (VOLATILE: sees its writes).
CREATE FUNCTION pg_temp.keys_of(p_ids bigint[]) RETURNS text[] LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN (SELECT array_agg(j.fair_key ORDER BY j.id) FROM jobq._job AS j WHERE j.id = ANY (p_ids));
END
$$;
CREATE FUNCTION pg_temp.snapshot() RETURNS text LANGUAGE sql AS $$
    SELECT md5(coalesce((SELECT string_agg(j::text, '|' ORDER BY j.id) FROM jobq._job AS j), '')
               || coalesce((SELECT string_agg(q::text, '|' ORDER BY q.queue) FROM jobq._queue AS q), ''))
$$;

-- settings -------------------------------------------------------------------------------------
SELECT is((jobq.configure_queue('f', fair => true)).fair, true, 'configure_queue(fair => true) makes a queue fair');
SELECT is((jobq._settings('plain')).fair, false, 'a queue is not fair by default');
SELECT is((jobq.configure_queue('f', fair_weights => '{"gold": 3}')).fair_weights, '{"gold": 3}'::jsonb,
          'fair_weights are kept');
SELECT is((jobq.configure_queue('f', per_key_concurrency => 2)).per_key_concurrency, 2, 'per_key_concurrency is kept');
SELECT is((jobq.configure_queue('f', max_attempts => 3)).fair_weights, '{"gold": 3}'::jsonb,
          'other settings leave fair_weights as they are');
SELECT is((jobq.configure_queue('f', fair_weights => '{}')).fair_weights, NULL, 'fair_weights => ''{}'' removes them');
SELECT is((jobq.configure_queue('f', per_key_concurrency => 0)).per_key_concurrency, NULL,
          'per_key_concurrency => 0 removes the limit');
SELECT jobq.configure_queue('f2', fair => true, fair_weights => '{"a": 2}', per_key_concurrency => 5);
SELECT results_eq($$SELECT s.fair, s.fair_weights, s.per_key_concurrency FROM jobq.configure_queue('f2', fair => false) AS s$$,
                  $$VALUES (false, NULL::jsonb, NULL::integer)$$,
                  'fair => false makes the queue plain again and drops its weights and per-key limit');
SELECT jobq.configure_queue('f3', fair => true, fair_weights => '{"a": 2}', per_key_concurrency => 5);
SELECT jobq.pause('f3');
SELECT ok(jobq.reset_queue('f3'), 'reset_queue of a fair queue');
SELECT results_eq($$SELECT fair, fair_weights, per_key_concurrency, paused FROM jobq._settings('f3')$$,
                  $$VALUES (false, NULL::jsonb, NULL::integer, true)$$,
                  'reset_queue drops fair, its weights and per-key limit (a pause stays)');

-- enqueue --------------------------------------------------------------------------------------
SELECT is(pg_temp.keys_of(ARRAY[jobq.enqueue('f', '{}', fair_key => 'acme')]), ARRAY['acme'],
          'enqueue(fair_key => …) keeps the key');
SELECT is(pg_temp.keys_of(ARRAY[jobq.enqueue('f', '{}')]), ARRAY[''],
          'a job of a fair queue without a key gets '''' (the keyless jobs'' turn)');
SELECT is(pg_temp.keys_of(ARRAY[jobq.enqueue('plain', '{}')]), ARRAY[NULL::text],
          'a job of a plain queue without a key has none');
SELECT is(pg_temp.keys_of(ARRAY[jobq.enqueue('f', '{}', job_key => 'k1', fair_key => 'acme')]),
          ARRAY['acme'], 'enqueue with a job_key keeps the fair key too');
SELECT is(pg_temp.keys_of(ARRAY(SELECT jobq.enqueue_many('f', ARRAY['{}', '{}', '{}']::jsonb[],
                                                         fair_keys => ARRAY['x', NULL, 'y']))),
          ARRAY['x', '', 'y'], 'enqueue_many(fair_keys => …) gives each job its key, NULL: none');
SELECT is(pg_temp.keys_of(ARRAY(SELECT jobq.enqueue_many('f', ARRAY['{}', '{}']::jsonb[], job_keys => ARRAY['m1', 'm2'],
                                                         fair_keys => ARRAY['p', 'q']))),
          ARRAY['p', 'q'], 'enqueue_many with job_keys keeps the fair keys');
SELECT jobq.enqueue('later', '{}');
SELECT jobq.configure_queue('later', fair => true);
SELECT is((SELECT fair_key FROM jobq._job WHERE queue = 'later'), '',
          'turning fair on gives the live keyless jobs the keyless turn');
DELETE FROM jobq._job;

-- round-robin ----------------------------------------------------------------------------------
SELECT jobq.configure_queue('rr', fair => true);
SELECT pg_temp.add('rr', 'a', 5);
SELECT pg_temp.add('rr', 'b', 2);
SELECT pg_temp.add('rr', 'c', 1);
SELECT is(pg_temp.claim_keys('rr', 3), 'a,b,c', 'one job per key per turn: the first claim takes a, b and c');
SELECT is((SELECT fair_cursor FROM jobq._queue WHERE queue = 'rr'), 'c', 'the cursor is the key served last');
SELECT is(pg_temp.claim_keys('rr', 1), 'a', 'the next claim starts after the cursor, wrapping around');
SELECT is(pg_temp.claim_keys('rr', 1), 'b', 'and goes on with the next key');
SELECT is(pg_temp.claim_keys('rr', 10), 'a,a,a', 'keys that run out leave their turns to the others');
SELECT is(pg_temp.claim_keys('rr', 10), '', 'nothing left, nothing claimed');
DELETE FROM jobq._job;
SELECT pg_temp.add('rr', 'solo', 50);
SELECT is(pg_temp.claim_keys('rr', 40), repeat('solo,', 39) || 'solo', 'a key alone gets the whole claim (work-conserving)');
DELETE FROM jobq._job;

-- order within a key: (priority, run_at, id)
SELECT jobq.enqueue('rr', '{"n": 1}', fair_key => 'k', priority => 5);
SELECT jobq.enqueue('rr', '{"n": 2}', fair_key => 'k', priority => 1);
SELECT jobq.enqueue('rr', '{"n": 3}', fair_key => 'k', run_at => now() - interval '1 hour', priority => 5);
SELECT is((SELECT payload FROM jobq.claim('rr', 1)), '{"n": 2}'::jsonb, 'within a key, the most urgent priority first');
SELECT is((SELECT payload FROM jobq.claim('rr', 1)), '{"n": 3}'::jsonb, 'then the oldest run_at');
DELETE FROM jobq._job;

-- keyless jobs are one key; scheduled jobs wait
SELECT pg_temp.add('rr', 'a', 3);
SELECT jobq.enqueue('rr', '{}');
SELECT jobq.enqueue('rr', '{}');
SELECT jobq.enqueue('rr', '{}', fair_key => 'z', run_at => now() + interval '1 hour');
UPDATE jobq._queue SET fair_cursor = NULL, fair_turns = NULL WHERE queue = 'rr';
SELECT is(pg_temp.claim_keys('rr', 2), '-,a', 'jobs without a fair key share one turn');
SELECT is(pg_temp.claim_keys('rr', 10), '-,a,a', 'a key with only scheduled jobs has no turn');
SELECT is((SELECT count(*) FROM jobq._job WHERE queue = 'rr' AND status = 'ready')::int, 1, 'its job waits for its run_at');
DELETE FROM jobq._job;

-- weights --------------------------------------------------------------------------------------
SELECT jobq.configure_queue('w', fair => true, fair_weights => '{"gold": 3}');
SELECT pg_temp.add('w', 'gold', 40);
SELECT pg_temp.add('w', 'silver', 40);
SELECT is(pg_temp.claim_keys('w', 8), 'gold,gold,gold,gold,gold,gold,silver,silver', 'weight 3: three turns per round');
SELECT is(pg_temp.claim_keys('w', 1), 'gold', 'one job per claim: gold''s first turn of the round');
SELECT is(pg_temp.claim_keys('w', 1), 'gold', 'the cursor remembers the turns a key has had: its second');
SELECT is(pg_temp.claim_keys('w', 1), 'gold', 'its third');
SELECT is(pg_temp.claim_keys('w', 1), 'silver', 'then silver''s one');
DELETE FROM jobq._job;

-- per_key_concurrency --------------------------------------------------------------------------
SELECT jobq.configure_queue('pk', fair => true, per_key_concurrency => 2);
SELECT pg_temp.add('pk', 'a', 5);
SELECT pg_temp.add('pk', 'b', 1);
SELECT is(pg_temp.claim_keys('pk', 10), 'a,a,b', 'per_key_concurrency 2: at most two running jobs of a key');
SELECT is(pg_temp.claim_keys('pk', 10), '', 'a full key gets no more');
SELECT is((SELECT count(*) FROM jobq._job WHERE queue = 'pk' AND status = 'running' AND parked)::int, 3,
          'fair leases are parked (their count is an index scan)');
SELECT ok(jobq.complete(j.id, j.lease_token), 'completing one of a''s jobs')
FROM jobq._job AS j WHERE j.queue = 'pk' AND j.fair_key = 'a' AND j.status = 'running' ORDER BY j.id LIMIT 1;
SELECT is(pg_temp.claim_keys('pk', 10), 'a', 'frees one slot of that key');
SELECT is(jobq.fail(j.id, 'boom', j.lease_token, retry_at => now()), true, 'a failed attempt')
FROM jobq._job AS j WHERE j.queue = 'pk' AND j.fair_key = 'a' AND j.status = 'running' ORDER BY j.id LIMIT 1;
SELECT is(pg_temp.claim_keys('pk', 10), 'a', 'frees its slot, and the retry is claimable again');
DELETE FROM jobq._job;

-- other settings and claim paths ---------------------------------------------------------------
SELECT jobq.configure_queue('fc', fair => true, concurrency => 3);
SELECT pg_temp.add('fc', 'a', 5);
SELECT pg_temp.add('fc', 'b', 5);
SELECT is(pg_temp.claim_keys('fc', 10), 'a,a,b', 'the queue''s concurrency limit caps a fair claim');
SELECT jobq.pause('fc');
DELETE FROM jobq._job WHERE status = 'running';
SELECT is(pg_temp.claim_keys('fc', 10), '', 'a paused fair queue gives nothing');
SELECT jobq.resume('fc');
SELECT jobq.enqueue('plain', '{}');
SELECT is((SELECT string_agg(c.queue, ',' ORDER BY c.queue) FROM jobq.claim(ARRAY['fc', 'plain'], 4) AS c),
          'fc,fc,fc,plain', 'a claim across a fair and a plain queue serves both');
DELETE FROM jobq._job;
SELECT pg_temp.add('rr', 'a', 3);
SELECT pg_temp.add('rr', 'b', 3);
UPDATE jobq._queue SET fair_cursor = NULL, fair_turns = NULL WHERE queue = 'rr';
SELECT is((SELECT count(*) FROM jobq.take('rr', 2))::int, 2, 'take on a fair queue takes two jobs');
SELECT is((SELECT count(*) FROM jobq._job WHERE queue = 'rr')::int, 4, 'take removed two jobs');
SELECT is((SELECT string_agg(j.fair_key, ',' ORDER BY j.fair_key) FROM jobq._job AS j WHERE j.queue = 'rr'),
          'a,a,b,b', 'one of each key: take is fair too');
DELETE FROM jobq._job;

-- a lease that expires comes back into the fair queue
SELECT pg_temp.add('rr', 'a', 1);
SELECT is(pg_temp.claim_keys('rr', 1), 'a', 'claimed');
UPDATE jobq._job SET lease_expires_at = now() - interval '1 second' WHERE queue = 'rr';
SELECT is(jobq.reap(), 1, 'reap returns the expired lease');
SELECT is(pg_temp.claim_keys('rr', 1), 'a', 'and the fair claim finds the job again');
DELETE FROM jobq._job;

-- leases in place where reap and the live counts find them, parked elsewhere
SELECT jobq.configure_queue('ip', fair => true);
SELECT pg_temp.add('ip', 'big', 2500);
SELECT pg_temp.add('ip', 'small', 1);
SELECT is(pg_temp.claim_keys('ip', 2), 'big,small', 'one job of each key');
SELECT is((SELECT string_agg(fair_key || ':' || parked, ',' ORDER BY fair_key) FROM jobq._job
           WHERE queue = 'ip' AND status = 'running'), 'big:false,small:true',
          'the job at the head of the claim index is leased in place, the one behind 2,500 jobs of another key parked');
SELECT is((SELECT count(*)::int FROM jobq._leased_in_place(clock_timestamp()) WHERE queue = 'ip'), 1,
          'jobq._leased_in_place finds the lease in place');
SELECT is((SELECT running::int FROM jobq.stats WHERE queue = 'ip'), 2, 'jobq.stats counts both running');
SELECT is((SELECT ready::int FROM jobq.stats WHERE queue = 'ip'), 2499, 'and the others ready');
UPDATE jobq._job SET lease_expires_at = now() - interval '1 second' WHERE queue = 'ip' AND status = 'running';
SELECT is(jobq.reap(), 2, 'reap returns both expired leases');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'ip' AND status = 'ready' AND attempts = 1), 2,
          'both ready again, their attempt counted');
SELECT is(pg_temp.claim_keys('ip', 1), 'big', 'a lease in place again');
SELECT jobq.configure_queue('ip', per_key_concurrency => 5);
SELECT is((SELECT bool_and(parked) FROM jobq._job WHERE queue = 'ip' AND status = 'running'), true,
          'per_key_concurrency parks the leases granted in place before (it counts them by the parked index)');
SELECT jobq.configure_queue('ip', per_key_concurrency => 0);
SELECT jobq.configure_queue('ip', fair => false);
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'ip' AND status = 'running' AND NOT parked), 0,
          'turning fair off parks the leases a fair claim granted in place');
SELECT jobq.configure_queue('one', fair => true);
SELECT pg_temp.add('one', 'solo', 1500);
SELECT is((SELECT count(*)::int FROM jobq.claim('one', 1000)), 1000, 'a queue of one key: a claim of 1,000');
SELECT is((SELECT count(*)::int FROM jobq.claim('one', 400)), 400, 'and one of 400');
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'one' AND status = 'running' AND NOT parked), 1400,
          'all in place: one key''s order is the claim index''s');
SELECT is((SELECT count(*)::int FROM jobq._leased_in_place(clock_timestamp()) WHERE queue = 'one'), 1400,
          'where jobq._leased_in_place finds every one');
DELETE FROM jobq._job;

-- a dead job retried comes back with its fair key
SELECT jobq.configure_queue('dq', fair => true, max_attempts => 1);
SELECT jobq.enqueue('dq', '{}', fair_key => 'acme');
SELECT jobq.enqueue('dq', '{}');
SELECT is((SELECT count(*) FROM jobq.claim('dq', 5) AS c, LATERAL jobq.fail(c.id, 'boom', c.lease_token) AS f
           WHERE f)::int, 2, 'both jobs fail their one attempt');
SELECT is((SELECT array_agg(fair_key ORDER BY id) FROM jobq._job_archive WHERE queue = 'dq' AND status = 'dead'),
          ARRAY['acme', ''], 'the archive keeps their fair keys');
SELECT ok(jobq.retry((SELECT min(id) FROM jobq._job_archive WHERE queue = 'dq')), 'retry one');
SELECT is(jobq.retry_dead('dq'), 1, 'retry_dead the other');
SELECT is((SELECT array_agg(fair_key ORDER BY id) FROM jobq._job WHERE queue = 'dq'), ARRAY['acme', ''],
          'retried jobs take their fair keys back');
SELECT is(pg_temp.claim_keys('dq', 5), '-,acme', 'and the fair claim finds them');
DELETE FROM jobq._job;

-- what operators see ----------------------------------------------------------------------------
SELECT jobq.configure_queue('seen', fair => true, fair_weights => '{"a": 2}', per_key_concurrency => 4);
SELECT pg_temp.add('seen', 'a', 3);
SELECT pg_temp.add('seen', 'b', 1);
SELECT jobq.enqueue('seen', '{}');
SELECT jobq.enqueue('seen', '{}', fair_key => 'c', run_at => now() + interval '1 hour');
SELECT is(pg_temp.claim_keys('seen', 2), '-,a', 'the keyless jobs'' turn and a''s first of two');
SELECT results_eq($$SELECT fair_key, ready, scheduled, running, rank FROM jobq.fair_keys WHERE queue = 'seen' ORDER BY rank$$,
                  $$VALUES ('a', 2::bigint, 0::bigint, 1::bigint, 1::bigint), (NULL, 0, 0, 1, 2), ('b', 1, 0, 0, 3),
                           ('c', 0, 1, 0, 4)$$,
                  'jobq.fair_keys: each key''s ready, scheduled and running jobs, busiest first (NULL: no key)');
SELECT results_eq($$SELECT fair, fair_weights, per_key_concurrency FROM jobq.queues WHERE queue = 'seen'$$,
                  $$VALUES (true, '{"a": 2}'::jsonb, 4)$$, 'jobq.queues shows the fair settings');
SELECT is((SELECT count(*) FROM jobq.fair_keys WHERE queue = 'rr')::int, 0, 'a fair queue without jobs has no keys there');
DELETE FROM jobq._job;

-- bad input: a JQ error, nothing changed -------------------------------------------------------
SELECT jobq.enqueue('g', '{}', group_key => 'grp');
SELECT pg_temp.add('f', 'a', 1);
CREATE TEMP TABLE before AS SELECT pg_temp.snapshot() AS s;
SELECT throws_ok($$SELECT jobq.enqueue('f', '{}', fair_key => '')$$, 'JQ009', NULL, 'an empty fair_key');
SELECT throws_ok($$SELECT jobq.enqueue('f', '{}', fair_key => repeat('x', 513))$$, 'JQ009', NULL, 'a fair_key over 512 characters');
SELECT throws_ok($$SELECT jobq.enqueue('f', '{}', group_key => 'grp')$$, 'JQ009',
                 'jobq: group_key cannot be used on a fair queue', 'a group_key on a fair queue');
SELECT throws_ok($$SELECT jobq.enqueue_many('f', ARRAY['{}']::jsonb[], group_key => 'grp')$$, 'JQ009',
                 'jobq: group_key cannot be used on a fair queue', 'enqueue_many: a group_key on a fair queue');
SELECT throws_ok($$SELECT jobq.enqueue_many('f', ARRAY['{}', '{}']::jsonb[], fair_keys => ARRAY['a'])$$, 'JQ009',
                 'jobq: fair_keys has 1 elements but payloads has 2', 'fair_keys of another length than payloads');
SELECT throws_ok($$SELECT jobq.enqueue_many('f', ARRAY['{}']::jsonb[], fair_keys => ARRAY[['a']])$$, 'JQ009', NULL,
                 'fair_keys of two dimensions');
SELECT throws_ok($$SELECT jobq.enqueue_many('f', ARRAY['{}', '{}']::jsonb[], fair_keys => '[0:1]={a,""}')$$, 'JQ009',
                 'jobq: fair_keys[1] must be 1 to 512 characters, got 0', 'an empty fair key, named by its subscript');
SELECT throws_ok($$SELECT jobq.configure_queue('f', fair_weights => '{"gold": -1}')$$, 'JQ012',
                 'jobq: setting fair_weights gives key ''gold'' the weight -1, not a whole number from 1 to 1000',
                 'a negative weight');
SELECT throws_ok($$SELECT jobq.configure_queue('f', fair_weights => '{"gold": 0}')$$, 'JQ012', NULL, 'a weight of 0');
SELECT throws_ok($$SELECT jobq.configure_queue('f', fair_weights => '{"gold": 1.5}')$$, 'JQ012', NULL, 'a fractional weight');
SELECT throws_ok($$SELECT jobq.configure_queue('f', fair_weights => '{"gold": "3"}')$$, 'JQ012', NULL, 'a weight as a string');
SELECT throws_ok($$SELECT jobq.configure_queue('f', fair_weights => '{"": 2}')$$, 'JQ012',
                 'jobq: setting fair_weights has a key of 0 characters, which no fair key can be',
                 'a weight for a key no fair key can be');
SELECT throws_ok($$SELECT jobq.configure_queue('f', fair_weights => '[3]')$$, 'JQ012',
                 'jobq: setting fair_weights must be a JSON object, got a JSON array', 'weights that are no object');
SELECT throws_ok($$SELECT jobq.configure_queue('f', per_key_concurrency => -1)$$, 'JQ012',
                 'jobq: setting per_key_concurrency is out of range', 'a negative per_key_concurrency');
SELECT throws_ok($$SELECT jobq.configure_queue('plain', fair_weights => '{"a": 2}')$$, 'JQ012',
                 'jobq: setting fair_weights applies to fair queues only, and queue ''plain'' is not one',
                 'weights on a queue that is not fair');
SELECT throws_ok($$SELECT jobq.configure_queue('plain', per_key_concurrency => 2)$$, 'JQ012', NULL,
                 'per_key_concurrency on a queue that is not fair');
SELECT throws_ok($$SELECT jobq.configure_queue('g', fair => true)$$, 'JQ012',
                 'jobq: setting fair cannot be turned on while queue ''g'' has jobs of serial groups',
                 'fair on a queue with serial-group jobs');
SELECT is(pg_temp.snapshot(), (SELECT s FROM before), 'none of these changed a job or a setting');

-- a fair queue with a rate limit: claimed through jobq._pick, which counts and records its starts
SELECT jobq.configure_queue('fr', fair => true, rate_limit => 2, rate_interval => interval '1 hour');
SELECT jobq.enqueue('fr', '{}', fair_key => k) FROM unnest(ARRAY['a', 'b', 'c']) AS k;
SELECT is((SELECT count(*)::int FROM jobq.claim('fr', 3)), 2, 'a rate-limited fair queue starts rate_limit jobs');
SELECT is((SELECT sum(n)::int FROM jobq._rate_start WHERE queue = 'fr'), 2, 'and records those starts');
SELECT is((SELECT count(DISTINCT fair_key)::int FROM jobq._job WHERE queue = 'fr' AND status = 'running'), 2,
          'one of each of two keys (round-robin)');
SELECT is((SELECT array_agg(DISTINCT started_at) FROM jobq._job WHERE queue = 'fr' AND status = 'running'),
          (SELECT array_agg(started_at) FROM jobq._rate_start WHERE queue = 'fr'),
          'its jobs start at the time their starts are recorded');
SELECT is((SELECT count(*)::int FROM jobq.claim('fr', 3)), 0, 'the window is full: the next claim starts none');

-- the window of leases in place moves with the head of the claim index: a
-- claim after 1,600 jobs of two keys were claimed and finished still leases
-- in place (the window was read again once the head passed its half-way job)
DELETE FROM jobq._job;
SELECT jobq.configure_queue('wm', fair => true);
SELECT count(*) FROM jobq.enqueue_many('wm', array_fill('{}'::jsonb, ARRAY[3000]),
                                       fair_keys => ARRAY(SELECT CASE WHEN i % 2 = 0 THEN 'a' ELSE 'b' END
                                                          FROM generate_series(1, 3000) AS i));
DO $$
DECLARE
    v_ids bigint[];
BEGIN
    FOR i IN 1..800 LOOP
        v_ids := ARRAY(SELECT c.id FROM jobq.claim('wm', 2) AS c);
        DELETE FROM jobq._job WHERE id = ANY (v_ids);
    END LOOP;
END
$$;
SELECT is((SELECT count(*)::int FROM jobq._job WHERE queue = 'wm'), 1400, '1,600 jobs claimed two at a time and gone');
SELECT is(pg_temp.claim_keys('wm', 2), 'a,b', 'the next claim: one job of each key');
SELECT is((SELECT count(*)::int FROM jobq._leased_in_place(clock_timestamp()) WHERE queue = 'wm'), 2,
          'both leased in place, where jobq._leased_in_place finds them');

SELECT * FROM finish();
ROLLBACK;

-- Job metadata (0.12.0, issue 27): enqueue(…, meta), enqueue_many(…, metas)
-- and enqueue_callback(…, meta) keep a JSON object beside the payload, capped
-- like it; claim returns it, jobq.jobs and the archive keep it, retry brings it
-- back, cancel_jobs filters by it. Bad input: not an object, over the cap, a
-- NULL inside metas, metas of the wrong length: a JQ error naming the
-- argument, nothing changed.
BEGIN;
SELECT plan(31);

-- the catalog
SELECT has_column('jobq', '_job', 'meta', 'jobq._job has a meta column');
SELECT has_column('jobq', '_job_archive', 'meta', 'jobq._job_archive keeps meta');
SELECT has_column('jobq', 'jobs', 'meta', 'jobq.jobs shows meta');
SELECT ok(EXISTS (SELECT FROM pg_catalog.pg_attribute AS a
                  WHERE a.attrelid = 'jobq.job'::regclass AND a.attname = 'meta' AND NOT a.attisdropped),
          'the claim row (jobq.job) has meta');

-- stored, returned by claim, shown
SELECT jobq.enqueue('m', '{"n": 1}', max_attempts => 1, meta => '{"tenant": "acme", "traceparent": "00-x"}') AS plain \gset
SELECT jobq.enqueue('m', '{"n": 2}', job_key => 'k2', meta => '{"tenant": "beta"}') AS keyed \gset
SELECT jobq.enqueue('m', '{"n": 3}') AS bare \gset
SELECT is((SELECT meta FROM jobq.jobs WHERE id = :plain), '{"tenant": "acme", "traceparent": "00-x"}'::jsonb,
          'enqueue''s one-statement path stores meta');
SELECT is((SELECT meta FROM jobq.jobs WHERE id = :keyed), '{"tenant": "beta"}'::jsonb,
          'the general path (a job_key) stores meta');
SELECT is((SELECT meta FROM jobq.jobs WHERE id = :bare), NULL::jsonb, 'no meta is NULL');
SELECT is((SELECT payload FROM jobq.jobs WHERE id = :plain), '{"n": 1}'::jsonb, 'the payload stays as given');
CREATE TEMP TABLE ids AS
    SELECT array_agg(i ORDER BY i) AS ids
    FROM jobq.enqueue_many('mm', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[],
                           metas => ARRAY['{"i": 1}', '{}']::jsonb[]) AS i;
SELECT is(ARRAY(SELECT meta FROM jobq.jobs WHERE id = ANY ((SELECT ids FROM ids)::bigint[]) ORDER BY id),
          ARRAY['{"i": 1}', '{}']::jsonb[], 'enqueue_many gives each job its own meta, in payload order');
CREATE TEMP TABLE keyed_ids AS
    SELECT i FROM jobq.enqueue_many('mk', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[], job_keys => ARRAY['a', NULL],
                                    metas => ARRAY['{"i": 3}', '{"i": 4}']::jsonb[]) AS i;
SELECT is(ARRAY(SELECT meta FROM jobq.jobs WHERE id IN (SELECT i FROM keyed_ids) ORDER BY id),
          ARRAY['{"i": 3}', '{"i": 4}']::jsonb[], 'with job_keys too');
CREATE TEMP TABLE bare_ids AS SELECT i FROM jobq.enqueue_many('mn', ARRAY['{"n": 1}']::jsonb[]) AS i;
SELECT is(ARRAY(SELECT meta FROM jobq.jobs WHERE id IN (SELECT i FROM bare_ids)),
          ARRAY[NULL]::jsonb[], 'metas NULL: jobs without meta');
SELECT jobq.enqueue_callback('cb', '{}', ARRAY[:bare]::bigint[], meta => '{"cb": true}') AS cb \gset
SELECT is((SELECT meta FROM jobq.jobs WHERE id = :cb), '{"cb": true}'::jsonb, 'enqueue_callback stores meta');
CREATE TEMP TABLE c1 AS SELECT * FROM jobq.claim('m', 10, 'w1');
SELECT is((SELECT meta FROM c1 WHERE id = :plain), '{"tenant": "acme", "traceparent": "00-x"}'::jsonb,
          'claim returns meta');
SELECT is((SELECT meta FROM c1 WHERE id = :bare), NULL::jsonb, 'claim returns NULL for a job without meta');
CREATE TEMP TABLE h1 AS SELECT * FROM jobq.take('mm', 1);
SELECT is((SELECT meta FROM h1), '{"i": 1}'::jsonb, 'take returns meta too');

-- kept in the archive, back on retry
SELECT jobq.fail(:plain, 'boom', (SELECT lease_token FROM c1 WHERE id = :plain));
SELECT is((SELECT meta FROM jobq._job_archive WHERE id = :plain), '{"tenant": "acme", "traceparent": "00-x"}'::jsonb,
          'a job that leaves the live table keeps its meta in the archive');
SELECT is((SELECT meta FROM jobq.jobs WHERE id = :plain AND status = 'dead'),
          '{"tenant": "acme", "traceparent": "00-x"}'::jsonb, 'jobq.jobs shows a finished job''s meta');
SELECT ok(jobq.retry(:plain), 'the dead job is retried');
SELECT is((SELECT meta FROM jobq._job WHERE id = :plain), '{"tenant": "acme", "traceparent": "00-x"}'::jsonb,
          'retry brings its meta back');

-- cancel_jobs by meta
SELECT jobq.enqueue('mc', '{}', meta => '{"tenant": "x", "tag": 1}') AS x \gset
SELECT jobq.enqueue('mc', '{}', meta => '{"tenant": "y"}') AS y \gset
SELECT jobq.enqueue('mc', '{}') AS z \gset
SELECT is(jobq.cancel_jobs('mc', meta_contains => '{"tenant": "x"}'), 1, 'cancel_jobs with meta_contains cancels the jobs whose meta contains it');
SELECT is(ARRAY(SELECT id FROM jobq._job WHERE queue = 'mc' ORDER BY id), ARRAY[:y, :z]::bigint[],
          'and leaves the others (other meta, none)');
SELECT throws_ok($$SELECT jobq.cancel_jobs('mc', meta_contains => '[1]')$$, 'JQ017',
                 'jobq: meta_contains must be a JSON object, got array', 'meta_contains not an object: JQ017');

-- bad input: an error naming the argument, nothing added
CREATE TEMP TABLE before_bad AS SELECT count(*) AS n FROM jobq._job;
SELECT throws_ok($$SELECT jobq.enqueue('m', '{}', meta => '[1]')$$, 'JQ002',
                 'jobq: meta must be a JSON object, got array', 'meta not an object: JQ002');
SELECT throws_ok($$SELECT jobq.enqueue('m', '{}', job_key => 'bad', meta => '"s"')$$, 'JQ002',
                 'jobq: meta must be a JSON object, got string', 'the same on the general path');
SELECT jobq.configure_queue('small', max_payload_bytes => 64);
SELECT throws_ok($$SELECT jobq.enqueue('small', '{}', meta => jsonb_build_object('x', repeat('y', 100)))$$, 'JQ003',
                 NULL, 'meta over the queue''s max_payload_bytes: JQ003');
SELECT throws_ok($$SELECT jobq.enqueue_many('m', ARRAY['{}', '{}']::jsonb[], metas => ARRAY['{}', NULL]::jsonb[])$$,
                 'JQ002', 'jobq: metas[2] must be a JSON object, got NULL', 'a NULL inside metas: JQ002 naming metas[2]');
SELECT throws_ok($$SELECT jobq.enqueue_many('m', ARRAY['{}', '{}']::jsonb[], metas => ARRAY['{}', '3']::jsonb[])$$,
                 'JQ002', 'jobq: metas[2] must be a JSON object, got number', 'a number inside metas: JQ002');
SELECT throws_ok($$SELECT jobq.enqueue_many('m', ARRAY['{}', '{}']::jsonb[], metas => ARRAY['{}']::jsonb[])$$,
                 'JQ002', 'jobq: metas has 1 elements but payloads has 2', 'metas of another length: JQ002');
SELECT throws_ok($$SELECT jobq.enqueue_many('small', ARRAY['{}']::jsonb[],
                                            metas => ARRAY[jsonb_build_object('x', repeat('y', 100))])$$,
                 'JQ003', NULL, 'an element of metas over the cap: JQ003');
SELECT throws_ok($$SELECT jobq.enqueue_callback('m', '{}', ARRAY[1]::bigint[], meta => '[]')$$, 'JQ002',
                 'jobq: meta must be a JSON object, got array', 'enqueue_callback: meta not an object, JQ002');
SELECT is((SELECT count(*) FROM jobq._job), (SELECT n FROM before_bad), 'no bad call added a job');

SELECT * FROM finish();
ROLLBACK;

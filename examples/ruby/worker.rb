# A jobq worker in Ruby with ruby-pg: LISTEN for wake-ups, claim jobs in batches, run a handler per
# job, then complete or fail each job with its lease token.
#   DATABASE_URL=postgresql://user@host/db ruby worker.rb [queue ...]     (default queue: "default")
# ruby-pg sends parameters untyped, as text: PostgreSQL types them from jobq's signatures, and an array
# goes as its literal ('{a,b}', PG::TextEncoder::Array).
require 'pg'
require 'json'
require 'time'

QUEUES = ARGV.empty? ? ['default'] : ARGV
BATCH = Integer(ENV.fetch('JOBQ_BATCH', '10')) # jobs per claim
POLL = Float(ENV.fetch('JOBQ_POLL_SECONDS', '5')) # seconds: the safety net when no NOTIFY comes
NAME = "ruby-#{Process.pid}"
$stdout.sync = true

def log(message) = puts("#{Time.now.utc.iso8601(3)} #{NAME} #{message}")

# The work: replace with yours; raise to fail the job (jobq retries it after a backoff). This one obeys
# its payload: {"steps": 3} works in 3 steps and heart-beats after each one (a long job keeps its lease),
# {"fail_once": true} fails its first attempt.
def handle(job, payload, beat)
  payload.fetch('steps', 0).times do
    sleep 0.2
    beat.call
  end
  raise 'failing the first attempt, as asked' if payload['fail_once'] && job['attempts'] == '1'
end

db = PG.connect(ENV.fetch('DATABASE_URL'), application_name: NAME)
queues = PG::TextEncoder::Array.new.encode(QUEUES) # '{a,b}': claim reads it as a list of queues
stopping = false # SIGTERM/SIGINT: finish the job in hand, hand back the rest, exit
%w[TERM INT].each { |signal| trap(signal) { stopping = true } }
lost = ->(job, what) { log("lease lost on job #{job['id']} (#{what} returned false); moving on") }
ok = ->(sql, params) { db.exec_params(sql, params).getvalue(0, 0) == 't' }

run = lambda do |job|
  beat = lambda do # extends the lease; false when it was lost
    if ok.call('SELECT jobq.heartbeat($1, $2)', [job['id'], job['lease_token']])
      log("heartbeat on job #{job['id']}")
    else
      lost.call(job, 'heartbeat')
    end
  end
  begin
    handle(job, JSON.parse(job['payload']), beat)
  rescue StandardError => e # jobq keeps the text as the job's last_error and retries after a backoff
    if ok.call('SELECT jobq.fail($1, $2, $3)', [job['id'], e.full_message(highlight: false), job['lease_token']])
      log("failed job #{job['id']} (attempt #{job['attempts']}): #{e.message}")
    else
      lost.call(job, 'fail')
    end
    return
  end
  if ok.call('SELECT jobq.complete($1, $2)', [job['id'], job['lease_token']])
    log("completed job #{job['id']}")
  else
    lost.call(job, 'complete')
  end
end

db.exec('LISTEN jobq')
log("listening on channel jobq for queues #{QUEUES.join(', ')}")
idle = false
until stopping
  jobs = db.exec_params('SELECT * FROM jobq.claim($1, $2, $3)', [queues, BATCH, NAME]).to_a
  jobs.each_with_index do |job, i|
    if stopping # never started: give them back without spending an attempt
      jobs[i..].each { |rest| db.exec_params('SELECT jobq.release($1, $2)', [rest['id'], rest['lease_token']]) }
      log("released #{jobs.size - i} unstarted jobs")
      break
    end
    run.call(job)
  end
  if jobs.any?
    idle = false
    next
  end
  # Nothing ready: sleep until a NOTIFY, the next scheduled job (a retry in backoff), or the poll.
  due = db.exec_params('SELECT extract(epoch FROM jobq.next_run_at($1) - now())', [queues]).getvalue(0, 0)
  log("idle: waiting for NOTIFY, polling every #{POLL} s") unless idle
  idle = true
  woken = false
  timeout = due.nil? ? POLL : [[Float(due), 0].max, POLL].min
  # jobq's NOTIFY payload is the queue's name; one for another queue is not ours
  db.wait_for_notify(timeout) { |_channel, _pid, queue| woken ||= QUEUES.include?(queue) }
  while db.notifies do end # drained: the claim above looks at everything they announced
  db.exec('SELECT jobq.reap()') unless woken || stopping # expired leases back to the queue (as pg_cron)
end
db.close
log('stopped')

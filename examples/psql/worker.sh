#!/usr/bin/env bash
# A jobq worker that is a shell loop around psql: claim a few jobs, run a command per job, then
# complete or fail each job with its lease token.
#
#   DATABASE_URL=postgresql://user@host/db worker.sh [--until-empty] QUEUE COMMAND [ARG...]
#
# COMMAND runs once per job with the job's payload (JSON) on stdin and JOBQ_JOB_ID, JOBQ_QUEUE and
# JOBQ_ATTEMPT in its environment. Exit status 0 completes the job; anything else fails it with the
# command's stderr as the error, and jobq retries it with backoff (or dead-letters it when out of
# attempts). SIGTERM or SIGINT: finish the job in hand, hand the unstarted ones back, exit 0.
# --until-empty: exit 0 once the queue has no job ready or scheduled (running ones are others' to finish).
#
# Settings (environment): JOBQ_BATCH (jobs per claim, 5), JOBQ_POLL_SECONDS (sleep when idle, 2),
# JOBQ_LEASE (e.g. '10 minutes'; default: the queue's lease).
#
# It polls: a psql process cannot wait for a NOTIFY (it prints notifications only after a command
# it runs), so LISTEN from a shell loop is impractical. A worker that must react at once uses a
# driver that LISTENs (see ../node).
set -euo pipefail

until_empty=false
if [[ ${1-} == --until-empty ]]; then until_empty=true; shift; fi
if [[ $# -lt 2 || -z ${DATABASE_URL-} ]]; then
    echo "usage: DATABASE_URL=postgresql://... $0 [--until-empty] QUEUE COMMAND [ARG...]" >&2
    exit 2
fi
queue=$1
shift
batch=${JOBQ_BATCH:-5}
poll=${JOBQ_POLL_SECONDS:-2}
lease=${JOBQ_LEASE:-}
worker="psql-$HOSTNAME-$$"

log() { printf '%s %s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)" "$worker" "$*"; }

# One SQL statement through psql; values are passed as psql variables (-v name=value) and quoted by
# psql itself (:'name'), never pasted into the SQL text.
sql() {
    local statement=$1
    shift
    psql "$DATABASE_URL" -X -q -A -t -F $'\t' -v ON_ERROR_STOP=1 "$@" <<<"$statement"
}

stopping=false
trap 'stopping=true; log "stopping after the job in hand"' TERM INT

# Hand the claimed jobs from index $1 on back to the queue, untouched (no attempt spent).
release_from() {
    local k
    for ((k = $1; k < ${#ids[@]}; k++)); do
        sql "SELECT jobq.release(:'id', :'token')" -v id="${ids[k]}" -v token="${tokens[k]}" >/dev/null
    done
    log "released $((${#ids[@]} - $1)) unstarted jobs"
}

log "working on queue $queue"
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
while ! $stopping; do
    claimed=$(sql "SELECT id, lease_token, attempts, payload
                   FROM jobq.claim(:'queue', :'batch', :'worker', nullif(:'lease', '')::interval)" \
                  -v queue="$queue" -v batch="$batch" -v worker="$worker" -v lease="$lease")
    ids=() tokens=() attempts=() payloads=()
    if [[ -n $claimed ]]; then # one line per job; jsonb text never holds a tab or a newline
        while IFS=$'\t' read -r id token attempt payload; do
            ids+=("$id") tokens+=("$token") attempts+=("$attempt") payloads+=("$payload")
        done <<<"$claimed"
    fi

    for ((i = 0; i < ${#ids[@]}; i++)); do
        if $stopping; then release_from "$i"; break; fi
        id=${ids[i]} token=${tokens[i]}
        if JOBQ_JOB_ID=$id JOBQ_QUEUE=$queue JOBQ_ATTEMPT=${attempts[i]} "$@" \
               <<<"${payloads[i]}" 2>"$errors"; then
            outcome="completed job $id"
            ok=$(sql "SELECT jobq.complete(:'id', :'token')" -v id="$id" -v token="$token")
        else
            status=$?
            error=$(tail -c 4000 "$errors") # jobq keeps it as the job's last_error
            # The log line ends with the reason: the last line the command wrote to stderr.
            reason=$(grep -v '^[[:space:]]*$' "$errors" | tail -n 1 | cut -c 1-300 || true)
            outcome="failed job $id (attempt ${attempts[i]}): ${reason:-exit status $status}"
            ok=$(sql "SELECT jobq.fail(:'id', :'error', :'token')" -v id="$id" -v token="$token" \
                     -v error="${error:-exit status $status}")
        fi
        # false: the lease expired and jobq took the job back; our outcome changed nothing.
        if [[ $ok == t ]]; then log "$outcome"; else log "lease lost on job $id; moving on"; fi
    done

    if [[ ${#ids[@]} -eq 0 ]] && ! $stopping; then
        if $until_empty; then
            # Nothing ready now (the claim got none) and nothing scheduled for later (no backoff pending).
            empty=$(sql "SELECT jobq.next_run_at(ARRAY[:'queue']) IS NULL" -v queue="$queue")
            if [[ $empty == t ]]; then log "queue $queue is empty"; break; fi
        fi
        sql "SELECT jobq.reap()" >/dev/null # expired leases back to the queue (as pg_cron does)
        sleep "$poll" &
        wait $! || kill $! 2>/dev/null || true # a signal ends the wait at once (the trap runs)
    fi
done
log "stopped"

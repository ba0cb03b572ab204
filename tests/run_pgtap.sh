#!/usr/bin/env bash
# Runs the pgTAP suite (pgtap/*.sql) with pg_prove once per install path:
#   psql               — the install script applied with psql -f (managed Postgres)
#   extension          — CREATE EXTENSION jobq (needs `make install` first)
#   extension-upgrade  — CREATE EXTENSION jobq at the oldest version, then
#                        ALTER EXTENSION jobq UPDATE through every upgrade script
# Each path gets its own throwaway server with pg_cron loaded, stopped on exit.
# The three paths run at the same time, each one's report printed whole, in
# the order above, once it is done (PGTAP_PARALLEL=0: one after the other, as they go).
# Usage: tests/run_pgtap.sh [PYTHON]   (run as an ordinary user, not root)
set -euo pipefail

py=${1:-.venv/bin/python}
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$root/sql/jobq.control")
oldest=$(ls "$root"/sql/jobq--*.sql | sed -n 's/.*jobq--\([0-9.]*\)\.sql$/\1/p' | sort -V | head -n 1)
work=$(mktemp -d /tmp/jobq-pgtap.XXXXXX)
modes=(psql extension extension-upgrade)

cleanup() {
    for mode in "${modes[@]}"; do
        if [ -d "$work/$mode" ]; then "$py" -m pyqueue.localserver stop "$work/$mode" || true; fi
    done
    rm -rf "$work"
}
trap cleanup EXIT

# One install path on its own server (its socket lives in its own directory,
# so the ports never meet); exits non-zero when the install or a test fails.
run_mode() {
    local mode=$1 port=$2 dir="$work/$1" dsn installed
    dsn=$(cd "$root" && "$py" -m pyqueue.localserver start "$dir" --port "$port" --database jobq_test)
    run_psql() { psql "$dsn" -X -q -v ON_ERROR_STOP=1 "$@"; }
    run_psql -c 'CREATE EXTENSION pgtap'
    case $mode in
        psql)      run_psql -f "$root/sql/jobq--$version.sql" ;;
        extension) run_psql -c 'CREATE EXTENSION jobq' ;;
        extension-upgrade)
            run_psql -c "CREATE EXTENSION jobq VERSION '$oldest'" -c 'ALTER EXTENSION jobq UPDATE' ;;
    esac
    installed=$(psql "$dsn" -X -tA -c 'SELECT jobq.version()')
    if [ "$installed" != "$version" ]; then
        echo "jobq.version() is '$installed' after the $mode install, expected '$version'" >&2
        return 1
    fi
    echo "# pgTAP, jobq $version installed by $mode"
    pg_prove -h "$dir" -p "$port" -U postgres -d jobq_test -r --ext .sql "$root/pgtap/"
}

status=0
port=55500
if [ "${PGTAP_PARALLEL:-1}" = 0 ]; then
    for mode in "${modes[@]}"; do
        port=$((port + 1))
        run_mode "$mode" "$port" &  # in the background, so that set -e holds inside it
        wait $! || { status=1; echo "# pgTAP FAILED on the $mode install path"; }
    done
    exit $status
fi
declare -A pids=()
for mode in "${modes[@]}"; do
    port=$((port + 1))
    run_mode "$mode" "$port" >"$work/$mode.log" 2>&1 &
    pids[$mode]=$!
done
for mode in "${modes[@]}"; do
    if ! wait "${pids[$mode]}"; then
        status=1
        echo "# pgTAP FAILED on the $mode install path" >>"$work/$mode.log"
    fi
    cat "$work/$mode.log"
done
exit $status

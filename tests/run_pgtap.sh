#!/usr/bin/env bash
# Runs the pgTAP suite (pgtap/*.sql) with pg_prove once per install path:
#   psql               — the install script applied with psql -f (managed Postgres)
#   extension          — CREATE EXTENSION jobq (needs `make install` first)
#   extension-upgrade  — CREATE EXTENSION jobq at the oldest version, then
#                        ALTER EXTENSION jobq UPDATE through every upgrade script
# Each path gets its own throwaway server with pg_cron loaded, stopped on exit.
# Usage: tests/run_pgtap.sh [PYTHON]   (run as an ordinary user, not root)
set -euo pipefail

py=${1:-.venv/bin/python}
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$root/sql/jobq.control")
oldest=$(ls "$root"/sql/jobq--*.sql | sed -n 's/.*jobq--\([0-9.]*\)\.sql$/\1/p' | sort -V | head -n 1)
work=$(mktemp -d /tmp/jobq-pgtap.XXXXXX)
servers=()

cleanup() {
    for dir in "${servers[@]}"; do "$py" -m pyqueue.localserver stop "$dir" || true; done
    rm -rf "$work"
}
trap cleanup EXIT

port=55500
for mode in psql extension extension-upgrade; do
    dir="$work/$mode"
    port=$((port + 1))
    servers+=("$dir")
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
        exit 1
    fi
    echo "# pgTAP, jobq $version installed by $mode"
    pg_prove -h "$dir" -p "$port" -U postgres -d jobq_test -r --ext .sql "$root/pgtap/"
done

#!/usr/bin/env bash
# Runs the pgTAP suite (pgtap/*.sql) with pg_prove once per install path:
#   psql       — the install script applied with psql -f (managed Postgres)
#   extension  — CREATE EXTENSION jobq (needs `make install` first)
# Each path gets its own throwaway server with pg_cron loaded, stopped on exit.
# Usage: tests/run_pgtap.sh [PYTHON]   (run as an ordinary user, not root)
set -euo pipefail

py=${1:-.venv/bin/python}
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$root/sql/jobq.control")
work=$(mktemp -d /tmp/jobq-pgtap.XXXXXX)
servers=()

cleanup() {
    for dir in "${servers[@]}"; do "$py" -m pyqueue.localserver stop "$dir" || true; done
    rm -rf "$work"
}
trap cleanup EXIT

port=55500
for mode in psql extension; do
    dir="$work/$mode"
    port=$((port + 1))
    servers+=("$dir")
    dsn=$(cd "$root" && "$py" -m pyqueue.localserver start "$dir" --port "$port" --database jobq_test)
    run_psql() { psql "$dsn" -X -q -v ON_ERROR_STOP=1 "$@"; }
    run_psql -c 'CREATE EXTENSION pgtap'
    case $mode in
        psql)      run_psql -f "$root/sql/jobq--$version.sql" ;;
        extension) run_psql -c 'CREATE EXTENSION jobq' ;;
    esac
    installed=$(psql "$dsn" -X -tA -c 'SELECT jobq.version()')
    if [ "$installed" != "$version" ]; then
        echo "jobq.version() is '$installed' after the $mode install, expected '$version'" >&2
        exit 1
    fi
    echo "# pgTAP, jobq $version installed by $mode"
    pg_prove -h "$dir" -p "$port" -U postgres -d jobq_test -r --ext .sql "$root/pgtap/"
done

#!/usr/bin/env bash
# The linters of `make lint` (and of `make test`, which runs them beside the
# tests): ruff, mypy strict, and pgspot over every SQL script — each full
# install script alone, each upgrade step after its base script; pgspot must
# exit 0 and report nothing. Exits non-zero at the first failure.
# Usage: tools/lint.sh [VENV]   (from the repository's root; VENV defaults to .venv)
set -euo pipefail

venv=${1:-.venv}
"$venv/bin/ruff" check pyqueue tests tools
"$venv/bin/mypy"
# the tests' Django project, from its own directory (its apps are top-level modules there)
(venv_bin=$(cd "$venv/bin" && pwd); cd tests/django_project && "$venv_bin/mypy" --config-file ../../pyproject.toml --explicit-package-bases .)
for f in sql/jobq--*.sql; do
    case $f in
        *--*--*) args=("-a" "$(echo "$f" | sed 's/--[0-9.]*\.sql$/.sql/')" "$f") ;;
        *) args=("$f") ;;
    esac
    out=$("$venv/bin/pgspot" --summary-only "${args[@]}") || { echo "pgspot ${args[*]} failed: $out" >&2; exit 1; }
    echo "$out" | tail -n 1 | grep -q 'Errors: 0 Warnings: 0 Unknown: 0' \
        || { echo "pgspot ${args[*]}: $out" >&2; exit 1; }
    echo "pgspot ${args[*]}: clean"
done

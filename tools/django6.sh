#!/usr/bin/env bash
# Django 6 (django.tasks) for pyqueue.django: tests/django_scenario.py on
# Django 6 and a Python >= 3.12 (the suite's own Python 3.11 runs it on
# Django 5.2 with the django-tasks backport, tests/test_django.py).
#
# The Python comes from PATH (python3.13, python3.12) or pyenv's versions;
# on these machines they are root's (pyenv under /root, mode 700), so make
# test runs this as root and the scenario starts its PostgreSQL server
# through runuser (pyqueue.localserver). The venv, .tmp/django6-venv, gets
# Django 6 and psycopg from PyPI once, and this checkout through a .pth
# file. Without such a Python: a failure under CI (CI=true), else a notice.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv}
dir=$PWD/.tmp/django6-venv

python=""
for candidate in python3.13 python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
    if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then
        python=$candidate
        break
    fi
done
if [ -z "$python" ]; then
    echo "django6: no Python >= 3.12 here (PATH, pyenv): Django 6 NOT tested" >&2
    [ "${CI:-}" = true ] && exit 1
    exit 0
fi

if ! "$dir/bin/python" -c 'import django, psycopg, psycopg_pool, sys; sys.exit(django.VERSION < (6,))' 2>/dev/null; then
    rm -rf "$dir"
    "$python" -m venv "$dir"
    "$dir/bin/pip" install -q --disable-pip-version-check 'django>=6,<7' 'psycopg[binary]>=3.1' 'psycopg-pool>=3.2'
fi
site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PWD" > "$site/jobq-checkout.pth"
PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m tests.django_scenario --python "$dir/bin/python"

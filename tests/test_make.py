"""The Makefile's promises to the machine it runs on (issue 12, defect 9):
`make deps` says which Debian packages it will install before doing it,
installs only the missing ones, never upgrades an installed PostgreSQL
package (other upgrades the new ones need are said and allowed: a fresh
machine's image lags its mirror), and asks for PostgreSQL's own packages at
the installed server's version; `make
install` says where it copies the extension before it does.

.ci/apt-deps runs here against stand-ins for dpkg-query, apt-get and id on
PATH (a log of the calls), never the real apt.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APT_DEPS = ROOT / ".ci" / "apt-deps"
PACKAGES = ["postgresql-15", "postgresql-server-dev-15", "postgresql-15-cron", "pgbouncer"]

DPKG_QUERY = """#!/bin/sh
# dpkg-query -W -f=FORMAT PACKAGE: "install ok installed VERSION" when FAKE_INSTALLED has PACKAGE=VERSION
for pkg in "$@"; do :; done
for entry in $FAKE_INSTALLED; do
    if [ "${entry%%=*}" = "$pkg" ]; then printf 'install ok installed %s' "${entry#*=}"; exit 0; fi
done
exit 1
"""
APT_GET = """#!/bin/sh
echo "apt-get $*" >> "$FAKE_LOG"
case " $* " in *" -s "*) printf '%b' "$FAKE_PLAN" ;; esac
exit 0
"""
ID = """#!/bin/sh
echo "${FAKE_UID:-0}"
"""


def run_apt_deps(tmp_path: Path, installed: dict[str, str], plan: str = "", uid: int = 0,
                 packages: list[str] = PACKAGES) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    for name, text in {"dpkg-query": DPKG_QUERY, "apt-get": APT_GET, "id": ID}.items():
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    log = tmp_path / "apt.log"
    log.write_text("")
    env = {
        "PATH": f"{stubs}:/usr/bin:/bin",
        "FAKE_INSTALLED": " ".join(f"{p}={v}" for p, v in installed.items()),
        "FAKE_PLAN": plan,
        "FAKE_UID": str(uid),
        "FAKE_LOG": str(log),
    }
    done = subprocess.run(["bash", str(APT_DEPS), *packages], env=env, capture_output=True, text=True,
                          check=False)
    return done, log.read_text().splitlines()


def test_make_deps_runs_apt_deps_with_the_package_list() -> None:
    done = subprocess.run(["make", "-n", "-C", str(ROOT), "deps"], capture_output=True, text=True,
                          check=True, env={**os.environ, "MAKEFLAGS": ""})
    lines = [line for line in done.stdout.splitlines() if "apt-deps" in line]
    assert lines, done.stdout
    assert "postgresql-15" in lines[0].split() and "postgresql-server-dev-15" in lines[0].split()
    assert "apt-get" not in done.stdout, "apt-get belongs in .ci/apt-deps, behind its checks"


def test_nothing_missing_means_no_apt_at_all(tmp_path: Path) -> None:
    done, calls = run_apt_deps(tmp_path, dict.fromkeys(PACKAGES, "1.0"))
    assert done.returncode == 0, done.stderr
    assert calls == []


def test_only_the_missing_packages_are_installed_with_no_upgrade_at_the_servers_version(
        tmp_path: Path) -> None:
    installed = {"postgresql-15": "15.18-0+deb12u1", "libpq5": "15.18-0+deb12u1", "pgbouncer": "1.18"}
    plan = ("Inst libpq-dev (15.18-0+deb12u1 Debian:12 [amd64])\\n"
            "Inst postgresql-server-dev-15 (15.18-0+deb12u1 Debian:12 [amd64])\\n"
            "Inst postgresql-15-cron (1.4.2-2 Debian:12 [amd64])\\n")
    done, calls = run_apt_deps(tmp_path, installed, plan)
    assert done.returncode == 0, done.stderr
    installs = [c for c in calls if " install " in f" {c} " and " -s " not in f" {c} "]
    assert len(installs) == 1, calls
    words = installs[0].split()
    assert "--no-upgrade" in words
    assert "postgresql-server-dev-15=15.18-0+deb12u1" in words, "pinned to the installed server"
    assert "libpq-dev=15.18-0+deb12u1" in words
    assert "postgresql-15-cron" in words
    assert "postgresql-15" not in words and "pgbouncer" not in words, "installed ones are not asked for"
    # said before it is done: the announcement names the missing packages
    first = done.stdout.splitlines()[0]
    assert "postgresql-server-dev-15" in first and "postgresql-15-cron" in first and "--no-upgrade" in first
    assert "will install libpq-dev" in done.stdout


def test_a_plan_that_upgrades_an_installed_package_is_refused(tmp_path: Path) -> None:
    installed = {"postgresql-15": "15.18-0+deb12u1", "pgbouncer": "1.18"}
    plan = ("Inst libpq5 [15.18-0+deb12u1] (15.20-0+deb12u1 Debian-Security:12 [amd64])\\n"
            "Inst postgresql-15-cron (1.4.2-2 Debian:12 [amd64])\\n")
    done, calls = run_apt_deps(tmp_path, installed, plan)
    assert done.returncode == 1
    assert "libpq5" in done.stderr and "refusing" in done.stderr
    assert all(" -s " in f" {c} " or c.startswith("apt-get update") for c in calls), calls


def test_a_plan_that_upgrades_only_other_packages_is_said_and_allowed(tmp_path: Path) -> None:
    # What a fresh CI machine met (2026-11-26): chromium and pgtap pulled in
    # point releases of perl and systemd's libraries, nothing of PostgreSQL's.
    installed = {"postgresql-15": "15.18-0+deb12u1", "libpq5": "15.18-0+deb12u1", "pgbouncer": "1.18"}
    plan = ("Inst perl-base [5.36.0-7+deb12u2] (5.36.0-7+deb12u4 Debian-Security:12 [amd64])\\n"
            "Inst libsystemd0 [252.38-1~deb12u1] (252.39-1~deb12u2 Debian:12.15 [amd64])\\n"
            "Inst postgresql-15-cron (1.4.2-2 Debian:12 [amd64])\\n")
    done, calls = run_apt_deps(tmp_path, installed, plan)
    assert done.returncode == 0, done.stderr
    assert "perl-base" in done.stdout and "libsystemd0" in done.stdout, "the upgrades are said"
    installs = [c for c in calls if " install " in f" {c} " and " -s " not in f" {c} "]
    assert len(installs) == 1 and "--no-upgrade" in installs[0].split(), calls


def test_without_root_it_names_the_missing_packages_and_installs_nothing(tmp_path: Path) -> None:
    done, calls = run_apt_deps(tmp_path, {"postgresql-15": "15.18"}, uid=1000)
    assert done.returncode == 1
    assert "postgresql-server-dev-15" in done.stderr and "postgresql-15-cron" in done.stderr
    assert calls == []


@pytest.mark.parametrize("target", ["install", "test"])
def test_make_says_where_it_copies_the_extension_before_copying(target: str) -> None:
    done = subprocess.run(["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True,
                          check=True, env={**os.environ, "MAKEFLAGS": ""})
    lines = done.stdout.splitlines()
    sharedir = subprocess.run(["pg_config", "--sharedir"], capture_output=True, text=True,
                              check=True).stdout.strip()
    said = next(i for i, line in enumerate(lines) if "make install: copying" in line)
    assert f"{sharedir}/extension" in lines[said]
    copies = [i for i, line in enumerate(lines) if "install" in line and "jobq.control" in line
              and not line.startswith("echo")]
    assert copies and said < min(copies), lines
    created = [i for i, line in enumerate(lines) if "mkdir" in line and "extension" in line]
    assert not created or said < min(created), lines

# jobq — `make demo` runs the main job, `make test` runs every check.
#
# Server binaries refuse to run as root: as root, the server-side steps run
# as the `postgres` user through runuser (see ../shared/ENVIRONMENT.md).

PG_CONFIG ?= pg_config
PYTHON3   ?= /usr/bin/python3
VENV      ?= .venv
PY        := $(VENV)/bin/python
# make db-start's throwaway server lives in DB_DIR (its socket too)
DB_DIR    ?= $(CURDIR)/.tmp/db
APT_PACKAGES := postgresql-15 postgresql-server-dev-15 postgresql-15-cron postgresql-15-pgtap pgtap pgbouncer python3-venv nodejs \
                chromium chromium-driver libpostgresql-jdbc-java ruby-pg

ifeq ($(shell id -u),0)
AS_SERVER_USER := runuser -u postgres --
endif

# --- the extension, installed with PGXS (extension.mk, a makefile of its own:
#     PGXS brings targets, `check` among them, that this one has its own of)
install uninstall:
	@$(MAKE) --no-print-directory -f extension.mk PG_CONFIG=$(PG_CONFIG) $@

.PHONY: install uninstall demo test check test-pgtap test-pytest lint bench chaos deps venv db-start db-stop docs clean-venv \
        screenshots

# --- the SQL scripts, assembled from sql/src/ (sql/src/README.md) -------
# Writes sql/jobq--<default_version>.sql and its upgrade script; refuses to
# change a released script (sql/released.sha256).
.PHONY: sql
sql:
	$(PYTHON3) tools/sql_assemble.py build

# --- the client calls, written from their statement builders ------------
# Rewrites the calls of pyqueue/client.py and pyqueue/_aioclient.py from
# pyqueue/_statements.py (and its siblings); tests/test_layout.py fails when
# they are stale.
.PHONY: client
client:
	$(PYTHON3) -m tools.client_calls

# --- system packages and the Python environment -------------------------
# Only the missing packages, said before they are installed, never upgrading an
# installed one (a running server would fail to load its libraries): .ci/apt-deps
deps:
	@.ci/apt-deps $(APT_PACKAGES)

$(PY): pyproject.toml
	$(PYTHON3) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	@# The distribution was called pyqueue before 0.11.0: an old venv drops it first.
	$(VENV)/bin/pip uninstall -q -y pyqueue 2>/dev/null || true
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $(PY)

venv: $(PY)

# --- the two README commands --------------------------------------------
demo: deps venv
	$(PY) -m pyqueue demo

# pytest in PYTEST_WORKERS processes (pytest-xdist), each with its own
# PostgreSQL server (tests/conftest.py); most tests wait on processes, leases
# and timers, so more workers than cores pays. PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= 4
PYTEST := $(AS_SERVER_USER) env PYTHONDONTWRITEBYTECODE=1 $(PY) -m pytest
XDIST   = $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadgroup)
# The few tests marked `alone` (they time something the parallel tests slow
# down) run after them, in one process; exit status 5 is "none selected".
PYTEST_PARALLEL = $(PYTEST) $(XDIST) -m 'not alone' $(PYTEST_ARGS)
PYTEST_ALONE    = $(PYTEST) -m alone $(PYTEST_ARGS) || test $$? -eq 5

# `make test`: the linters (tools/lint.sh), pgTAP (tests/run_pgtap.sh) and the
# Django 6 scenario (tools/django6.sh, as root: its Python is root's) run
# beside pytest, their reports printed after pytest's; all four must pass.
# (No $(MAKE) here: `make -n test` must only print, and tests/test_make.py runs it.)
test: deps venv install examples-deps
	@lintlog=$$(mktemp /tmp/jobq-lint-log.XXXXXX); pgtaplog=$$(mktemp /tmp/jobq-pgtap-log.XXXXXX); \
	djangolog=$$(mktemp /tmp/jobq-django6-log.XXXXXX); \
	tools/lint.sh $(VENV) >$$lintlog 2>&1 & lint=$$!; \
	$(AS_SERVER_USER) tests/run_pgtap.sh $(PY) >$$pgtaplog 2>&1 & pgtap=$$!; \
	tools/django6.sh $(VENV) >$$djangolog 2>&1 & django6=$$!; \
	$(PYTEST_PARALLEL); pytest_status=$$?; \
	$(PYTEST_ALONE) || pytest_status=1; \
	wait $$django6; django6_status=$$?; cat $$djangolog; rm -f $$djangolog; \
	wait $$lint; lint_status=$$?; cat $$lintlog; rm -f $$lintlog; \
	wait $$pgtap; pgtap_status=$$?; cat $$pgtaplog; rm -f $$pgtaplog; \
	echo "make test: lint exit $$lint_status, pytest exit $$pytest_status, pgTAP exit $$pgtap_status," \
	     "Django 6 exit $$django6_status"; \
	[ $$lint_status -eq 0 ] && [ $$pytest_status -eq 0 ] && [ $$pgtap_status -eq 0 ] && [ $$django6_status -eq 0 ]

test-pgtap:
	$(AS_SERVER_USER) tests/run_pgtap.sh $(PY)

test-pytest:
	$(PYTEST_PARALLEL)
	$(PYTEST_ALONE)

# `make check`, before each commit (under two minutes): the linters, the tests
# that need no database and the quick ones on a server. `make test` runs them all.
CHECK_TESTS := tests/test_doc_links.py tests/test_layout.py tests/test_sql_sources.py tests/test_make.py \
               tests/test_fleet_start.py tests/test_worker_settings.py tests/test_client.py \
               tests/test_sql_sessions.py tests/test_concurrency_limits.py \
               tests/test_enqueue_options.py tests/test_untyped_parameters.py tests/test_take.py \
               tests/test_run_order.py tests/test_failover_core.py \
               $(wildcard tests/test_consumer_core.py)

check: lint
	$(PYTEST) $(XDIST) -q $(CHECK_TESTS) $(PYTEST_ARGS)

# --- the workers in other languages (examples/), run by tests/test_examples.py and
# tests/test_examples_drivers.py. node-postgres and postgres.js from their committed
# package-lock.json. npm: Debian's nodejs lacks it (apt package npm); NodeSource's nodejs
# ships it and conflicts with Debian's npm. The JDBC driver (libpostgresql-jdbc-java) and
# ruby-pg come with make deps; the Java worker is compiled here, once, into examples/java/build.
JDBC_JAR := /usr/share/java/postgresql.jar
.PHONY: examples-deps
test-pytest: examples-deps
examples-deps:
	@command -v npm >/dev/null 2>&1 || .ci/apt-deps npm
	@command -v javac >/dev/null 2>&1 || .ci/apt-deps default-jdk-headless
	cd examples/node && npm ci --no-audit --no-fund
	cd examples/postgresjs && npm ci --no-audit --no-fund
	javac -Xlint:all -Werror -d examples/java/build -cp $(JDBC_JAR) examples/java/Worker.java
	chmod -R a+rX examples/node/node_modules examples/postgresjs/node_modules examples/java/build

lint: venv
	tools/lint.sh $(VENV)

# --- the long reliability tier: the fault tests with CHAOS_SCALE times the jobs,
#     kills, restarts and race rounds; every test's figures go to CHAOS_REPORT
CHAOS_SCALE  ?= 10
CHAOS_REPORT ?= /tmp/jobq-chaos-report.json
CHAOS_TESTS  := tests/test_faults.py tests/test_restart.py tests/test_fencing.py \
                tests/test_pgbouncer.py tests/test_bad_input.py tests/test_privileges.py \
                tests/test_workflow_concurrency.py tests/test_examples.py tests/test_archive_partitions.py \
                tests/test_failover.py tests/test_fair_queues.py

chaos: deps venv install examples-deps
	rm -f $(CHAOS_REPORT)
	$(AS_SERVER_USER) env PYTHONDONTWRITEBYTECODE=1 JOBQ_CHAOS_SCALE=$(CHAOS_SCALE) \
	    JOBQ_CHAOS_REPORT=$(CHAOS_REPORT) $(PY) -m pytest -s -q $(CHAOS_TESTS) $(PYTEST_ARGS)
	@echo "figures: $(CHAOS_REPORT)"; cat $(CHAOS_REPORT)

# --- the dashboard's pictures in docs/dashboard/*.png, taken by the browser test
#     (headless Chromium over a small realistic dataset); commit them when they change
screenshots: deps venv
	@dir=$$(mktemp -d /tmp/jobq-screenshots.XXXXXX); chmod 777 $$dir; \
	$(AS_SERVER_USER) env PYTHONDONTWRITEBYTECODE=1 JOBQ_SCREENSHOTS=1 JOBQ_SCREENSHOTS_DIR=$$dir \
	    $(PY) -m pytest -q tests/test_dashboard_browser.py -k photographed && \
	mkdir -p docs/dashboard && cp $$dir/*.png docs/dashboard/; status=$$?; rm -rf $$dir; \
	ls -l docs/dashboard/*.png; exit $$status

# --- numbers: `make bench` (the suite, then the pooler, the prune, the
#     queue-partitioning and the queue-grants comparisons, the Python side of
#     issue 24 and the costs with a backlog of 1,000,000 jobs, about 45 minutes;
#     the cold start, a 1,000,000-job burst per drain in 3 rounds at W=4 and 16,
#     an hour or more; the server CPU per job of a cold drain, jobq against a
#     pgmq-style loop, a few minutes; and a SOAK_SECONDS soak);
#     `make bench BENCH_ARGS=--quick SOAK_SECONDS=60` for a short run. Every
#     program runs; the target fails when any of them missed its goal.
SOAK_SECONDS ?= 600
QUICK_FLAG = $(if $(findstring --quick,$(BENCH_ARGS)),--quick)
bench: deps venv
	@status=0; \
	$(PY) -m pyqueue.bench $(BENCH_ARGS) || status=1; \
	$(PY) -m pyqueue.bench.pooler $(QUICK_FLAG) || status=1; \
	$(PY) -m pyqueue.bench.prune $(QUICK_FLAG) || status=1; \
	$(PY) -m pyqueue.bench.queue_partitions $(QUICK_FLAG) || status=1; \
	$(PY) -m pyqueue.bench.queue_grants $(QUICK_FLAG) || status=1; \
	$(PY) -m pyqueue.bench.fair $(QUICK_FLAG) || status=1; \
	$(PY) -m pyqueue.bench.python_side $(QUICK_FLAG) || status=1; \
	$(PY) -m pyqueue.bench.tracing_cost $(QUICK_FLAG) || status=1; \
	$(PY) -m pyqueue.bench.backlog $(QUICK_FLAG) || status=1; \
	$(PY) -m pyqueue.bench.cold_start $(QUICK_FLAG) || status=1; \
	$(PY) -m pyqueue.bench.server_cpu $(QUICK_FLAG) || status=1; \
	$(PY) -m pyqueue.bench.soak --duration $(SOAK_SECONDS) || status=1; \
	exit $$status

# --- the generated SQL reference and SQLSTATE table: docs/sql-reference.md and the
#     table in docs/errors.md, from jobq installed by its latest install script on a
#     throwaway server (tools/sql_docs.py); tests/test_sql_docs.py fails when they are stale
JOBQ_VERSION := $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" sql/jobq.control)

docs: venv
	@dir=$$(mktemp -d /tmp/jobq-docs.XXXXXX); chmod 755 $$dir; \
	dsn="host=$$dir port=5432 user=postgres dbname=jobq"; \
	$(PY) -m pyqueue.localserver start $$dir --port 5432 --database jobq >/dev/null && \
	psql -X -q -v ON_ERROR_STOP=1 -d "$$dsn" -f sql/jobq--$(JOBQ_VERSION).sql && \
	$(PY) -m tools.sql_docs --dsn "$$dsn"; status=$$?; \
	$(PY) -m pyqueue.localserver stop $$dir; rm -rf $$dir; exit $$status

# --- for humans: a throwaway server in .tmp/db ---------------------------
db-start: venv
	@$(PY) -m pyqueue.localserver start $(DB_DIR) --database jobq
	@echo 'export DATABASE_URL="postgresql://postgres@/jobq?host=$(DB_DIR)"'
	@echo 'psql "$$DATABASE_URL"'
	@echo 'the extension files come from make install (run as root); make db-stop stops the server'

db-stop: venv
	$(PY) -m pyqueue.localserver stop $(DB_DIR)

clean-venv:
	rm -rf $(VENV)

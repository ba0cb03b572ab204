# jobq's extension files installed with PGXS: `make install` (and `make
# uninstall`) of the Makefile run this file. PGXS lives in a makefile of its
# own because it defines targets of its own (`check`, `clean`, …) that the
# Makefile's would override.

PG_CONFIG ?= pg_config
MODULEDIR = extension
DATA      = sql/jobq.control $(wildcard sql/jobq--*.sql)
PGXS     := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(wildcard $(PGXS)),)
include $(PGXS)
# Said before PGXS's install recipes run (prerequisites run first).
install installdirs: install-announce
.PHONY: install-announce
install-announce:
	@echo "make install: copying sql/jobq.control and sql/jobq--*.sql into the system's PostgreSQL share directory, $(datadir)/$(datamoduledir)"
else
install uninstall:
	@echo "PGXS not found: install postgresql-server-dev-15 (make deps) first" >&2; exit 1
endif

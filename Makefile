# hookwheel - build, run and test. Targets: all (default), run, test, deps (what testing needs), deps-run,
# unit, integration, integration-cluster, test-sanitize, test-fuzz, test-compose, fuzz, bench, bench-quick, clean. SANITIZER=address,undefined
# (test-sanitize adds float-cast-overflow,float-divide-by-zero) builds into build/sanitize.
# MALLOC=libc links glibc's malloc instead of jemalloc.

CC        ?= cc
SANITIZER ?=
ifeq ($(SANITIZER),)
BUILD     ?= build
else
BUILD     ?= build/sanitize
endif
PYTHON    ?= /usr/bin/python3

PKGS      := libmicrohttpd libcurl jansson hiredis openssl
# What building and running hookwheel needs (make run installs only these),
# and what testing needs on top (make deps and make test install all).
RUN_PKGS  := build-essential pkg-config libmicrohttpd-dev libcurl4-openssl-dev libjansson-dev \
             libhiredis-dev libssl-dev libjemalloc-dev redis-server redis-tools tzdata
TEST_PKGS := libcmocka-dev nginx-light python3 python3-pytest curl clang libclang-rt-14-dev
# The deploy files and the API contract: docker-compose (config check only),
# jsonschema (contract tests), Node.js for the OpenAPI linter. npm comes with
# NodeSource's nodejs; with Debian's nodejs it is a package of its own.
TEST_PKGS += docker-compose python3-jsonschema python3-yaml nodejs \
             $(if $(shell command -v npm 2>/dev/null),,npm)
# The compose test (tests/compose) brings docker/docker-compose.yml up on a
# Docker engine, with base images made offline by debootstrap. Debian's
# docker.io is installed only where no dockerd is (Docker's own packages
# conflict with it).
TEST_PKGS += debootstrap $(if $(shell command -v dockerd 2>/dev/null),,docker.io)
# GET /metrics is checked with a maintained Prometheus text parser.
TEST_PKGS += python3-prometheus-client
# The TLS tests make their certificates with the openssl command.
TEST_PKGS += openssl
# A listing is checked against a Redis running in a locale of its own (localedef).
TEST_PKGS += locales
# A host name with several addresses comes from a hosts file of the test's own
# (nss_wrapper's NSS_WRAPPER_HOSTS), not from a change to /etc/hosts.
TEST_PKGS += libnss-wrapper
# The README's fencing example runs against a real PostgreSQL.
TEST_PKGS += postgresql
# The dashboard's browser tests drive Debian's Chromium (tests/integration/test_ui.py).
TEST_PKGS += chromium chromium-driver python3-selenium
DEB_PKGS  := $(RUN_PKGS) $(TEST_PKGS)
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)

WARN      := -Wall -Wextra -Wformat=2 -Wshadow -Wstrict-prototypes -Wmissing-prototypes
OPT       ?= -O2 -g
CFLAGS    += -std=gnu11 $(OPT) $(WARN) -MMD -MP -D_GNU_SOURCE \
             -I. -Iservice -Iapi -Ipersistence -I$(BUILD) $(PKG_CFLAGS)
LDLIBS    += $(PKG_LIBS) -lpthread -lm
# The service's allocator: jemalloc, as Redis's. Its per-thread caches free a
# block on the freeing thread; glibc's malloc locks the arena of the thread that
# allocated it, and a create is allocated on an HTTP thread and freed on the
# store's (README, Performance). MALLOC=libc keeps glibc's; a sanitizer brings
# its own allocator, so a sanitized build never links jemalloc.
MALLOC    ?= jemalloc
ifneq ($(SANITIZER),)
CFLAGS    += -fsanitize=$(SANITIZER) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS   += -fsanitize=$(SANITIZER)
MALLOC    := libc
endif
MALLOC_LIBS := $(if $(filter jemalloc,$(MALLOC)),-ljemalloc)

# Every module but main.c, so the test binaries link the rest.
LIB_SRCS  := $(filter-out service/main.c,$(sort $(wildcard service/*.c persistence/*.c api/*.c)))
LUA       := $(filter-out persistence/lua/_%,$(wildcard persistence/lua/*.lua))
LUA_PRE   := persistence/lua/_record.lua
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o)
MAIN_OBJ  := $(BUILD)/service/main.o
BIN       := $(BUILD)/hookwheel
# hookwheelctl, the command-line client: cli/ (kept out of LIB_SRCS) and the base floor's allocator.
CLI_OBJS  := $(patsubst %.c,$(BUILD)/%.o,$(sort $(wildcard cli/*.c))) $(BUILD)/service/xalloc.o
CLI_BIN   := $(BUILD)/hookwheelctl
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all run test unit integration integration-cluster test-sanitize test-fuzz test-compose unit-fuzz-compose deps check-deps clean
# ./hookwheel points at the default build only: `make BUILD=elsewhere` (a
# second build directory) leaves it alone.
all: check-run-deps $(BIN) $(CLI_BIN) $(if $(filter build,$(BUILD)),hookwheel hookwheelctl)

hookwheel: $(BIN)
	@ln -sf $(BIN) hookwheel

$(BIN): $(LIB_OBJS) $(MAIN_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(MALLOC_LIBS)

# hookwheelctl links libcurl and jansson only.
$(CLI_BIN): $(CLI_OBJS)
	$(CC) $(LDFLAGS) -o $@ $^ $(shell pkg-config --libs libcurl jansson)
hookwheelctl: $(CLI_BIN)
	@ln -sf $(CLI_BIN) hookwheelctl

$(BUILD)/%.o: %.c | $(BUILD)/lua_scripts.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# Lua scripts are embedded as C strings, one per file (persistence/lua/x.lua ->
# lua_x), and the shared prelude (persistence/lua/_record.lua) as lua__prelude;
# store.c makes one Redis function library of them.
$(BUILD)/lua_scripts.h: $(LUA) $(LUA_PRE) Makefile
	@mkdir -p $(BUILD)
	@for f in $(LUA_PRE) $(LUA); do \
	  n=$$(basename $$f .lua); [ "$$f" = "$(LUA_PRE)" ] && n=_prelude; \
	  printf 'static const char lua_%s[] =\n' "$$n"; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/    "/' -e 's/$$/\\n"/' $$f; \
	  printf ';\n'; \
	done > $@.tmp && mv $@.tmp $@

# The dashboard's files (ui/) are embedded too: $(BUILD)/ui_assets.h holds each
# one's name, Content-Type, bytes and a strong ETag (16 hex digits of its
# SHA-256); api/ui.c serves them at /ui/.
# Named, not globbed: a tree without them fails the build instead of serving no page.
UI        := ui/index.html ui/app.css ui/app.js
$(BUILD)/ui_assets.h: $(UI) Makefile
	@mkdir -p $(BUILD)
	@i=0; for f in $(UI); do printf 'static const unsigned char ui_%d[] = {\n' $$i; \
	  od -An -v -tx1 $$f | sed -e 's/ \([0-9a-f][0-9a-f]\)/0x\1,/g'; printf '};\n'; i=$$((i+1)); done > $@.tmp; \
	printf 'static const struct ui_asset ui_assets[] = {\n' >> $@.tmp; i=0; for f in $(UI); do \
	  case $$f in *.html) t=text/html;; *.css) t=text/css;; *) t=text/javascript;; esac; \
	  printf '    {"%s", "%s; charset=utf-8", ui_%d, sizeof ui_%d, "\\"%s\\""},\n' \
	    "$${f#ui/}" $$t $$i $$i "$$(sha256sum $$f | cut -c1-16)"; i=$$((i+1)); done >> $@.tmp; \
	printf '};\n' >> $@.tmp && mv $@.tmp $@
$(BUILD)/api/ui.o: $(BUILD)/ui_assets.h

$(BUILD)/tests/%: tests/unit/%.c $(LIB_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB_OBJS) $(LDLIBS) -lcmocka

run: deps-run all
	./hookwheel

unit: check-deps $(UNIT_BINS)
	@set -e; for t in $(UNIT_BINS); do echo "== $$t"; $$t; done

# The plain suite as INTEGRATION_SHARDS pytest processes side by side, whole
# files each (conftest.py deals them out): most of a test's time is spent
# waiting for timers to fall due, so the parts share the two cores (make
# test runs three). Each part's output is printed when all are done; 1 runs
# it as one. INTEGRATION_IGNORE names test files it leaves out (make test:
# test_cluster.py, whose Clusters the sanitizer pass runs); INTEGRATION_ALONE
# names files run after the parts, on their own: test_sweep.py bounds a
# begin's delay at 100 ms while 100,000 timers are claimed, which the other
# parts' load can exceed.
INTEGRATION_SHARDS ?= 2
INTEGRATION_IGNORE ?=
INTEGRATION_ALONE ?= test_sweep.py
integration: check-deps $(BIN) $(CLI_BIN) $(BUILD)/tests/test_cron_oracle
	@set -u; n=$(INTEGRATION_SHARDS); pids=""; \
	for k in $$(seq 1 $$n); do \
	  HOOKWHEEL_SHARD=$$k/$$n HOOKWHEEL_BIN=$(abspath $(BIN)) $(PYTHON) -m pytest -q -p no:cacheprovider \
	    $(addprefix --ignore=tests/integration/,$(INTEGRATION_IGNORE) $(INTEGRATION_ALONE)) \
	    --basetemp=$(abspath $(BUILD))/pytest-part-$$k tests/integration > $(BUILD)/integration-part-$$k.log 2>&1 & \
	  pids="$$pids $$!"; \
	done; \
	rc=0; for p in $$pids; do wait $$p || rc=1; done; \
	for k in $$(seq 1 $$n); do echo "== integration part $$k of $$n"; cat $(BUILD)/integration-part-$$k.log; done; \
	if [ -n "$(strip $(INTEGRATION_ALONE))" ]; then echo "== integration, alone: $(strip $(INTEGRATION_ALONE))"; \
	  HOOKWHEEL_BIN=$(abspath $(BIN)) $(PYTHON) -m pytest -q -p no:cacheprovider \
	    --basetemp=$(abspath $(BUILD))/pytest-alone $(addprefix tests/integration/,$(INTEGRATION_ALONE)) || rc=1; fi; \
	exit $$rc

# The cross-slot audit: the whole suite on one Redis Cluster (3 masters, 3
# replicas); each test fails if Redis answered a CROSSSLOT error. Tests about
# one Redis (stopping it, its config, old layouts) skip there and run right
# after on one Redis, so every test runs once. test-sanitize runs it under
# the sanitizers (the suite runs once plain, on one Redis, and once here).
# The cluster pass runs as INTEGRATION_SHARDS processes like the plain suite,
# each on a cluster of its own, and each runs the tests its cluster skipped
# on one Redis as soon as its cluster part ends (a part that ends first does
# not wait for the others).
integration-cluster: check-deps $(BIN) $(CLI_BIN) $(BUILD)/tests/test_cron_oracle
	@set -u; n=$(INTEGRATION_SHARDS); out=$(abspath $(BUILD)); pids=""; \
	rm -f $$out/cluster-skipped*.txt; \
	for k in $$(seq 1 $$n); do \
	  (cd tests/integration; rc=0; \
	   HOOKWHEEL_SHARD=$$k/$$n HOOKWHEEL_TEST_REDIS=cluster HOOKWHEEL_BIN=$(abspath $(BIN)) \
	    HOOKWHEEL_SKIPPED_FILE=$$out/cluster-skipped-$$k.txt $(PYTHON) -m pytest -q -p no:cacheprovider \
	    --basetemp=$$out/pytest-cluster-$$k . > $$out/integration-cluster-$$k.log 2>&1 || rc=1; \
	   touch $$out/cluster-skipped-$$k.txt; \
	   HOOKWHEEL_BIN=$(abspath $(BIN)) HOOKWHEEL_ONLY_FILE=$$out/cluster-skipped-$$k.txt \
	    $(PYTHON) -m pytest -q -rs -p no:cacheprovider --basetemp=$$out/pytest-cluster-only-$$k . \
	    > $$out/integration-cluster-only-$$k.log 2>&1 || [ $$? -eq 5 ] || rc=1; exit $$rc) & \
	  pids="$$pids $$!"; \
	done; \
	rc=0; for p in $$pids; do wait $$p || rc=1; done; \
	for k in $$(seq 1 $$n); do echo "== integration on a Redis Cluster, part $$k of $$n"; \
	  cat $$out/integration-cluster-$$k.log; \
	  echo "== the tests part $$k of the cluster pass skipped, on one Redis"; \
	  cat $$out/integration-cluster-only-$$k.log; done; \
	exit $$rc

# The same suites under AddressSanitizer and UndefinedBehaviorSanitizer, with
# UBSan's float checks too (not in `undefined`): an out-of-range float to
# integer conversion, and a float division by zero.
SANITIZE_VARS := SANITIZER=address,undefined,float-cast-overflow,float-divide-by-zero OPT="-O1 -g"
test-sanitize:
	$(MAKE) $(SANITIZE_VARS) unit integration-cluster

# The fuzz target: every kept input once (regressions), then 60 s of fuzzing.
test-fuzz: fuzz-regress fuzz-ci

# docker/docker-compose.yml up for real (tests/compose/run.sh starts dockerd
# for the run when none answers and it runs as root).
test-compose:
	PYTHON=$(PYTHON) tests/compose/run.sh

# The compose test waits mostly on debootstrap, apt and dockerd: it runs
# beside the unit tests, the fuzzer and the sanitizer build with its unit
# tests, and its output is printed after.
unit-fuzz-compose:
	@mkdir -p $(BUILD); $(MAKE) --no-print-directory test-compose > $(BUILD)/compose.log 2>&1 & pid=$$!; \
	$(MAKE) --no-print-directory unit test-fuzz && $(MAKE) --no-print-directory $(SANITIZE_VARS) all unit; rc=$$?; \
	wait $$pid; crc=$$?; echo "== make test-compose"; cat $(BUILD)/compose.log; \
	[ $$rc -eq 0 ] && [ $$crc -eq 0 ]

# make test: test_cluster.py runs once, in the sanitizer pass (the whole
# suite runs on a Cluster there); the sanitized unit tests ran beside compose.
test: deps lint-openapi unit-fuzz-compose
	$(MAKE) --no-print-directory integration INTEGRATION_IGNORE=test_cluster.py INTEGRATION_SHARDS=3
	$(MAKE) --no-print-directory $(SANITIZE_VARS) integration-cluster

# check-run-deps and deps-run: the same for RUN_PKGS alone.
.PHONY: check-run-deps deps-run
check-run-deps:
	@$(MAKE) -s --no-print-directory check-deps DEB_PKGS="$(RUN_PKGS)"

deps-run:
	@$(MAKE) -s --no-print-directory deps DEB_PKGS="$(RUN_PKGS)"

check-deps:
	@missing=""; for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "missing Debian packages:$$missing"; \
	  echo "run: make deps   (or: sudo apt-get install -y$$missing)"; exit 1; fi

deps:
	@missing=""; for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then echo "all dependencies present"; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq$$missing; \
	else echo "missing:$$missing"; echo "sudo apt-get install -y$$missing"; exit 1; fi

# openapi.yaml linted with a pinned @redocly/cli from the npm registry (rules:
# redocly.yaml). It is installed once into build/npm; the stamp names the
# version, so changing REDOCLY_VERSION reinstalls it.
REDOCLY_VERSION := 2.77.0
REDOCLY_STAMP   := build/npm/.redocly-$(REDOCLY_VERSION)
REDOCLY_ENV     := REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true NO_UPDATE_NOTIFIER=1

$(REDOCLY_STAMP):
	@mkdir -p build/npm
	$(REDOCLY_ENV) npm install --prefix build/npm --save-exact --no-audit --no-fund \
	  --loglevel=error @redocly/cli@$(REDOCLY_VERSION)
	@touch $@

.PHONY: lint-openapi
lint-openapi: $(REDOCLY_STAMP)
	$(REDOCLY_ENV) build/npm/node_modules/.bin/redocly lint --config redocly.yaml openapi.yaml

clean:
	rm -rf build hookwheel hookwheelctl

include bench/bench.mk
include tests/fuzz/fuzz.mk

-include $(LIB_OBJS:.o=.d) $(MAIN_OBJ:.o=.d) $(CLI_OBJS:.o=.d)

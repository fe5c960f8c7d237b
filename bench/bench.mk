# bench.mk - build rules for hookwheel's benchmark tools; included by the main
# Makefile (include bench/bench.mk), which defines BUILD, CC, CFLAGS, LDLIBS.
#
#   bench:        bash bench/run.sh            (3 runs per workload, ~30 min)
#   bench-quick:  QUICK=1 bash bench/run.sh    (1 run each, shorter, ~3 min)
#   BASE=<git ref> (make bench BASE=main): an A/B run against that ref, built
#   in a temporary git worktree, base and current alternating (twice as long).
#   ONLY, RUNS and the other settings of run.sh pass through the same way.
#
# run.sh builds the service with `make` and these two tools itself
# (make -f Makefile -f bench/bench.mk when the main Makefile does not include
# this file yet), so both targets only need to call it.

BENCH_BINS := $(BUILD)/bench/sink $(BUILD)/bench/loadgen $(BUILD)/bench/wakeup

.PHONY: bench bench-quick bench-tools
bench-tools: $(BENCH_BINS)

$(BUILD)/bench/sink: bench/sink.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< -lmicrohttpd -lpthread

$(BUILD)/bench/loadgen: bench/loadgen.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $<

# What a wake-up and work after a sleep cost on this machine (a report).
$(BUILD)/bench/wakeup: bench/wakeup.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< -lpthread

BENCH_ENV = $(if $(BASE),BASE='$(BASE)')
# The harness's own tools (run.sh checks for them), installed like make deps.
BENCH_PKGS := wrk gnuplot-nox

.PHONY: bench-deps
bench-deps:
	@$(MAKE) -s deps DEB_PKGS="$(BENCH_PKGS)"

bench: all bench-deps
	$(BENCH_ENV) bash bench/run.sh

bench-quick: all bench-deps
	QUICK=1 $(BENCH_ENV) bash bench/run.sh

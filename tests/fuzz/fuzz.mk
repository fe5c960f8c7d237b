# fuzz.mk - libFuzzer target for spec_parse; included by the main Makefile
# (include tests/fuzz/fuzz.mk), which defines BUILD and WARN.
#
#   fuzz:          fuzz for FUZZ_SECONDS (default 300) from a copy of the seed
#                  corpus in $(BUILD)/fuzz-corpus, which keeps what it learns
#                  between runs; crashing inputs land in $(BUILD)/fuzz-artifacts
#   fuzz-ci:       the same for 60 seconds
#   fuzz-regress:  run every seed and every past crash once, without fuzzing
#
# The fuzzer is built with clang whatever CC is, with its own flags: libFuzzer
# and its sanitizers come with clang (Debian: clang, libclang-rt-14-dev). The
# service sources it needs are compiled into it, instrumented for coverage.
# Copy a crashing input into tests/fuzz/crashes/ once its bug is fixed.

FUZZ_CC       ?= clang
FUZZ_SECONDS  ?= 300
FUZZ_MAX_LEN  ?= 16384
FUZZ_DIR      := tests/fuzz
FUZZ_BIN      := $(BUILD)/fuzz/fuzz_spec
FUZZ_SRCS     := $(FUZZ_DIR)/fuzz_spec.c service/spec.c service/netpolicy.c service/xalloc.c service/clock.c \
                 service/jsonesc.c service/jsonload.c service/cron.c service/tzfile.c
FUZZ_HDRS     := service/spec.h service/netpolicy.h service/xalloc.h service/clock.h service/jsonesc.h service/jsonload.h service/hex.h \
                 service/cron.h service/tzfile.h service/civil.h
FUZZ_CFLAGS   = -std=gnu11 -g -O1 -fno-omit-frame-pointer $(WARN) -D_GNU_SOURCE -Iservice \
                -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
                $(shell pkg-config --cflags jansson libcurl 2>/dev/null)
FUZZ_LIBS     = $(shell pkg-config --libs jansson libcurl 2>/dev/null) -lpthread
FUZZ_SEEDS    := $(wildcard $(FUZZ_DIR)/corpus/*)
FUZZ_CRASHES  := $(filter-out %/README,$(wildcard $(FUZZ_DIR)/crashes/*))
# -timeout: a spec parse takes microseconds, so 5 s means a hang.
FUZZ_FLAGS    := -timeout=5 -rss_limit_mb=2048 -max_len=$(FUZZ_MAX_LEN) \
                 -dict=$(FUZZ_DIR)/spec.dict -print_final_stats=1 \
                 -artifact_prefix=$(BUILD)/fuzz-artifacts/

.PHONY: fuzz fuzz-ci fuzz-regress fuzz-build
fuzz-build: $(FUZZ_BIN)

$(FUZZ_BIN): $(FUZZ_SRCS) $(FUZZ_HDRS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(FUZZ_SRCS) $(FUZZ_LIBS)

# $(call fuzz_run,seconds)
define fuzz_run
	@mkdir -p $(BUILD)/fuzz-corpus $(BUILD)/fuzz-artifacts
	cp $(FUZZ_SEEDS) $(BUILD)/fuzz-corpus/
	$(FUZZ_BIN) $(FUZZ_FLAGS) -max_total_time=$(1) $(BUILD)/fuzz-corpus
endef

fuzz: $(FUZZ_BIN)
	$(call fuzz_run,$(FUZZ_SECONDS))

fuzz-ci: $(FUZZ_BIN)
	$(call fuzz_run,60)

fuzz-regress: $(FUZZ_BIN)
	$(FUZZ_BIN) -timeout=5 -rss_limit_mb=2048 $(FUZZ_SEEDS) $(FUZZ_CRASHES)

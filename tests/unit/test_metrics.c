/* test_metrics.c - unit tests of the metrics module and its Prometheus text
 * rendering (exposition format 0.0.4). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "metrics.h"

static const metrics_gauges no_gauges = {0};

static char *render(metrics *m, const metrics_gauges *g)
{
    size_t len;
    char *t = metrics_render(m, g, &len);
    assert_non_null(t);
    assert_int_equal(strlen(t), len); /* one NUL-free text of exactly len bytes */
    return t;
}

/* The value of the sample whose name and labels are exactly `series`, or
 * -1 when the text has no such line. */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return -1;
}

/* How many sample lines start with prefix. */
static int lines_starting(const char *text, const char *prefix)
{
    int count = 0;
    size_t n = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, prefix, n) == 0)
            count++;
    return count;
}

static void test_metrics_render_gives_each_family_one_help_and_type_before_its_samples(void **state)
{
    (void)state;
    metrics *m = metrics_create();
    metrics_count(m, "q1", MT_CREATED);
    metrics_observe_us(m, MH_LATENESS, 1500);
    char *t = render(m, &no_gauges);
    char family[128] = "", type[32] = "";
    int families = 0;
    for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n")) {
        char name[128];
        if (sscanf(line, "# HELP %127s", name) == 1) {
            assert_string_not_equal(name, family); /* each family once, never split */
            snprintf(family, sizeof family, "%s", name);
            type[0] = '\0';
            families++;
            continue;
        }
        if (sscanf(line, "# TYPE %127s %31s", name, type) == 2) {
            assert_string_equal(name, family); /* TYPE follows its HELP */
            continue;
        }
        assert_true(line[0] != '#');
        assert_true(type[0] != '\0'); /* a sample only after its family's TYPE */
        size_t fl = strlen(family);
        assert_memory_equal(line, family, fl);
        const char *rest = line + fl;
        if (strcmp(type, "histogram") == 0)
            assert_true(strncmp(rest, "_bucket{le=\"", 12) == 0 || strncmp(rest, "_sum ", 5) == 0 ||
                        strncmp(rest, "_count ", 7) == 0);
        else
            assert_true(rest[0] == '{' || rest[0] == ' ');
        assert_true(strcmp(type, "counter") != 0 || strstr(family, "_total"));
    }
    assert_true(families >= 17);
    free(t);
    metrics_free(m);
}

static void test_metrics_counts_timer_events_and_attempts_by_queue(void **state)
{
    (void)state;
    metrics *m = metrics_create();
    for (int i = 0; i < 3; i++)
        metrics_count(m, "billing", MT_CREATED);
    metrics_count(m, "billing", MT_DELIVERED);
    metrics_count(m, "default", MT_FAILED);
    metrics_attempt(m, "billing", MA_5XX);
    metrics_attempt(m, "billing", MA_5XX);
    metrics_attempt(m, "default", MA_REFUSED);
    char *t = render(m, &no_gauges);
    assert_true(sample(t, "hookwheel_timers_created_total{queue=\"billing\"}") == 3);
    assert_true(sample(t, "hookwheel_timers_created_total{queue=\"default\"}") == 0);
    assert_true(sample(t, "hookwheel_timers_delivered_total{queue=\"billing\"}") == 1);
    assert_true(sample(t, "hookwheel_timers_failed_total{queue=\"default\"}") == 1);
    assert_true(sample(t, "hookwheel_attempts_total{queue=\"billing\",class=\"5xx\"}") == 2);
    assert_true(sample(t, "hookwheel_attempts_total{queue=\"default\",class=\"refused\"}") == 1);
    assert_true(sample(t, "hookwheel_attempts_total{queue=\"billing\",class=\"2xx\"}") == 0);
    assert_int_equal(lines_starting(t, "hookwheel_attempts_total{"), 2 * MA_COUNT);
    assert_true(sample(t, "hookwheel_timers_created_total{queue=\"_other\"}") == -1); /* unused: absent */
    free(t);
    metrics_free(m);
}

static void test_metrics_escapes_backslash_quote_and_newline_in_label_values(void **state)
{
    (void)state;
    metrics *m = metrics_create();
    metrics_count(m, "a\\b\"c\nd", MT_CANCELLED);
    char *t = render(m, &no_gauges);
    assert_true(sample(t, "hookwheel_timers_cancelled_total{queue=\"a\\\\b\\\"c\\nd\"}") == 1);
    assert_null(strstr(t, "c\nd")); /* no raw newline inside a sample */
    free(t);
    metrics_free(m);
}

static void test_metrics_histogram_bounds_are_inclusive_with_inf_sum_and_count(void **state)
{
    (void)state;
    metrics *m = metrics_create();
    const uint64_t obs[] = {0, 1000, 1001, 2000, 30000000, 30000001};
    for (size_t i = 0; i < sizeof obs / sizeof obs[0]; i++)
        metrics_observe_us(m, MH_DURATION, obs[i]);
    metrics_observe_us(m, MH_LATENESS, 999);
    char *t = render(m, &no_gauges);
    const char *h = "hookwheel_attempt_duration_seconds";
    char series[128];
    const struct {
        const char *le;
        double cumulative;
    } want[] = {{"0.001", 2}, {"0.002", 4}, {"0.005", 4}, {"1", 4}, {"10", 4}, {"30", 5}, {"+Inf", 6}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        snprintf(series, sizeof series, "%s_bucket{le=\"%s\"}", h, want[i].le);
        assert_true(sample(t, series) == want[i].cumulative);
    }
    snprintf(series, sizeof series, "%s_count", h);
    assert_true(sample(t, series) == 6);
    assert_non_null(strstr(t, "hookwheel_attempt_duration_seconds_sum 60.004002\n"));
    assert_true(sample(t, "hookwheel_firing_lateness_seconds_bucket{le=\"0.001\"}") == 1);
    assert_non_null(strstr(t, "hookwheel_firing_lateness_seconds_sum 0.000999\n"));
    assert_int_equal(lines_starting(t, "hookwheel_firing_lateness_seconds_bucket{"), 15);
    free(t);
    metrics_free(m);
}

static void test_metrics_gives_the_first_64_queues_labels_and_folds_the_rest_into_other(void **state)
{
    (void)state;
    metrics *m = metrics_create(); /* "default" holds one label from the start */
    char name[32];
    metrics_count(m, METRICS_OTHER_QUEUE, MT_CREATED); /* a queue named "_other" shares that label */
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "q%03d", i);
        metrics_count(m, name, MT_CREATED);
        metrics_count(m, name, MT_CREATED);
    }
    char *t = render(m, &no_gauges);
    assert_int_equal(lines_starting(t, "hookwheel_timers_created_total{"), METRICS_MAX_QUEUES + 1);
    assert_true(sample(t, "hookwheel_timers_created_total{queue=\"q000\"}") == 2);
    assert_true(sample(t, "hookwheel_timers_created_total{queue=\"q062\"}") == 2);
    assert_true(sample(t, "hookwheel_timers_created_total{queue=\"q063\"}") == -1);
    assert_true(sample(t, "hookwheel_timers_created_total{queue=\"_other\"}") == 1 + 2 * (100 - 63));
    free(t);
    /* the labels stay the first ones seen: a known queue keeps its own */
    metrics_count(m, "q010", MT_CREATED);
    t = render(m, &no_gauges);
    assert_true(sample(t, "hookwheel_timers_created_total{queue=\"q010\"}") == 3);
    free(t);
    metrics_free(m);
}

static void test_metrics_classifies_attempts_by_status_error_and_policy(void **state)
{
    (void)state;
    assert_int_equal(metrics_attempt_class_of(200, CURLE_OK, 0), MA_2XX);
    assert_int_equal(metrics_attempt_class_of(299, CURLE_OK, 0), MA_2XX);
    assert_int_equal(metrics_attempt_class_of(301, CURLE_OK, 0), MA_3XX);
    assert_int_equal(metrics_attempt_class_of(404, CURLE_OK, 0), MA_4XX);
    assert_int_equal(metrics_attempt_class_of(503, CURLE_OK, 0), MA_5XX);
    assert_int_equal(metrics_attempt_class_of(600, CURLE_OK, 0), MA_OTHER);
    assert_int_equal(metrics_attempt_class_of(0, CURLE_OPERATION_TIMEDOUT, 0), MA_TIMEOUT);
    assert_int_equal(metrics_attempt_class_of(0, CURLE_COULDNT_CONNECT, 0), MA_CONNECT_ERROR);
    assert_int_equal(metrics_attempt_class_of(0, CURLE_COULDNT_RESOLVE_HOST, 0), MA_CONNECT_ERROR);
    assert_int_equal(metrics_attempt_class_of(0, CURLE_COULDNT_CONNECT, 1), MA_REFUSED);
    assert_int_equal(metrics_attempt_class_of(0, CURLE_RECV_ERROR, 0), MA_OTHER);
    assert_int_equal(metrics_attempt_class_of(0, CURLE_OK, 0), MA_OTHER); /* could not start */
}

static void test_metrics_renders_queue_gauges_and_the_given_gauges(void **state)
{
    (void)state;
    metrics *m = metrics_create();
    metrics_gauge_add(m, "default", MG_IN_FLIGHT, 3);
    metrics_gauge_add(m, "default", MG_IN_FLIGHT, -1);
    metrics_gauge_add(m, "mail", MG_READY, 5);
    metrics_gauges g = {.claimed = 12, .in_wheel = 7, .redis_queued_writes = 2, .redis_up = 1,
                        .lease_age_s = 1.25, .lease_ttl_s = 10};
    char *t = render(m, &g);
    assert_true(sample(t, "hookwheel_attempts_in_flight{queue=\"default\"}") == 2);
    assert_true(sample(t, "hookwheel_timers_ready{queue=\"mail\"}") == 5);
    assert_true(sample(t, "hookwheel_timers_claimed") == 12);
    assert_true(sample(t, "hookwheel_timers_in_wheel") == 7);
    assert_true(sample(t, "hookwheel_redis_queued_writes") == 2);
    assert_true(sample(t, "hookwheel_redis_up") == 1);
    assert_true(sample(t, "hookwheel_instance_lease_age_seconds") == 1.25);
    assert_true(sample(t, "hookwheel_instance_lease_ttl_seconds") == 10);
    assert_non_null(strstr(t, "# TYPE hookwheel_redis_up gauge\n"));
    free(t);
    metrics_free(m);
}

static void test_metrics_recording_into_null_does_nothing(void **state)
{
    (void)state;
    metrics_count(NULL, "x", MT_CREATED);
    metrics_attempt(NULL, "x", MA_2XX);
    metrics_gauge_add(NULL, "x", MG_READY, 1);
    metrics_observe_us(NULL, MH_LATENESS, 5);
    metrics_free(NULL);
}

/* Threads racing on new queue names: no count is lost and no name gets
 * two labels (the exposition would then hold one series twice). */
enum { RACE_THREADS = 4, RACE_ROUNDS = 20000, RACE_QUEUES = 40 };

static void *race_worker(void *arg)
{
    metrics *m = arg;
    char name[16];
    for (int i = 0; i < RACE_ROUNDS; i++) {
        snprintf(name, sizeof name, "r%02d", i % RACE_QUEUES);
        metrics_count(m, name, MT_DELIVERED);
        metrics_observe_us(m, MH_LATENESS, (uint64_t)i);
    }
    return NULL;
}

static void test_metrics_loses_no_count_and_duplicates_no_label_under_threads(void **state)
{
    (void)state;
    metrics *m = metrics_create();
    pthread_t th[RACE_THREADS];
    for (int i = 0; i < RACE_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, race_worker, m), 0);
    for (int i = 0; i < RACE_THREADS; i++)
        pthread_join(th[i], NULL);
    char *t = render(m, &no_gauges);
    char series[96];
    for (int q = 0; q < RACE_QUEUES; q++) {
        snprintf(series, sizeof series, "hookwheel_timers_delivered_total{queue=\"r%02d\"}", q);
        assert_true(sample(t, series) == RACE_THREADS * RACE_ROUNDS / RACE_QUEUES);
        assert_int_equal(lines_starting(t, series), 1);
    }
    assert_int_equal(lines_starting(t, "hookwheel_timers_delivered_total{"), RACE_QUEUES + 1);
    assert_true(sample(t, "hookwheel_firing_lateness_seconds_count") == RACE_THREADS * RACE_ROUNDS);
    free(t);
    metrics_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_render_gives_each_family_one_help_and_type_before_its_samples),
        cmocka_unit_test(test_metrics_counts_timer_events_and_attempts_by_queue),
        cmocka_unit_test(test_metrics_escapes_backslash_quote_and_newline_in_label_values),
        cmocka_unit_test(test_metrics_histogram_bounds_are_inclusive_with_inf_sum_and_count),
        cmocka_unit_test(test_metrics_gives_the_first_64_queues_labels_and_folds_the_rest_into_other),
        cmocka_unit_test(test_metrics_classifies_attempts_by_status_error_and_policy),
        cmocka_unit_test(test_metrics_renders_queue_gauges_and_the_given_gauges),
        cmocka_unit_test(test_metrics_recording_into_null_does_nothing),
        cmocka_unit_test(test_metrics_loses_no_count_and_duplicates_no_label_under_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

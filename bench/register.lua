-- register.lua - wrk script for workload R: POST /timers with unique ids.
--
-- Usage: wrk -t2 -c64 -d10s --latency -s bench/register.lua URL/timers -- RUN_ID SINK_URL
-- Each wrk thread has its own Lua state. A top-level `local` would be an
-- upvalue that thread:set cannot change, so the thread id is a global set in
-- setup(); ids are "<run>-<thread>-<n>", unique across threads and runs.
-- done() prints one line with stable keys for run.sh:
--   WRK requests=.. non2xx=.. errors_connect=.. errors_read=.. errors_write=..
--       errors_timeout=.. duration_s=.. rps=.. p50_ms=.. p99_ms=.. max_ms=..
-- wrk counts a response as a status error when its status is above 399, so
-- non2xx assumes no 1xx/3xx answers (POST /timers sends none).

thread_count = 0

function setup(thread)
  thread_count = thread_count + 1
  thread:set("tid", thread_count)
end

function init(args)
  run_id = args[1] or "r"
  sink_url = args[2] or "http://127.0.0.1:9/hook"
  n = 0
  pad = string.rep("x", 100)  -- the timer's 100-byte body
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  n = n + 1
  local body = string.format(
    '{"id":"%s-%d-%d","url":"%s","delay_ms":3600000,"body":"%s"}',
    run_id, tid, n, sink_url, pad)
  return wrk.format(nil, "/timers", nil, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    "WRK requests=%d non2xx=%d errors_connect=%d errors_read=%d errors_write=%d " ..
    "errors_timeout=%d duration_s=%.3f rps=%.1f p50_ms=%.3f p99_ms=%.3f max_ms=%.3f\n",
    summary.requests, e.status, e.connect, e.read, e.write, e.timeout, secs,
    summary.requests / secs, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    latency.max / 1000))
end

-- bench/clients/wrk.py's script: POST one body (read from a file) on every request, and print
-- the window's figures as one JSON line.  Arguments: BODY_PATH HEADER_LENGTH|- CONTENT_TYPE
init = function(args)
  local file = assert(io.open(args[1], "rb"))
  wrk.body = file:read("*a")
  file:close()
  wrk.method = "POST"
  wrk.headers["Content-Type"] = args[3]
  if args[2] ~= "-" then
    wrk.headers["Inference-Header-Content-Length"] = args[2]
  end
end

done = function(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    'BENCH_WRK {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,' ..
    '"status":%d,"timeout":%d,"p50_us":%d,"p90_us":%d,"p95_us":%d,"p99_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, errors.connect, errors.read, errors.write,
    errors.status, errors.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(95), latency:percentile(99), latency.mean))
end

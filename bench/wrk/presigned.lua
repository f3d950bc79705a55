-- Closed-loop load for wrk from a file of PRE-SIGNED raw HTTP requests.
--
--   wrk -t2 -c64 -d10s -s bench/wrk/presigned.lua http://127.0.0.1:8001 -- FILE
--
-- FILE holds length-prefixed records ("<n>\n" then n bytes: one whole HTTP/1.1 request,
-- written by bench/requests.py). Thread k of n sends records k, k+n, k+2n, ... in order
-- and wraps around at the end (a wrap re-sends requests, i.e. duplicates: reported).
-- BENCH_PORTS="8001,8002" spreads the threads over several ports (one server each).
-- done() prints one JSON line: the figures bench/loadgen_wrk.py reads.

local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("index", #threads)
  local ports = os.getenv("BENCH_PORTS")
  if ports and ports ~= "" then
    local list = {}
    for port in string.gmatch(ports, "%d+") do table.insert(list, port) end
    local port = list[((#threads - 1) % #list) + 1]
    thread.addr = wrk.lookup("127.0.0.1", port)[1]
  end
end

local requests = {}
local cursor = 1
wraps = 0

function init(args)
  local nthreads = tonumber(os.getenv("BENCH_THREADS") or "1")
  local file = assert(io.open(args[1], "rb"))
  local position = 0
  while true do
    local line = file:read("*l")
    if not line then break end
    local record = file:read(tonumber(line))
    if position % nthreads == index - 1 then table.insert(requests, record) end
    position = position + 1
  end
  file:close()
  assert(#requests > 0, "no requests for this thread in " .. args[1])
end

function request()
  local raw = requests[cursor]
  cursor = cursor + 1
  if cursor > #requests then
    cursor = 1
    wraps = wraps + 1
  end
  return raw
end

function done(summary, latency, requests)
  local wrapped = 0
  for _, thread in ipairs(threads) do wrapped = wrapped + (thread:get("wraps") or 0) end
  local e = summary.errors
  io.write(string.format(
    '{"duration_us":%d,"requests":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d,"mean":%.1f},"wraps":%d}\n',
    summary.duration, summary.requests, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, latency.mean, wrapped))
end

-- wrk script of bench/run-comments: posts pre-signed Meta webhook deliveries,
-- each exactly once. The file named by BENCH_DELIVERIES holds one delivery
-- per line, "<X-Hub-Signature-256 value>\t<body>"; each wrk thread takes
-- every n-th line and stops once each of its deliveries got a 200. A
-- connection with nothing left to send asks a cheap refused GET meanwhile.
local threads = {}

function setup(thread)
  thread:set("id", #threads)
  threads[#threads + 1] = thread
end

local mine, next_index, ok, nthreads = {}, 1, 0, 0

function init()
  nthreads = tonumber(os.getenv("BENCH_THREADS_N") or "1")
  local i = 0
  for line in io.lines(os.getenv("BENCH_DELIVERIES")) do
    if i % nthreads == id then
      local sig, body = line:match("^([^\t]+)\t(.*)$")
      mine[#mine + 1] = wrk.format("POST", "/webhooks/meta",
        { ["Content-Type"] = "application/json", ["X-Hub-Signature-256"] = sig }, body)
    end
    i = i + 1
  end
  if #mine == 0 then wrk.thread:stop() end
end

local idle = wrk.format("GET", "/webhooks/meta?hub.mode=none")
-- wrk calls request() once on the first thread's state to check the script
-- and throws the answer away: that call must not use up a delivery.
local checked = false

function request()
  if id == 0 and not checked then
    checked = true
    return idle
  end
  local r = mine[next_index]
  if not r then return idle end
  next_index = next_index + 1
  return r
end

function response(status)
  if status == 200 then
    ok = ok + 1
    if ok >= #mine then wrk.thread:stop() end
  end
end

function done(summary)
  io.write(string.format('WRK_JSON {"requests":%d,"duration_us":%d,"non_2xx_3xx":%d}\n',
    summary.requests, summary.duration, summary.errors.status))
end

-- handlers/jobs/selftest_fetch.lua — the host's self-test job.
--
-- Fetches payload.url (if any) and records the outcome as one row of
-- job_selftest_results per run. The integration specs enqueue it to watch the
-- job runner: concurrent outbound calls, leases after a crash, retries.
-- Nothing in the product enqueues it.
--
-- payload: url, timeout (seconds), fail (an error message to raise after
-- recording), retry_in (asks to run again once, after that many seconds),
-- waits (asks to run again at once that many times, each run no attempt).
return function(payload, job)
  local res, err, kind
  if payload.url then
    res, err, kind = http.request({ url = payload.url, timeout = payload.timeout })
  end
  local ok, db_err = db.exec(
    "INSERT INTO job_selftest_results (job_id, attempt, status, error, kind) VALUES ($1, $2, $3, $4, $5)",
    job.id, job.attempts, res and res.status, err, kind)
  if not ok then
    error("could not record the self-test result: " .. tostring(db_err))
  end
  if payload.fail then
    error(tostring(payload.fail))
  end
  if payload.retry_in and job.attempts == 1 then
    return { retry_in = payload.retry_in }
  end
  if payload.waits then
    local runs = tonumber(assert(db.query("SELECT count(*) AS n FROM job_selftest_results WHERE job_id = $1", job.id))[1].n)
    if runs <= payload.waits then return { retry_in = 0, attempt = false } end
  end
end

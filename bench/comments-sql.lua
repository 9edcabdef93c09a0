-- bench/comments-sql.lua — the pgbench scripts of bench/run-comments: the
-- statements sgw sends for one comment listing and for one ingested Meta
-- delivery, recorded by running the real handlers (handlers/api/comments_list,
-- handlers/webhooks/meta_receive, handlers/jobs/process_meta_delivery) on the
-- unit specs' fake host with a `db` that writes down every statement, its
-- parameters and the round trip it goes in, as host/pg.c sends them:
--
--   * a statement outside a transaction goes in one round trip behind the
--     transaction settings (TX_SETTINGS_SQL): a pipeline of two;
--   * db.transaction is BEGIN (behind the settings), COMMIT, and nested
--     ones SAVEPOINT sgw_tx_<n> / RELEASE SAVEPOINT sgw_tx_<n>;
--   * a job is claimed and, once done, deleted by host/jobs.c (CLAIM_SQL,
--     DONE_SQL below), each behind the settings too.
--
-- Run from the top of the checkout:
--
--   lua5.4 bench/comments-sql.lua OUT list post=… company=… environment=…
--   lua5.4 bench/comments-sql.lua OUT ingest batch=… page=… account=… posts=a,b,…
--          company=… environment=… client=… [rules_version=…]
--
-- list writes OUT/list.pgbench and OUT/list.defines; ingest writes
-- OUT/ingest.pgbench, OUT/ingest.defines and OUT/ingest-templates.sql.
-- *.defines: one `name=value` a line, for pgbench -D (the parameters that are
-- the same in every transaction). A NULL parameter is written as NULL in the
-- statement (pgbench cannot bind one; sgw's unnamed statements are planned
-- with it, so the plan is the same). A parameter that must differ in every
-- transaction (the ids of new comments and events, and the delivery holding
-- them) is made from a template in the table bench_pgbench_templates: the
-- script's first statement takes the next number of the sequence
-- bench_pgbench_run and puts it in place of @RUN@ in each template (\gset);
-- ingest-templates.sql creates both.
package.path = "spec/support/?.lua;lib/?.lua;lib/?/init.lua;" .. package.path
local fake_host = require "fake_host"
local cjson = require "cjson"

local out_dir, mode = arg[1], arg[2]
local opt = {}
for i = 3, #arg do
  local k, v = arg[i]:match("^([%w_]+)=(.*)$")
  assert(k, "arguments are key=value: " .. arg[i])
  opt[k] = v
end
local function need(k) return opt[k] or error("missing " .. k .. "=", 0) end

local config_values = fake_host.install({ ["meta.app_secret"] = "bench" })
local TIMEOUT = tostring(config_values["database.statement_timeout_ms"] or 5000)

-- host/pg.c and host/jobs.c, as they send them.
local TX_SETTINGS_SQL = "SELECT set_config('TimeZone', 'UTC', true), set_config('statement_timeout', $1, true), "
  .. "set_config('plan_cache_mode', $2, true)"
-- The plan mode of a statement: one plan per connection when marked.
local function plan_mode(sql)
  return sql:find("^/%* generic plan %*/") and "force_generic_plan" or "force_custom_plan"
end
local CLAIM_SQL = "UPDATE jobs SET attempts = attempts + 1, locked_by = $1, "
  .. "locked_until = now() + make_interval(secs => $2) "
  .. "WHERE id IN (SELECT id FROM jobs WHERE status = 'pending' "
  .. "AND run_at <= now() + make_interval(secs => $4) "
  .. "AND (locked_until IS NULL OR locked_until < now()) "
  .. "ORDER BY run_at, id LIMIT $3 FOR UPDATE SKIP LOCKED) "
  .. "RETURNING id, kind, payload::text, attempts, max_attempts"
local DONE_SQL = "DELETE FROM jobs WHERE id = $1 AND locked_by = $2"

-- What the recording db answers: the rows the code needs to go on.
local DELIVERY_ID = 987654321
local answers = {}
local function answer(sql, params)
  for _, a in ipairs(answers) do
    if sql:find(a[1], 1, true) then return a[2](params) end
  end
  return {}
end

-- The recording: { sql, params (n, values), round = "pipeline" | "single", gset = prefix }.
local steps, depth = {}, 0
local function step(sql, params, round, gset)
  steps[#steps + 1] = { sql = sql, params = params or { n = 0 }, round = round, gset = gset }
end
local function statement(sql, ...)
  local params = table.pack(...)
  step(sql, params, depth == 0 and "pipeline" or "single")
  return answer(sql, params)
end
_G.db = {
  query = statement,
  read_query = statement,
  read_result = function(sql, ...) return fake_host.result(statement(sql, ...)) end,
  exec = function(sql, ...) statement(sql, ...) return 1 end,
  transaction = function(f)
    depth = depth + 1
    local name = "sgw_tx_" .. depth
    if depth == 1 then step("BEGIN", nil, "pipeline") else step("SAVEPOINT " .. name, nil, "simple") end
    local ok, err = pcall(f)
    assert(ok, err)
    step(depth == 1 and "COMMIT" or "RELEASE SAVEPOINT " .. name, nil, "simple")
    depth = depth - 1
  end,
}

-- pgbench variables: constants (-D), templates (per transaction), NULLs
-- (written into the statement), and the ones the script sets itself.
local defines, define_of, templates, template_of = {}, {}, {}, {}
local function variable(v)
  if v == nil then return "NULL" end
  if v == DELIVERY_ID then return ":delivery_id" end
  if type(v) == "table" then v = cjson.encode(v) end
  v = tostring(v)
  local list, name_of, prefix = defines, define_of, "c"
  if v:find("@RUN@", 1, true) then list, name_of, prefix = templates, template_of, "t" end
  if not name_of[v] then
    list[#list + 1] = v
    name_of[v] = prefix .. #list
  end
  return ":" .. name_of[v]
end

-- pgbench takes every :name in a command for a variable, even in a string
-- literal ('HH24:MI:SS'); such a literal is written with a Unicode escape for
-- the colon (U&'HH24\003AMI'), the same constant once parsed. Comments (whole
-- lines) are left out.
local function pgbench_text(sql)
  sql = sql:gsub("\n[ \t]*%-%-[^\n]*", "")
  return (sql:gsub("'([^']*)'", function(text)
    if not text:find(":[%a_]") then return nil end
    return "U&'" .. text:gsub("\\", "\\\\"):gsub(":", "\\003A") .. "'"
  end))
end

local function bind(sql, params)
  sql = pgbench_text(sql)
  return (sql:gsub("%$(%d+)", function(i)
    local p = params[tonumber(i)]
    if type(p) == "string" and p:sub(1, 1) == ":" and p:match("^:[%w_]+$") then return p end
    return variable(p)
  end))
end

-- The script: every step ends with `;` (pgbench reads multi-line commands).
-- head: the lines before the steps, or a function giving them once the steps
-- are bound (so that it knows the templates).
local function script(head)
  local lines = {}
  for _, s in ipairs(steps) do
    local settings = bind(TX_SETTINGS_SQL, { TIMEOUT, plan_mode(s.sql) })
    local sql = bind(s.sql, s.params)
    if s.round == "pipeline" and not s.gset then
      lines[#lines + 1] = "\\startpipeline\n" .. settings .. ";\n" .. sql .. ";\n\\endpipeline"
    elseif s.round == "pipeline" then
      -- pgbench cannot \gset in a pipeline: the settings go one round trip ahead.
      lines[#lines + 1] = settings .. ";\n" .. sql .. " \\gset " .. s.gset
    else
      lines[#lines + 1] = sql .. (s.gset and " \\gset " .. s.gset or ";")
    end
  end
  if type(head) == "function" then head = head() end
  return head .. "\n" .. table.concat(lines, "\n") .. "\n"
end

local function write(name, text)
  local f = assert(io.open(out_dir .. "/" .. name, "w"))
  f:write(text)
  f:close()
end

local function write_defines(name)
  local lines = {}
  for i, v in ipairs(defines) do
    assert(not v:find("\n"), "a constant parameter with a newline cannot go through -D")
    lines[i] = "c" .. i .. "=" .. v
  end
  write(name, table.concat(lines, "\n") .. "\n")
end

if mode == "list" then
  local post, company, environment = need("post"), need("company"), need("environment")
  answers = {
    -- A page of the post's comments (the post is looked up only for an
    -- empty page).
    { "FROM comments c", function()
      return { { id = "cmt_bench", company_id = company, environment = environment, post_id = post,
        platform = "facebook", created_at = "2026-01-01T00:00:00.000Z", updated_at = "2026-01-01T00:00:00.000Z",
        position_t = "2026-01-01 00:00:00.000000+00" } }
    end },
  }
  local handler = dofile("handlers/api/comments_list.lua")
  local status = handler({ query = { limit = "50" }, params = { postId = post }, headers = {} },
    { client = { company_id = company, environment = environment, client_id = "cli_bench" } })
  assert(status == 200, "the listing handler answered " .. tostring(status))
  write("list.pgbench", script("-- One GET /api/v1/posts/{postId}/comments?limit=50, as sgw sends it."))
  write_defines("list.defines")

elseif mode == "ingest" then
  local batch = assert(math.tointeger(tonumber(need("batch"))), "batch= must be an integer")
  local page, account, company, environment, client =
    need("page"), need("account"), need("company"), need("environment"), need("client")
  local posts = {}
  for p in need("posts"):gmatch("[^,]+") do posts[#posts + 1] = p end
  assert(#posts > 0, "posts= names no post")

  -- A delivery as bench/run-comments signs them, its ids made from @RUN@.
  local now, changes = 1700000000, {}
  for n = 1, batch do
    local post = posts[n % #posts + 1]
    changes[n] = { field = "feed", value = {
      from = { id = "@RUN@" .. n, name = "Commenter " .. n }, post_id = post,
      comment_id = post:match("_(.*)$") .. "_@RUN@_" .. n, parent_id = post, created_time = now + n,
      item = "comment", verb = "add", message = "Bench comment number " .. n .. ", with a few words in it." } }
  end
  local body = cjson.encode({ object = "page", entry = { { id = page, time = now + batch, changes = changes } } })

  local tokens = 0
  _G.crypto.random_token = function(n)
    tokens = tokens + 1
    return ("@RUN@x%0" .. math.max(n - 6, 1) .. "d"):format(tokens)
  end
  _G.crypto.hmac_sha256_hex = function() return ("0"):rep(64) end
  answers = {
    { "INSERT INTO meta_webhook_deliveries", function() return { { id = DELIVERY_ID } } end },
    { "INSERT INTO jobs", function() return { { id = 1 } } end },
    { "SELECT body FROM meta_webhook_deliveries", function() return { { body = body } } end },
    { "FROM social_accounts", function() return { { id = account } } end },
    { "WITH obs AS", function(params)
      local rows = {}
      for i, o in ipairs(cjson.decode(params[1])) do
        local r = {}
        for k, v in pairs(o) do r[k] = v end
        r.company_id, r.environment, r.client_id, r.post_id = company, environment, client, "post_bench"
        r.post_target_id, r.is_hidden, r.is_deleted, r.like_count = "tgt_bench", false, false, 0
        r.created_at, r.updated_at = "2023-11-14T22:13:20.000Z", "2023-11-14T22:13:20.000Z"
        r.created, r.state_changed, r.state_changes = true, false, {}
        rows[i] = r
      end
      return rows
    end },
  }

  -- With rules saved (rules_version=), the rule set's version is what a
  -- running instance has cached: each lookup passes it and gets no rules back.
  if opt.rules_version then
    local version = assert(math.tointeger(tonumber(opt.rules_version)), "rules_version= must be an integer")
    table.insert(answers, { "FROM moderation_rule_sets", function() return { { version = version, rules = {} } } end })
    require("moderation.rules").compiled(company, environment)
    steps = {}
  end

  -- The delivery is received (an HTTP request) ...
  local receive = dofile("handlers/webhooks/meta_receive.lua")
  local status = receive({ body = body, headers = { ["x-hub-signature-256"] = "sha256=" .. ("0"):rep(64) } })
  assert(status == 200, "meta_receive answered " .. tostring(status))
  for _, s in ipairs(steps) do
    if s.sql:find("INSERT INTO meta_webhook_deliveries", 1, true) then s.gset = "delivery_" end
  end
  -- ... claimed by a job worker, processed, and its job deleted.
  step(CLAIM_SQL, table.pack(":locker", "60", "1", "0"), "pipeline", "claim_")
  local process = dofile("handlers/jobs/process_meta_delivery.lua")
  process({ deliveryId = DELIVERY_ID })
  step(DONE_SQL, table.pack(":claim_id", ":locker"), "pipeline")

  write("ingest.pgbench", script(function()
    local cols = {}
    for i = 1, #templates do cols[i] = ("replace(t%d, '@RUN@', r::text) AS t%d"):format(i, i) end
    return "-- One Meta delivery of " .. batch .. " new comments, as sgw receives and processes it.\n"
      .. "-- Not sgw's: this delivery's ids, made from the templates (see bench/comments-sql.lua).\n"
      .. "SELECT " .. table.concat(cols, ", ") .. " FROM bench_pgbench_templates, nextval('bench_pgbench_run') AS r \\gset"
  end))
  write_defines("ingest.defines")
  local sql = { "SET client_min_messages = warning;", "DROP TABLE IF EXISTS bench_pgbench_templates;", "CREATE SEQUENCE IF NOT EXISTS bench_pgbench_run;" }
  local cols, vals = {}, {}
  for i, t in ipairs(templates) do
    assert(not t:find("$bench$", 1, true))
    cols[i], vals[i] = "t" .. i .. " text", "$bench$" .. t .. "$bench$"
  end
  sql[#sql + 1] = "CREATE TABLE bench_pgbench_templates (" .. table.concat(cols, ", ") .. ");"
  sql[#sql + 1] = "INSERT INTO bench_pgbench_templates VALUES (" .. table.concat(vals, ", ") .. ");"
  write("ingest-templates.sql", table.concat(sql, "\n") .. "\n")
else
  error("usage: lua5.4 bench/comments-sql.lua OUT list|ingest key=value...", 0)
end

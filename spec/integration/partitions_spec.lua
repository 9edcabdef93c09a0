-- Events, delivery attempts, Meta deliveries and comment changes in daily
-- partitions (migrations/0029, lib/partitions.lua) and their retention
-- (lib/retention.lua): days ahead exist, a day past retention is dropped
-- with its rows unless it holds what retention keeps, a kind kept forever
-- gets no new days, and rows of any time are taken and deleted by age.
local stack = require "stack"
local comment_stack = require "comment_stack"

-- 'YYYYMMDD' and 'YYYY-MM-DD' of the UTC day `offset` days from today.
local function day(env, offset)
  local out = env.sql(("SELECT to_char(d, 'YYYYMMDD') || ' ' || to_char(d, 'YYYY-MM-DD') || ' ' || to_char(d + 1, 'YYYY-MM-DD') "
    .. "FROM (SELECT (now() AT TIME ZONE 'UTC')::date + %d AS d) x"):format(offset))
  local compact, first, next = out:match("(%d+) (%S+) (%S+)")
  return { compact = compact, first = first, next = next }
end

local TABLES = { "events", "webhook_deliveries", "meta_webhook_deliveries", "comment_changes" }

describe("partitioned logs", function()
  local env, t

  setup(function()
    env = comment_stack.start({ name = "partitions", set = {
      ["retention.events_days"] = 30, ["retention.meta_deliveries_days"] = 30,
      ["retention.comment_changes_days"] = 30, ["retention.interval_seconds"] = 86400 } })
    t = comment_stack.test_tenant(env, "Partition Co")
  end)

  teardown(function() comment_stack.stop() end)

  local function partition_of(table_name, where)
    return env.sql("SELECT string_agg(DISTINCT tableoid::regclass::text, ' ') FROM " .. table_name .. " WHERE " .. where)
  end

  local function exists(name)
    return env.sql("SELECT to_regclass('" .. name .. "') IS NOT NULL") == "t"
  end

  -- The day partitions an installation running since `offset` days ago has.
  local function old_day(offset)
    local d = day(env, offset)
    for _, name in ipairs(TABLES) do
      env.sql(("CREATE TABLE %s_p%s PARTITION OF %s FOR VALUES FROM ('%s 00:00:00+00') TO ('%s 00:00:00+00')")
        :format(name, d.compact, name, d.first, d.next))
    end
    return d
  end

  local function deleted_total(kind)
    local _, text = env.sgw:admin("GET", "/metrics")
    return tonumber(text:match('sgw_retention_deleted_total{kind="' .. kind .. '"} (%d+)')) or 0
  end

  it("has today's partition and the next days', and the retention job makes the missing ones", function()
    for _, name in ipairs(TABLES) do
      for offset = 0, 3 do assert.is_true(exists(name .. "_p" .. day(env, offset).compact), name .. " +" .. offset) end
      assert.is_true(exists(name .. "_default"))
    end
    local ahead = "events_p" .. day(env, 3).compact
    env.sql("DROP TABLE " .. ahead)
    env.run_job("retention")
    assert.is_true(exists(ahead))
  end)

  it("drops a day past retention with its rows, and keeps a day holding an unprocessed delivery or an unnumbered change", function()
    local fb_target = select(2, t.publish(t.fb, { type = "text", message = "Partitioned post" }))
    local first = t.sandbox_comment(fb_target, "Numbered")
    local _, page = t.api("GET", "/api/v1/comments/changes?limit=100")
    assert.is_true(#page.data >= 1)
    local second = t.sandbox_comment(fb_target, "Not numbered yet")
    env.deliveries_processed()
    local dropped_day, kept_day = old_day(-41), old_day(-40)
    local at = { dropped = "'" .. dropped_day.first .. " 12:00:00+00'", kept = "'" .. kept_day.first .. " 12:00:00+00'" }
    -- The numbered change on the day dropped, the other on the day kept.
    env.sql("UPDATE comment_changes SET changed_at = " .. at.dropped .. " WHERE comment_id = '" .. first.id .. "'")
    env.sql("UPDATE comment_changes SET changed_at = " .. at.kept .. " WHERE comment_id = '" .. second.id .. "'")
    assert.are.equal("0", env.sql("SELECT count(*) FROM comment_changes WHERE comment_id = '" .. second.id
      .. "' AND sequence IS NOT NULL"))
    env.sql("INSERT INTO meta_webhook_deliveries (body, received_at, processed_at) VALUES "
      .. "('dropped-1', " .. at.dropped .. ", " .. at.dropped .. "), ('dropped-2', " .. at.dropped .. ", now()), "
      .. "('kept-unprocessed', " .. at.kept .. ", NULL), ('kept-processed', " .. at.kept .. ", " .. at.kept .. ")")
    env.sql("INSERT INTO events (id, company_id, environment, client_id, type, data, created_at) VALUES "
      .. "('evt_partold', '" .. t.company .. "', 'test', '" .. t.client_id .. "', 't', '{}', " .. at.dropped .. ");"
      .. "INSERT INTO webhook_deliveries (event_id, client_id, company_id, environment, attempt, url, outcome, duration_ms, "
      .. "created_at) VALUES ('evt_partold', '" .. t.client_id .. "', '" .. t.company .. "', 'test', 1, "
      .. "'https://example.com/', 'delivered', 5, " .. at.dropped .. ")")
    local numbered = tonumber(env.sql("SELECT count(*) FROM comment_changes_p" .. dropped_day.compact))
    local before = { events = deleted_total("events"), meta_deliveries = deleted_total("meta_deliveries"),
      comment_changes = deleted_total("comment_changes") }

    env.run_job("retention")

    for _, name in ipairs(TABLES) do assert.is_false(exists(name .. "_p" .. dropped_day.compact), name) end
    assert.are.equal("0", env.sql("SELECT count(*) FROM events WHERE id = 'evt_partold'"))
    assert.are.equal("0", env.sql("SELECT count(*) FROM webhook_deliveries WHERE event_id = 'evt_partold'"))
    assert.is_true(exists("meta_webhook_deliveries_p" .. kept_day.compact))
    assert.is_true(exists("comment_changes_p" .. kept_day.compact))
    -- In the day kept, the row rule still deletes what it may.
    assert.are.equal("kept-unprocessed", env.sql("SELECT string_agg(body, ' ') FROM meta_webhook_deliveries "
      .. "WHERE body LIKE 'dropped-%' OR body LIKE 'kept-%'"))
    assert.are.equal("comment_changes_p" .. kept_day.compact, partition_of("comment_changes",
      "comment_id = '" .. second.id .. "'"))
    assert.are.equal(before.events + 1, deleted_total("events"))
    assert.are.equal(before.meta_deliveries + 3, deleted_total("meta_deliveries"))
    assert.are.equal(before.comment_changes + numbered, deleted_total("comment_changes"))

    -- Once a reader numbers the change, its day goes too, and the feed
    -- starts after it.
    local _, after = t.api("GET", "/api/v1/comments/changes?limit=100")
    local seen = {}
    for _, ch in ipairs(after.data) do seen[ch.comment.id] = true end
    assert.is_nil(seen[first.id])
    assert.is_true(seen[second.id])
    env.run_job("retention")
    assert.is_false(exists("comment_changes_p" .. kept_day.compact))
    assert.are.equal("0", env.sql("SELECT count(*) FROM comment_changes WHERE comment_id = '" .. second.id .. "'"))
  end)

  it("takes rows of any time, and deletes those of no day partition by their age", function()
    local now_day = day(env, 0)
    env.sql("INSERT INTO meta_webhook_deliveries (body, received_at, processed_at) VALUES "
      .. "('default-old', now() - interval '35 days', now() - interval '35 days'), "
      .. "('default-future', now() + interval '3650 days', NULL), ('today', now(), now())")
    env.sql("INSERT INTO events (id, company_id, environment, client_id, type, data, created_at) VALUES "
      .. "('evt_defold', '" .. t.company .. "', 'test', '" .. t.client_id .. "', 't', '{}', now() - interval '35 days'),"
      .. "('evt_deffuture', '" .. t.company .. "', 'test', '" .. t.client_id .. "', 't', '{}', now() + interval '3650 days')")
    assert.are.equal("meta_webhook_deliveries_default", partition_of("meta_webhook_deliveries", "body LIKE 'default-%'"))
    assert.are.equal("meta_webhook_deliveries_p" .. now_day.compact, partition_of("meta_webhook_deliveries", "body = 'today'"))
    assert.are.equal("events_default", partition_of("events", "id LIKE 'evt_def%'"))

    env.run_job("retention")

    assert.are.equal("default-future today", env.sql("SELECT string_agg(body, ' ' ORDER BY body) "
      .. "FROM meta_webhook_deliveries WHERE body IN ('default-old', 'default-future', 'today')"))
    assert.are.equal("evt_deffuture", env.sql("SELECT string_agg(id, ' ') FROM events WHERE id LIKE 'evt_def%'"))
  end)

  -- Last: it replaces the instance.
  it("makes no new days for a kind kept forever, and keeps making the others'", function()
    env.sgw:kill()
    env.sgw = env.another({ ["retention.comment_changes_days"] = 0 })
    local ahead = day(env, 3).compact
    env.sql("DROP TABLE comment_changes_p" .. ahead .. ", events_p" .. ahead)
    env.run_job("retention")
    assert.is_true(exists("events_p" .. ahead), "a kind with a retention gets its day back")
    assert.is_false(exists("comment_changes_p" .. ahead), "a kind kept forever gets no new day")
    assert.is_true(exists("comment_changes_p" .. day(env, 0).compact), "days made before stay")
  end)
end)

-- A database as the previous version left it (migrations before `version`)
-- holding company cmp_old with its test client cli_old, then `sql`.
local function database_before(prefix, version, sql)
  local db = stack.database_before(prefix, version)
  stack.psql(db, [[INSERT INTO companies (id, name) VALUES ('cmp_old', 'Old');
    INSERT INTO api_clients (id, company_id, environment, name, scopes, secret_hash)
      VALUES ('cli_old', 'cmp_old', 'test', 'old', '{}', 'x');]] .. sql)
  return db
end

-- sgw started on db: it migrates the database to this version first.
local function start_on(db, name)
  return stack.start_sgw { name = name, database_url = db, set = { ["crypto.encryption_key"] = stack.ENCRYPTION_KEY } }
end

describe("partitioning an existing database", function()
  teardown(function() stack.cleanup() end)

  it("moves the rows into their days' partitions, and ids go on from where they were", function()
    local db = database_before("partitions_migrate", "0029", [[
      INSERT INTO events (id, company_id, environment, client_id, type, data, created_at)
        VALUES ('evt_before', 'cmp_old', 'test', 'cli_old', 't', '{}', now() - interval '10 days');
      INSERT INTO webhook_deliveries (event_id, client_id, company_id, environment, attempt, url, outcome, duration_ms,
          created_at)
        VALUES ('evt_before', 'cli_old', 'cmp_old', 'test', 1, 'https://example.com/', 'delivered', 5,
          now() - interval '10 days');
      INSERT INTO meta_webhook_deliveries (body, received_at) VALUES ('before', now() - interval '10 days'), ('gone', now());
      DELETE FROM meta_webhook_deliveries WHERE body = 'gone';]])
    local last_id = tonumber(stack.psql(db, "SELECT last_value FROM meta_webhook_deliveries_id_seq"))

    local sgw = start_on(db, "partitions-migrate")
    local ten_days_ago = stack.psql(db, "SELECT to_char((now() AT TIME ZONE 'UTC')::date - 10, 'YYYYMMDD')")
    assert.are.equal("events_p" .. ten_days_ago, stack.psql(db, "SELECT tableoid::regclass FROM events WHERE id = 'evt_before'"))
    assert.are.equal("webhook_deliveries_p" .. ten_days_ago,
      stack.psql(db, "SELECT tableoid::regclass FROM webhook_deliveries WHERE event_id = 'evt_before'"))
    assert.are.equal("meta_webhook_deliveries_p" .. ten_days_ago,
      stack.psql(db, "SELECT tableoid::regclass FROM meta_webhook_deliveries WHERE body = 'before'"))
    local new_id = tonumber(stack.psql(db, "INSERT INTO meta_webhook_deliveries (body) VALUES ('after') RETURNING id"))
    assert.are.equal(last_id + 1, new_id)
    assert(sgw:stop())
  end)
end)

describe("partitioning the comments of an existing database", function()
  teardown(function() stack.cleanup() end)

  it("keeps every comment, its audit and its changes, and the comment's identity stays unique", function()
    local db = database_before("comments_migrate", "0028", [[
      INSERT INTO social_accounts (id, company_id, environment, platform, platform_account_id, name)
        VALUES ('acc_old', 'cmp_old', 'test', 'facebook', 'page_1', 'Old Page');
      INSERT INTO posts (id, company_id, environment, client_id, status, content, publishing, operation_id)
        VALUES ('post_old', 'cmp_old', 'test', 'cli_old', 'published', '{}', '{}', 'op_post');
      INSERT INTO post_targets (id, post_id, company_id, environment, social_account_id, platform, position, status,
          platform_post_id)
        VALUES ('tgt_old', 'post_old', 'cmp_old', 'test', 'acc_old', 'facebook', 0, 'published', 'page_1_post');
      INSERT INTO comments (id, company_id, environment, post_target_id, post_id, social_account_id, platform,
          platform_comment_id, platform_post_id, text, created_at, created_at_known, version)
        VALUES ('cmt_old', 'cmp_old', 'test', 'tgt_old', 'post_old', 'acc_old', 'facebook', 'c_1', 'page_1_post',
          'Still here', '2026-01-02T03:04:05Z', true, 1767323045);
      INSERT INTO operations (id, company_id, environment, client_id, type, status, resource_type, resource_id)
        VALUES ('op_hide', 'cmp_old', 'test', 'cli_old', 'comment.hide', 'succeeded', 'comment', 'cmt_old');
      INSERT INTO comment_audit (comment_id, action, actor_type, actor_id, operation_id)
        VALUES ('cmt_old', 'comment.hide', 'client', 'cli_old', 'op_hide');
      INSERT INTO comment_changes (company_id, environment, comment_id, type, actor_type, comment)
        VALUES ('cmp_old', 'test', 'cmt_old', 'created', 'platform', '{"id": "cmt_old"}');]])

    local sgw = start_on(db, "comments-migrate")
    assert.are.equal("comments", stack.psql(db,
      "SELECT inhparent::regclass FROM pg_inherits WHERE inhrelid = (SELECT tableoid FROM comments WHERE id = 'cmt_old')"))
    assert.are.equal("Still here|2026-01-02 03:04:05+00|cmp_old", stack.psql(db,
      "SET TIME ZONE 'UTC'; SELECT text, created_at, company_id FROM comments WHERE id = 'cmt_old'"))
    assert.are.equal("cmp_old", stack.psql(db, "SELECT company_id FROM comment_audit WHERE comment_id = 'cmt_old'"))
    assert.are.equal("created", stack.psql(db, "SELECT type FROM comment_changes WHERE comment_id = 'cmt_old'"))
    -- The identity still holds across partitions, and a change must name a comment that exists.
    local ok, err = pcall(stack.psql, db, [[INSERT INTO comments (id, company_id, environment, post_target_id, post_id,
        social_account_id, platform, platform_comment_id, platform_post_id, created_at, created_at_known, version)
      VALUES ('cmt_twin', 'cmp_old', 'test', 'tgt_old', 'post_old', 'acc_old', 'facebook', 'c_1', 'page_1_post',
        now(), true, 1)]])
    assert.is_false(ok)
    assert.matches("duplicate key value.*%(social_account_id, platform_comment_id, company_id%)=%(acc_old, c_1, cmp_old%)", err)
    ok, err = pcall(stack.psql, db, [[INSERT INTO comment_changes (company_id, environment, comment_id, type, actor_type, comment)
      VALUES ('cmp_old', 'test', 'cmt_nowhere', 'created', 'platform', '{}')]])
    assert.is_false(ok)
    assert.matches("comment_changes_comment_id_fkey", err)
    assert(sgw:stop())
  end)
end)

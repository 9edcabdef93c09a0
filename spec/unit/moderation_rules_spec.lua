-- lib/moderation/: each matcher, the folding of text, the regex syntax and
-- its refusals, rule checking with JSON Pointers, and first match wins.
require("fake_host").install()
local cjson = require "cjson"
local text_fold = require "text_fold"
local regex = require "moderation.regex"
local rules = require "moderation.rules"

local function rule(match, extra)
  local r = { id = "r", match = match, action = "hide" }
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end

-- The id of the rule that acts on text (and author, platform, account), or nil.
local function acts(list, text, author, platform, account)
  local stored = assert(rules.check({ rules = list }))
  local hit = rules.first_match(rules.compile(stored), rules.subject(text, author, platform or "facebook", account or "acc_1"))
  return hit and hit.id
end

local function matches(match, text, author)
  return acts({ rule(match) }, text, author) == "r"
end

local function fields_of(body)
  local _, errors = rules.check(body)
  local out = {}
  for _, e in ipairs(errors or {}) do out[#out + 1] = e.field .. " " .. e.code end
  table.sort(out)
  return out
end

describe("text folding", function()
  it("lowers case and drops Latin diacritics, keeping other scripts", function()
    assert.are.equal("cafe creme lodz strasse oeuvre viet", text_fold.fold("Café CRÈME Łódź Straße Œuvre Việt"))
    assert.are.equal("привет", text_fold.fold("привет"))
  end)
end)

describe("matchers", function()
  it("keywords: a word met again costs nothing more, however many phrases start with it", function()
    -- 200 rules of 100 phrases each starting with "buy", against a comment
    -- of "buy" said thousands of times: each phrase was looked for once per
    -- "buy" (minutes); now once.
    local list = {}
    for r = 1, 200 do
      local phrases = {}
      for p = 1, 100 do phrases[p] = "buy item" .. r .. "x" .. p end
      list[r] = rule({ keywords = phrases }, { id = "r" .. r })
    end
    local text = string.rep("buy ", 2000)
    assert.is_nil(acts(list, text))
    assert.are.equal("r7", acts(list, text .. "buy item7x3"))
  end)

  it("keywords: whole words, case and accent insensitive, phrases in a row", function()
    assert.is_true(matches({ keywords = { "cafe" } }, "Best Café!"))
    assert.is_true(matches({ keywords = { "CAFÉ" } }, "the cafe"))
    assert.is_false(matches({ keywords = { "cafe" } }, "The cafeteria"))
    assert.is_true(matches({ keywords = { "buy now" } }, "Please BUY,  now!"))
    assert.is_false(matches({ keywords = { "buy now" } }, "buy it now"))
    assert.is_false(matches({ keywords = { "spam" } }, ""))
  end)

  it("regex: found anywhere, folded, anchors at the ends", function()
    assert.is_true(matches({ regex = "fr[e3]e\\s+m.ney" }, "Get FRÉE   mOney"))
    assert.is_false(matches({ regex = "fr[e3]e\\s+money" }, "free monkey"))
    assert.is_true(matches({ regex = "^hi" }, "Hi there"))
    assert.is_false(matches({ regex = "^hi" }, "oh hi"))
    assert.is_true(matches({ regex = "\\d{3}-\\d{4}$" }, "call 555-1234"))
    assert.is_false(matches({ regex = "\\d{3}-\\d{4}$" }, "call 555-1234 now"))
    assert.is_true(matches({ regex = "(?:win|won)+ big" }, "winwon big"))
  end)

  it("links, emails and phones", function()
    assert.is_true(matches({ links = true }, "see https://x.test/a"))
    assert.is_true(matches({ links = true }, "go to www.shop.test"))
    assert.is_true(matches({ links = true }, "cheap at bit.ly/abc"))
    assert.is_false(matches({ links = true }, "The end.Next time"))
    assert.is_true(matches({ emails = true }, "mail me: ann.b+x@mail.example.org"))
    assert.is_false(matches({ emails = true }, "at @ann on twitter"))
    assert.is_true(matches({ phones = true }, "call +1 (555) 123-4567"))
    assert.is_true(matches({ phones = true }, "06 12 34 56 78"))
    assert.is_false(matches({ phones = true }, "in 2024 we sold 300"))
  end)

  it("authors, minLength and maxLength (in characters)", function()
    assert.is_true(matches({ authors = { "111", "222" } }, "hi", "222"))
    assert.is_false(matches({ authors = { "111" } }, "hi", "333"))
    assert.is_true(matches({ minLength = 3 }, "ééé"))
    assert.is_false(matches({ minLength = 4 }, "ééé"))
    assert.is_true(matches({ maxLength = 3 }, "ééé"))
    assert.is_false(matches({ maxLength = 2 }, "ééé"))
  end)

  it("several keys in one match must all hold", function()
    local m = { keywords = { "deal" }, links = true }
    assert.is_true(matches(m, "deal at shop.com"))
    assert.is_false(matches(m, "deal of the day"))
    assert.is_false(matches(m, "see shop.com"))
  end)
end)

describe("regex refusals", function()
  it("refuses what is no pattern of the syntax, with a reason", function()
    for _, p in ipairs { "(a", "a)", "[a-", "*a", "a**", "a{3,2}", "\\q", "a^", "$a", "(?=a)", "[é]", "" } do
      local m, err = regex.compile(p)
      assert.is_nil(m, p)
      assert.is_string(err, p)
    end
  end)

  it("refuses a pattern matching the empty text, or too big to run in bounded time", function()
    assert.matches("empty", select(2, regex.compile("a*|b")))
    assert.matches("too costly", select(2, regex.compile("(a|b){1,100}")))
    assert.matches("too costly", select(2, regex.compile(("x"):rep(65))))
    assert.matches("too costly", select(2, regex.compile("(?:a{8}){9}")))
    assert.is_function((regex.compile("(?:a{8}){8}")))
  end)

  it("refuses repeating what matches only the empty text, before building anything", function()
    -- Each level of these multiplied the nodes the automaton walked
    -- (50^5 here: minutes of CPU for a 38-character pattern).
    for _, p in ipairs { "(?:(?:(?:(?:(?:){50}){50}){50}){50}){50}a", "(|)*a", "()+a" } do
      local m, err = regex.compile(p)
      assert.is_nil(m, p)
      assert.matches("nothing to repeat", err, 1, true)
    end
  end)

  it("runs classic catastrophic patterns on long adversarial input in linear time", function()
    for _, p in ipairs { "(a+)+b", "(x+x+)+y", "(a|aa)+c", "(.*a){8}z" } do
      local match = assert(regex.compile(p))
      assert.is_false(match(("a"):rep(7999) .. "!"), p)
      assert.is_false(match(("x"):rep(8000)), p)
      assert.is_false(regex.too_costly(p, match), p)
    end
  end)
end)

describe("rules", function()
  it("first match wins, disabled rules and rules out of scope are skipped", function()
    local list = {
      { id = "off", enabled = false, match = { keywords = { "spam" } }, action = "delete" },
      { id = "ig", scope = { platforms = { "instagram" } }, match = { keywords = { "spam" } }, action = "delete" },
      { id = "acc2", scope = { socialAccountIds = { "acc_2" } }, match = { keywords = { "spam" } }, action = "delete" },
      { id = "first", match = { keywords = { "spam" } }, action = "hide" },
      { id = "second", match = { keywords = { "spam" } }, action = "flag" },
    }
    assert.are.equal("first", acts(list, "spam!", nil, "facebook", "acc_1"))
    assert.are.equal("ig", acts(list, "spam!", nil, "instagram", "acc_1"))
    assert.are.equal("acc2", acts(list, "spam!", nil, "facebook", "acc_2"))
    assert.is_nil(acts(list, "ham", nil, "facebook", "acc_1"))
  end)

  it("fills in defaults, makes missing ids, and takes back what it gave", function()
    local stored = assert(rules.check({ rules = { { match = { links = true }, action = "flag" } } }))
    local shown = rules.present(stored).rules[1]
    assert.matches("^rule_", shown.id)
    assert.are.same({ name = cjson.null, enabled = true, scope = cjson.null, action = "flag", match = { links = true } },
      { name = shown.name, enabled = shown.enabled, scope = shown.scope, action = shown.action, match = shown.match })
    local again = assert(rules.check(cjson.decode(cjson.encode(rules.present(stored)))))
    assert.are.same(rules.present(stored), rules.present(again))
    local scoped = assert(rules.check({ rules = { rule({ links = true }, { scope = { platforms = { "facebook" } } }) } }))
    assert.are.same({ socialAccountIds = cjson.null, platforms = { "facebook" } }, scoped[1].scope)
  end)

  it("reports every problem at once with a JSON Pointer to it", function()
    assert.are.same({
      "/extra unknown_field",
      "/rules/0/action invalid_value",
      "/rules/0/match/regex invalid_value",
      "/rules/1/id duplicate_id",
      "/rules/1/match/keywords/1 invalid_value",
      "/rules/1/match/sound unknown_field",
      "/rules/2/action required",
      "/rules/2/enabled invalid_value",
      "/rules/2/match required",
      "/rules/2/scope/platforms/0 invalid_value",
      "/rules/2/scope/x unknown_field",
      "/rules/3/id invalid_value",
      "/rules/3/match/minLength invalid_value",
    }, fields_of({ extra = 1, rules = {
      { id = "a", match = { regex = "(" }, action = "ban" },
      { id = "a", match = { keywords = { "ok", "" }, sound = true }, action = "hide" },
      { enabled = "yes", scope = { platforms = { "tiktok" }, x = 1 } },
      { id = ("x"):rep(65), match = { minLength = -1 }, action = "flag" },
    } }))
    local many = {}
    for i = 1, rules.MAX_RULES + 1 do many[i] = rule({ links = true }, { id = "r" .. i }) end
    assert.are.same({ "/rules too_many" }, fields_of({ rules = many }))
    assert.are.same({ "/rules required" }, fields_of({}))
  end)

  it("bounds a scope's lists: at most 100 account ids, each listed once", function()
    local ids = {}
    for i = 1, rules.MAX_SCOPE_IDS + 1 do ids[i] = "acc_" .. i end
    assert.are.same({ "/rules/0/scope/socialAccountIds too_many" },
      fields_of({ rules = { rule({ links = true }, { scope = { socialAccountIds = ids } }) } }))
    ids[rules.MAX_SCOPE_IDS + 1] = nil
    assert.are.same({}, fields_of({ rules = { rule({ links = true }, { scope = { socialAccountIds = ids } }) } }))
    assert.are.same({ "/rules/0/scope/platforms/1 invalid_value", "/rules/0/scope/socialAccountIds/2 invalid_value" },
      fields_of({ rules = { rule({ links = true }, { scope = { socialAccountIds = { "a", "b", "a" },
        platforms = { "facebook", "facebook" } } }) } }))
  end)
end)

-- The rules as they ran before the shared keyword index, the literal prefilter
-- and the cost order: each key of each rule compiled alone, keywords found one
-- by one in the spaced text, regexes without prefilter, keys in name order.
local function reference_first_match(stored, subject)
  for _, r in ipairs(stored) do
    local scope = r.scope ~= cjson.null and r.scope or {}
    local function allows(list, v)
      if list == nil or list == cjson.null then return true end
      for _, x in ipairs(list) do if x == v then return true end end
      return false
    end
    if r.enabled and allows(scope.socialAccountIds, subject.social_account_id)
        and allows(scope.platforms, subject.platform) then
      local keys = {}
      for k in pairs(r.match) do keys[#keys + 1] = k end
      table.sort(keys)
      local all = true
      for _, k in ipairs(keys) do
        local v, holds = r.match[k], nil
        if k == "keywords" then
          holds = false
          for _, word in ipairs(v) do
            local padded = text_fold.spaced(text_fold.fold(word)):gsub("^ +", " "):gsub(" +$", " ")
            holds = holds or subject.spaced:find(padded, 1, true) ~= nil
          end
        elseif k == "regex" then
          holds = assert(regex.compile(v, true))(subject.folded)
        else
          holds = rules.matcher(k).compile(v)(subject)
        end
        if not holds then all = false break end
      end
      if all then return r end
    end
  end
end

describe("rule evaluation at speed", function()
  it("finds regex literals every match must hold, and still matches what the automaton matches", function()
    for _, case in ipairs {
      { "fr[e3]{2}\\s*money|w[i1]n\\s+\\$?\\d{3,}", { "get fr3e money", "win 500", "w1n  $300" }, { "free monkey", "window 500", "win" } },
      { "colou?r", { "colour", "the color red" }, { "colr", "couleur" } },
      { "(?:win|won)+ big", { "winwon big" }, { "win bigger" == "x" and "" or "winbig" } },
      { "caf(é|e)", { "café au lait" }, { "caff" } },
      { "^hi", { "hi there" }, { "oh hi" } },
      { "bye$", { "good bye" }, { "bye now" } },
    } do
      local match, plain = assert(regex.compile(case[1])), assert(regex.compile(case[1], true))
      for _, t in ipairs(case[2]) do
        assert.is_true(match(text_fold.fold(t)), case[1] .. " / " .. t)
        assert.is_true(match(text_fold.fold(t), {}), case[1] .. " / " .. t)
      end
      for _, t in ipairs(case[3]) do
        assert.is_false(match(text_fold.fold(t)), case[1] .. " / " .. t)
        assert.is_false(plain(text_fold.fold(t)), case[1] .. " / " .. t)
      end
    end
  end)

  it("a set's keyword index and shared finds forget the previous comment", function()
    local compiled = rules.compile(assert(rules.check({ rules = {
      rule({ keywords = { "spam", "buy now" } }, { id = "k" }),
      rule({ regex = "w[i1]n\\s+\\d+" }, { id = "x" }),
    } })))
    local function hit(text)
      local r = rules.first_match(compiled, rules.subject(text, "1", "facebook", "acc_1"))
      return r and r.id
    end
    assert.are.equal("k", hit("Buy now!"))
    assert.is_nil(hit("buy it now"))
    assert.are.equal("x", hit("w1n 300"))
    assert.is_nil(hit("win it"))
    assert.are.equal("k", hit("SPAM"))
  end)

  it("random comments against random rules: the same first match as before", function()
    math.randomseed(14)
    local WORDS = { "free", "fr3e", "money", "win", "w1n", "300", "buy", "now", "spam", "café", "Crème", "Łódź",
      "deal", "shop.com", "a@b.io", "+1", "555", "123", "4567", "the", "x", "colour", "color", "!", "naïve", "don't",
      "monkey", "mon" }
    local KEYWORDS = { "free", "money", "win", "300", "buy now", "spam", "cafe", "CRÈME", "lodz", "shop.com", "don't" }
    local function pick(n)
      local out = {}
      for i = 1, n do out[i] = WORDS[math.random(#WORDS)] end
      return out
    end
    local PATTERNS = { "fr[e3]{2}\\s*money", "w[i1]n\\s+\\$?\\d{3,}", "colou?r", "^buy", "now$", "caf(e|é) cr",
      "\\d{3}\\s\\d{4}", "(?:deal|spam)+", "x|y", "s[^p]am", "n.ve",
      -- literals starting alike share one find of their start
      "free money", "free monkey|deal", "fr[e3]e\\s+money", "money \\d+", "spam\\s*300" }
    local KINDS = {
      function() return { keywords = { KEYWORDS[math.random(#KEYWORDS)], table.concat(pick(2), " ") .. " x" } } end,
      function() return { keywords = { KEYWORDS[math.random(#KEYWORDS)] } } end,
      function() return { regex = PATTERNS[math.random(#PATTERNS)] } end,
      function() return { links = true } end,
      function() return { emails = true } end,
      function() return { phones = true } end,
      function() return { authors = { tostring(math.random(1, 3)), tostring(math.random(1, 4)) } } end,
      function() return { maxLength = math.random(5, 40) } end,
      function() return { minLength = math.random(5, 40) } end,
    }
    local SCOPES = {
      function() return { platforms = { "instagram" } } end,
      function() return { platforms = { "facebook", "instagram" } } end,
      function() return { socialAccountIds = { "acc_2" } } end,
      function() return { socialAccountIds = { "acc_1", "acc_3" }, platforms = { "facebook" } } end,
    }
    local checked = 0
    for _ = 1, 40 do
      local list = {}
      local kind, scope
      for i = 1, math.random(1, 30) do
        -- runs of one kind and one scope are run as one step: make them common
        if not kind or math.random() < 0.5 then kind = KINDS[math.random(#KINDS)] end
        local match = kind()
        if math.random() < 0.3 then
          for k, v in pairs(KINDS[math.random(#KINDS)]()) do match[k] = v end
        end
        if math.random() < 0.3 then scope = math.random() < 0.5 and SCOPES[math.random(#SCOPES)]() or nil end
        list[i] = { id = "r" .. i, match = match, scope = scope, action = "flag", enabled = math.random() < 0.9 }
      end
      local stored = assert(rules.check({ rules = list }))
      local compiled = rules.compile(stored)
      for _ = 1, 50 do
        local text = table.concat(pick(math.random(0, 12)), math.random() < 0.5 and " " or ", ")
        local args = { text, tostring(math.random(1, 4)), math.random() < 0.5 and "facebook" or "instagram",
          "acc_" .. math.random(1, 3) }
        local want = reference_first_match(stored, rules.subject(table.unpack(args)))
        local got = rules.first_match(compiled, rules.subject(table.unpack(args)))
        assert.are.equal(want and want.id, got and got.id, text)
        checked = checked + (want and 1 or 0)
      end
    end
    assert.is_true(checked > 200, "too few matches to compare: " .. checked)
  end)
end)

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
  end)

  it("runs classic catastrophic patterns on long adversarial input in linear time", function()
    for _, p in ipairs { "(a+)+b", "(x+x+)+y", "(a|aa)+c", "(.*a){8}z" } do
      local match = assert(regex.compile(p))
      local started = os.clock()
      assert.is_false(match(("a"):rep(7999) .. "!"), p)
      assert.is_false(match(("x"):rep(8000)), p)
      assert.is_true(os.clock() - started < 0.5, p)
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
end)

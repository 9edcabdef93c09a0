-- Rule evaluation benchmark: 100 rules of every kind against comments that
-- match none of them (the worst case: every rule is tried), time per comment.
-- Run from the repository root: lua5.4 bench/rules.lua [rounds]
package.path = "./lib/?.lua;./spec/support/?.lua;" .. package.path
require("fake_host").install()
local rules = require "moderation.rules"

math.randomseed(42)
local WORDS = { "great", "post", "thanks", "love", "this", "when", "will", "you", "ship", "to", "Norway", "café",
  "crème", "brûlée", "the", "price", "is", "too", "high", "amazing", "photo", "where", "was", "it", "taken",
  "déjà", "vu", "Łódź", "señor", "naïve", "résumé", "order", "delivery", "colour", "size", "medium", "large" }

local function sentence(n)
  local out = {}
  for i = 1, n do out[i] = WORDS[math.random(#WORDS)] end
  return table.concat(out, " ") .. "!"
end

local list = {}
local function add(match, action) list[#list + 1] = { id = "r" .. #list, match = match, action = action or "hide" } end
for i = 1, 60 do add({ keywords = { "spamword" .. i, "scam" .. i, "buy followers " .. i } }) end
for i = 1, 15 do add({ regex = "fr[e3]{2}\\s*money" .. i .. "|w[i1]n\\s+\\$?\\d{3,}" }) end
add({ links = true }, "flag"); add({ emails = true }); add({ phones = true }); add({ links = true, minLength = 500 })
add({ emails = true, keywords = { "contact" } })
for i = 1, 10 do add({ authors = { "9" .. i, "8" .. i, "7" .. i } }) end
for i = 1, 10 do add({ maxLength = 1, keywords = { "x" .. i } }) end
assert(#list == 100)

local compiled = rules.compile(assert(rules.check({ rules = list })))
local comments = {}
for i = 1, 2000 do
  comments[i] = { text = sentence(math.random(8, 40)), author = tostring(1000 + i) }
end

local rounds = tonumber(arg[1]) or 7
local results = {}
for r = 1, rounds do
  local started = os.clock()
  for _, c in ipairs(comments) do
    assert(not rules.first_match(compiled, rules.subject(c.text, c.author, "facebook", "acc_1")))
  end
  results[r] = (os.clock() - started) / #comments * 1e6
end
table.sort(results)
print(("100 rules, %d comments of 8 to 40 words, %d rounds: median %.1f µs per comment (min %.1f, max %.1f)")
  :format(#comments, rounds, results[(rounds + 1) // 2], results[1], results[rounds]))

-- What the flag and length matchers share: finding links, e-mail addresses
-- and phone numbers in a text, and the shape of a matcher that takes `true`
-- or a count.
local M = {}

-- Top-level domains a bare host name ("shop.example.com") is recognised by;
-- "end.Next" of a missing space is not a link.
local TLDS = {}
for tld in ([[com net org info biz io co me ly gl gg app dev xyz online site shop store link live club top
  eu uk de fr es it nl be ch at pl se no dk fi pt ru cn jp in br us ca au tv cc ai]]):gmatch("%a+") do
  TLDS[tld] = true
end

-- folded: lower case (the subject's `folded`). Plain finds first: most
-- comments have no dot at all.
function M.has_link(folded)
  if folded:find("://", 1, true) and folded:find("https?://") then return true end
  if not folded:find(".", 1, true) then return false end
  if folded:find("%f[%w]www%.[%w-]") then return true end
  for tld in folded:gmatch("[%w-]%.(%a%a+)%f[^%w]") do
    if TLDS[tld] then return true end
  end
  return false
end

-- A plain find for the one character every match needs first: most
-- comments have none, and a pattern starting with a class is tried at every byte.
function M.has_email(text)
  if not text:find("@", 1, true) then return false end
  return text:find("[%w._%%+-]@[%w-]+%.[%w.-]*%a%a") ~= nil
end

function M.has_phone(text)
  -- no digit at all: one anchored greedy run is cheaper than find("%d"),
  -- which starts a match at every byte
  if text:find("^[^0-9]*$") then return false end
  for run in text:gmatch("%+?%d[%d .()-]*%d") do
    local digits = select(2, run:gsub("%d", ""))
    if digits >= 7 and digits <= 15 then return true end
  end
  return false
end

-- A matcher of {"key": true}: false is refused (a rule says what to catch).
-- test(text) gets the comment's text, or its folded form when `folded`.
function M.flag_matcher(test, folded)
  return {
    validate = function(value)
      if value ~= true then return "must be true" end
    end,
    compile = function()
      if folded then return function(comment) return test(comment.folded) end end
      return function(comment) return test(comment.text) end
    end,
  }
end

M.MAX_LENGTH = 100000

-- A matcher of {"key": n}, n a whole number from 0, compared with the text's
-- length in characters.
function M.length_matcher(holds)
  return {
    cheap = true,
    validate = function(value)
      if type(value) ~= "number" or value % 1 ~= 0 or value < 0 or value > M.MAX_LENGTH then
        return "must be a whole number from 0 to " .. M.MAX_LENGTH
      end
    end,
    compile = function(value)
      return function(comment) return holds(comment.length, value) end
    end,
  }
end

return M

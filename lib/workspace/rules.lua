-- The Rules page's work: the environment's moderation rules as the API's
-- GET shows them, saved and tested through the same checks as PUT
-- /moderation/rules and POST /moderation/rules/test (lib/moderation/rules.lua).
local json = require "json"
local rules = require "moderation.rules"
local connections = require "workspace.connections"

local M = {}

-- What the editor starts from: the rules and the accounts a scope may name, as JSON.
function M.editor(company_id, environment)
  local accounts = {}
  for _, a in ipairs(connections.list(company_id, environment)) do
    accounts[#accounts + 1] = { id = a.id, name = a.name, platform = a.platform }
  end
  return json.encode(rules.present((rules.load(company_id, environment))).rules), json.encode(json.array(accounts))
end

-- Saves the list the editor sent (JSON text of the rules array): the rules
-- as stored, or nil and errors[] entries whose JSON Pointers start at /rules.
function M.save(company_id, environment, text)
  local list = json.decode(text or "")
  if type(list) ~= "table" then
    return nil, { { field = "/rules", code = "invalid_value", message = "The rules could not be read; reload the page." } }
  end
  local stored, errors = rules.check({ rules = list })
  if stored then errors = rules.foreign_accounts({ company_id = company_id, environment = environment }, stored) end
  if #errors > 0 then return nil, errors end
  rules.save(company_id, environment, stored)
  return rules.present(stored).rules
end

-- The Test box: which saved rule would act on such a comment, or nil; or
-- nil and errors[] entries. Empty fields are left out.
function M.test(company_id, environment, f)
  local function given(v) return v ~= nil and v ~= "" and v or nil end
  return rules.test({ company_id = company_id, environment = environment },
    { text = f.text or "", authorId = given(f.authorId), socialAccountId = given(f.socialAccountId) })
end

return M

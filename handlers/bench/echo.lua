-- POST /bench/echo — the Lua echo of bench/run-http (routed only when
-- bench.enabled is true). Answers the JSON object of the body with one added
-- field, so a measurement covers a JSON decode, a handler call and a JSON
-- encode on top of the host's HTTP work.
local cjson = require("cjson.safe")
local problem = require("problem")

return function(req)
  -- The dispatcher has already decoded a JSON body into req.json (and
  -- answered 400 to malformed JSON); decode here only when it has not.
  local doc = req.json
  if doc == nil and req.body then doc = cjson.decode(req.body) end
  if type(doc) ~= "table" or doc[1] ~= nil then
    return problem.response(req, 400, "invalid_json", "The body must be a JSON object.")
  end
  doc.echo = true
  return 200, doc
end

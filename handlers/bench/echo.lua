-- POST /bench/echo — the Lua echo of bench/run-http (routed only when
-- bench.enabled is true). Decodes the JSON object in the body and answers it
-- back with one added field, so a measurement covers a JSON decode, a handler
-- call and a JSON encode on top of the host's HTTP work.
local cjson = require("cjson.safe")

return function(req)
  local doc = req.body and cjson.decode(req.body)
  if type(doc) ~= "table" then
    return 400, {
      type = "about:blank",
      title = "Request body is not a JSON object",
      status = 400,
      code = "invalid_json",
    }, { ["Content-Type"] = "application/problem+json" }
  end
  doc.echo = true
  return 200, doc
end

-- GET /api/v1/openapi.json: the service's own OpenAPI 3.1 document.
local doc = asset("lib/openapi.json")

return function()
  return 200, doc, { ["Content-Type"] = "application/json", ["Cache-Control"] = "public, max-age=60" }
end

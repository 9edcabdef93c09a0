-- GET /workspace/static/{file}: the stylesheet and the script, from the
-- code generation (they reload with it). Pages link them with a digest of
-- their content, so they may be cached for long.
local TYPES = { css = "text/css; charset=utf-8", js = "text/javascript; charset=utf-8", svg = "image/svg+xml" }

return function(req)
  local file = req.params.file
  local ext = file:match("^[%w_-]+%.(%w+)$")
  local body = ext and TYPES[ext] and asset("handlers/workspace/static/" .. file)
  if not body then
    return 404, "Not found\n", { ["Content-Type"] = "text/plain; charset=utf-8" }
  end
  return 200, body, {
    ["Content-Type"] = TYPES[ext],
    ["Cache-Control"] = "public, max-age=86400",
    ["X-Content-Type-Options"] = "nosniff",
  }
end

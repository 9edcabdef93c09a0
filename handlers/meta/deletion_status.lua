-- GET /meta/deletion/{code}: the public page Meta links a person to after
-- they asked for their data to be deleted (lib/meta_callbacks.lua). No
-- credential: the confirmation code (32 random characters) is the key, and
-- the page tells nothing but that request's status.
local template = require "template"
local meta_callbacks = require "meta_callbacks"

local PAGE = [[<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>{{title}}</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 3rem auto; padding: 0 1rem">
<h1>{{title}}</h1>
{{#request}}
<p id="status" data-status="{{status}}">{{#completed}}Your data has been deleted.{{/completed}}{{^completed}}Your request has been received and is being processed.{{/completed}}</p>
<dl>
  <dt>Confirmation code</dt><dd id="code"><code>{{confirmation_code}}</code></dd>
  <dt>Received</dt><dd>{{created_at}}</dd>
  {{#completed_at}}<dt>Completed</dt><dd>{{completed_at}}</dd>{{/completed_at}}
</dl>
<p>The access tokens your Facebook login gave to connected Pages and Instagram accounts were erased, those
accounts were disconnected, and your Facebook user id was removed from them.</p>
{{/request}}
{{^request}}<p id="status" data-status="unknown">No data deletion request has this confirmation code.</p>{{/request}}
</body></html>
]]

return function(req)
  local row = meta_callbacks.deletion_request(req.params.code)
  if row then row.completed = row.status == "completed" end
  local body = template.render_string(PAGE, { title = "Data deletion request", request = row })
  return row and 200 or 404, body, { ["Content-Type"] = "text/html; charset=utf-8", ["Cache-Control"] = "no-store" }
end

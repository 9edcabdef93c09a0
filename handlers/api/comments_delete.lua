-- DELETE /api/v1/comments/{commentId}: deletes a comment on the platform, as
-- an operation (lib/moderation.lua); the comment stays listed, isDeleted.
local moderation = require "moderation"

return function(req, ctx)
  return moderation.request(req, ctx, "delete")
end

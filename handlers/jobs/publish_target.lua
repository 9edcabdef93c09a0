-- Job: one attempt at publishing one post target (docs/publishing.md).
local publisher = require "publisher"

return function(payload)
  return publisher.run(payload.targetId)
end

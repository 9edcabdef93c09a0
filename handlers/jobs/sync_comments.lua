-- Job (timer comments.sync): one run of the periodic comment sync
-- (lib/comment_sync.lua).
local comment_sync = require "comment_sync"

return function()
  comment_sync.run()
end

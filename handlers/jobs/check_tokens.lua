-- Job (timer meta.token_check): Meta's debug_token about every live
-- connected account's token (lib/token_check.lua).
local token_check = require "token_check"

return function()
  token_check.run()
end

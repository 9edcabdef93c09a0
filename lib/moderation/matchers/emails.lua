-- {"emails": true}: holds when the text has an e-mail address (name@host.tld).
local detect = require "moderation.detect"

return detect.flag_matcher(detect.has_email)

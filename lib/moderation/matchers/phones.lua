-- {"phones": true}: holds when the text has a phone number: 7 to 15 digits,
-- optionally after a +, grouped by spaces, dots, dashes or parentheses.
local detect = require "moderation.detect"

return detect.flag_matcher(detect.has_phone)

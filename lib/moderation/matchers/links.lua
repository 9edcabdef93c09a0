-- {"links": true}: holds when the text has a web address: a scheme
-- (http://, https://), "www.", or a host name ending in a common top-level
-- domain ("example.com", "bit.ly/x").
local detect = require "moderation.detect"

return detect.flag_matcher(detect.has_link, true)

-- {"minLength": n}: holds when the text has at least n characters.
local detect = require "moderation.detect"

return detect.length_matcher(function(length, n) return length >= n end)

-- Meta webhook deliveries (decoded JSON) turned into comment observations
-- for comments.apply (docs/comments.md). Pure: the accounts a Page or an
-- Instagram user stands for come from the caller's lookup.
--
-- Anything that is not a comment change we understand is skipped and
-- reported, never an error for the whole delivery: Meta retries a delivery we
-- refuse for a day and a half, and one odd change must not hold up the rest.
local RANK = require("comment_versions").RANK

local M = {}

-- delivery.object -> { platform, the change field that carries comments }
local OBJECTS = {
  page = { platform = "facebook", field = "feed" },
  instagram = { platform = "instagram", field = "comments" },
}

-- The verbs of comment changes, by the name they are handled under: Meta's
-- enum also lists "edit" and "delete" beside the "edited" and "remove" that
-- deliveries are seen to carry, so both spellings are taken.
local VERBS = { add = "add", edited = "edited", edit = "edited", remove = "remove", delete = "remove",
  hide = "hide", unhide = "unhide" }

local function str(v)
  if type(v) == "string" and v ~= "" then return v end
  return nil
end

-- Unix seconds. Page and Instagram changes use seconds; Messenger-style
-- milliseconds are recognised by size rather than misread as a far future.
local function seconds(v)
  if type(v) ~= "number" or v ~= v or v <= 0 then return nil end
  if v > 1e11 then return v / 1000 end
  return v
end

-- Page feed change -> observation fields, or nil and why it was skipped.
local function page_change(value, entry_id, entry_time)
  if value.item ~= "comment" then return nil, "item " .. tostring(value.item) .. " is not a comment" end
  local verb = VERBS[value.verb]
  if not verb then return nil, "unknown verb " .. tostring(value.verb) end
  local comment_id, post_id = str(value.comment_id), str(value.post_id)
  if not comment_id then return nil, "missing comment_id" end
  if not post_id then return nil, "missing post_id" end
  local created = seconds(value.created_time)
  local version = created or entry_time
  if not version then return nil, "missing created_time and entry time" end
  -- `from` is who made the change: the author for an add or an edit (only
  -- the author edits), but for a hide, an unhide or a removal whoever did
  -- it, the Page itself for its own moderation. Only the first two say who
  -- wrote the comment.
  local from = (verb == "add" or verb == "edited") and type(value.from) == "table" and value.from or {}
  local parent, from_id = str(value.parent_id), str(from.id)
  local o = {
    platform_post_id = post_id,
    platform_comment_id = comment_id,
    -- A top-level comment's parent is the post itself.
    parent_platform_comment_id = parent ~= post_id and parent or nil,
    author_platform_id = from_id,
    author_name = str(from.name),
    is_from_account = from_id and from_id == entry_id, -- nil when the change does not say
    version = version,
    rank = RANK[verb],
  }
  if verb == "add" then
    o.text = type(value.message) == "string" and value.message or "" -- a photo or sticker comment has no message
    o.created_at = version
  elseif verb == "edited" then
    o.text = type(value.message) == "string" and value.message or nil
  elseif verb == "remove" then
    o.is_deleted = true
  else
    o.is_hidden = verb == "hide"
  end
  return o
end

-- How long Meta retries a delivery it could not make (36 h): a delivery's
-- send time is at most that much later than the change it reports.
M.RETRY_SECONDS = 36 * 3600

-- Instagram comments change (creation only; no verbs, and no time of its
-- own in most deliveries). The entry's time is when Meta sent it, which for
-- a delivery retried hours later is not when the comment was written. It is
-- shown as the creation time until the next sync reads the comment's
-- timestamp (created_guess, lib/comments.lua), but it does not order the
-- change: the creation's text is the comment's first, so it must not win
-- over text a sync read meanwhile (an edit) when Meta retries the delivery
-- hours later. The change is dated as early as its comment can have been
-- written: the send time less Meta's retry period.
local function instagram_change(value, entry_id, entry_time)
  local comment_id = str(value.id)
  local media = type(value.media) == "table" and str(value.media.id)
  if not comment_id then return nil, "missing id" end
  if not media then return nil, "missing media.id" end
  local created = seconds(value.created_time)
  if not created and not entry_time then return nil, "missing entry time" end
  local version = created or entry_time - M.RETRY_SECONDS
  local from = type(value.from) == "table" and value.from or {}
  local from_id = str(from.id)
  return {
    platform_post_id = media,
    platform_comment_id = comment_id,
    parent_platform_comment_id = str(value.parent_id),
    text = type(value.text) == "string" and value.text or "",
    author_platform_id = from_id,
    author_name = str(from.username),
    is_from_account = from_id and from_id == entry_id,
    created_at = created,
    created_guess = not created and entry_time or nil,
    version = version,
    rank = RANK.add,
  }
end

-- PostgreSQL text holds UTF-8 without NUL bytes; anything else fails the
-- statement, and with it the job, at every attempt.
function M.storable(text)
  return utf8.len(text) ~= nil and not text:find("\0", 1, true)
end

-- A string field of the observation that could not be stored, or nil.
local function unstorable_field(o)
  for k, v in pairs(o) do
    if type(v) == "string" and not M.storable(v) then return k end
  end
end

-- normalize(delivery, accounts) -> observations, skipped
-- accounts(platform, platform_account_id) returns the social account ids that
-- stand for that Page or Instagram user (several companies or environments
-- may have connected the same one). skipped: { {entry, change, reason} }
-- with 1-based indexes (change nil when the whole entry was skipped).
function M.normalize(delivery, accounts)
  local observations, skipped = {}, {}
  local function skip(e, c, reason) skipped[#skipped + 1] = { entry = e, change = c, reason = reason } end
  if type(delivery) ~= "table" then
    skip(nil, nil, "not a JSON object")
    return observations, skipped
  end
  local kind = OBJECTS[delivery.object]
  if not kind then
    skip(nil, nil, "object " .. tostring(delivery.object) .. " is not handled")
    return observations, skipped
  end
  if type(delivery.entry) ~= "table" then
    skip(nil, nil, "missing entry")
    return observations, skipped
  end
  for e, entry in ipairs(delivery.entry) do
    local entry_id = type(entry) == "table" and str(entry.id)
    -- Facebook Login nests the changes under changes[]; an app of Instagram
    -- Login gets one change as field/value on the entry itself.
    local changes = entry_id and (type(entry.changes) == "table" and entry.changes
      or (entry.field ~= nil and type(entry.value) == "table" and { { field = entry.field, value = entry.value } }))
    if not entry_id then
      skip(e, nil, "missing entry id")
    elseif not changes then
      skip(e, nil, "entry without changes")
    else
      local ids = accounts(kind.platform, entry_id) or {}
      local entry_time = seconds(entry.time)
      for c, change in ipairs(changes) do
        local o, why
        if type(change) ~= "table" or type(change.value) ~= "table" then
          why = "change without a value"
        elseif change.field ~= kind.field then
          why = "field " .. tostring(change.field) .. " is not handled"
        elseif kind.platform == "facebook" then
          o, why = page_change(change.value, entry_id, entry_time)
        else
          o, why = instagram_change(change.value, entry_id, entry_time)
        end
        if o and unstorable_field(o) then
          o, why = nil, unstorable_field(o) .. " is not UTF-8 text without NUL bytes"
        end
        if o and #ids == 0 then o, why = nil, "no connected account for " .. entry_id end
        if not o then
          skip(e, c, why)
        else
          o.platform = kind.platform
          for i, account_id in ipairs(ids) do
            local copy = i == 1 and o or {}
            if i > 1 then
              for k, v in pairs(o) do copy[k] = v end
            end
            copy.social_account_id = account_id
            observations[#observations + 1] = copy
          end
        end
      end
    end
  end
  return observations, skipped
end

return M

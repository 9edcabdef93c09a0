-- The pages sandbox permalinks open: GET /sandbox/posts/{token} shows a
-- simulated post as its platform would, with its comments, so that a
-- developer can see what their integration published. No credential: the
-- token (32 random base62 characters, about 190 bits, kept with the
-- publication in sandbox_publications) is the key. It is never derived from
-- an id the API shows, so knowing a post's, target's or platform post's id
-- does not open its page.
local media = require "media"

local M = {}

local TOKEN_CHARS = 32

-- At most this many comments are shown; a note says when there are more.
M.MAX_COMMENTS = 500

-- How long the signed URL of an uploaded image on a page stays valid.
local IMAGE_URL_TTL = 3600

function M.new_token()
  return crypto.random_token(TOKEN_CHARS)
end

function M.url(token)
  return (config.get("public_base_url") or ""):gsub("/+$", "") .. "/sandbox/posts/" .. token
end

-- The first character of a name, for its avatar.
local function initial(name)
  return type(name) == "string" and name:match("^[%z\1-\127\194-\244][\128-\191]*"):upper() or "?"
end

local function when(column, alias)
  return "to_char(" .. column .. " AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI \"UTC\"') AS " .. alias
end

-- The post as the page shows it, or nil for a token that opens nothing. The
-- lookup goes through the token's digest (see migration 0026), and only
-- test-environment targets have pages.
local function find_post(token)
  if type(token) ~= "string" or #token ~= TOKEN_CHARS or not token:match("^%w+$") then return nil end
  return assert(db.query([[SELECT t.id AS target_id, t.company_id, t.platform, p.content, p.image,
        a.name AS account_name, a.username AS account_username,
        ]] .. when("coalesce(t.published_at, s.created_at)", "published_at") .. [[
      FROM sandbox_publications s
      JOIN post_targets t ON t.id = s.post_target_id AND t.environment = 'test'
      JOIN posts p ON p.id = t.post_id
      JOIN social_accounts a ON a.id = t.social_account_id
      WHERE sha256(s.page_token::bytea) = sha256($1::text::bytea) AND s.page_token IS NOT NULL]], token))[1]
end

-- The image a page shows: the post's imageUrl, or a fresh signed URL of its
-- upload (nil when crypto.encryption_key cannot sign one).
local function image_src(image)
  if type(image) ~= "table" then return nil end
  if image.source == "url" then return image.url end
  if image.source == "upload" and image.upload_id then return (media.url(image.upload_id, IMAGE_URL_TTL)) end
end

-- Comments oldest first, threaded as the platforms show them: one level of
-- replies, each under the top-level comment its thread started from (a reply
-- whose parent sgw has not seen stands on its own). Hidden comments keep
-- their text, marked hidden, as a Page's own view shows them; deleted ones
-- keep their place as "removed", without their text.
local function thread(target_id, company_id, account_name)
  local rows = assert(db.query([[SELECT platform_comment_id, parent_platform_comment_id, text, author_name,
        is_from_account, is_hidden, is_deleted, like_count, ]] .. when("created_at", "created_at") .. [[
      FROM comments WHERE post_target_id = $1 AND company_id = $2
      ORDER BY created_at, id LIMIT $3]], target_id, company_id, M.MAX_COMMENTS + 1))
  local more = #rows > M.MAX_COMMENTS
  local top, by_id = {}, {}
  for i = 1, math.min(#rows, M.MAX_COMMENTS) do
    local r = rows[i]
    -- false, not nil, for what a comment lacks: a template looking a name up
    -- in a reply must not find its parent's.
    local c = {
      author = r.is_from_account and account_name or r.author_name or "Someone",
      from_account = r.is_from_account, hidden = r.is_hidden and not r.is_deleted, deleted = r.is_deleted,
      text = not r.is_deleted and r.text or false, likes = r.like_count > 0 and r.like_count or false,
      created_at = r.created_at, replies = {},
    }
    c.initial = initial(c.author)
    local parent = by_id[r.parent_platform_comment_id or ""]
    by_id[r.platform_comment_id] = parent or c
    if parent then
      c.replies = false
      parent.replies[#parent.replies + 1] = c
    else
      top[#top + 1] = c
    end
  end
  return top, math.min(#rows, M.MAX_COMMENTS), more
end

-- What the page template needs, or nil for an unknown token.
function M.find(token)
  local row = find_post(token)
  if not row then return nil end
  local content = row.content or {}
  local link = type(content.link) == "string" and content.link:match("^https?://") and content.link or nil
  local comments, count, more = thread(row.target_id, row.company_id, row.account_name)
  local instagram = row.platform == "instagram"
  return {
    instagram = instagram, facebook = not instagram,
    platform_label = instagram and "Instagram account" or "Facebook Page",
    account_name = row.account_name, account_username = row.account_username,
    initial = initial(row.account_name),
    message = content.message, link = link, image = image_src(row.image),
    published_at = row.published_at,
    comments = comments, comment_count = count, more_comments = more,
    max_comments = M.MAX_COMMENTS,
  }
end

return M

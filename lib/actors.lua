-- Who made a change to a comment or asked for a moderation action
-- (CONTRACT 12): the platform, an API client, a workspace user or a
-- moderation rule. Stored as two columns (actor_type, actor_id).
local M = {}

M.PLATFORM = { type = "platform" }

local TYPES = { platform = true, client = true, user = true, rule = true }

-- The actor of an API request.
function M.client(client)
  return { type = "client", id = client.client_id }
end

-- The columns of an actor; nil means the platform. Misuse raises.
function M.columns(actor)
  actor = actor or M.PLATFORM
  if not TYPES[actor.type] then error("actor type must be platform, client, user or rule", 3) end
  if (actor.type == "platform") ~= (actor.id == nil) then
    error("an actor has an id unless it is the platform", 3)
  end
  if actor.id ~= nil and type(actor.id) ~= "string" then error("an actor id is a string", 3) end
  return actor.type, actor.id
end

-- As the API shows it: the platform has no id (the key is absent).
function M.present(actor_type, actor_id)
  return { type = actor_type, id = actor_id }
end

return M

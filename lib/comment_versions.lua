-- The order of comment observations (docs/comments.md, "Order"): a version
-- is (seconds, rank), compared seconds first. Pure.
--
-- Meta dates a webhook change to the whole second, so an `add` and the
-- `edited` that follows it can carry the same time: within one second an edit,
-- hide or unhide outranks the add, and a removal outranks everything. The sync
-- reads the state at its fetch time F (sgw's clock, with a fraction), which may
-- fall inside the second of a change it did or did not see: it counts as
-- (F - 1, lowest rank), so every change dated in the second the fetch began
-- in (or later) wins over it, and what it saw wins over changes dated before.
-- Should a change it had seen lose that way, the next sync, seconds later,
-- settles it.
local M = {}

M.RANK = { sync = 0, add = 1, edited = 2, hide = 2, unhide = 2, remove = 3 }

-- The version of what a fetch that began at `now` (unix seconds) saw.
function M.fetched(now)
  return now - 1, M.RANK.sync
end

return M

-- Text without the white space (%s: space, \t, \n, \v, \f, \r) at its ends,
-- in steps linear in its length whatever it holds. The usual patterns are
-- not: "^%s*(.-)%s*$" and "%s+$" take steps in the square of the length
-- of a run of spaces followed by something else, and "^%s*(.*%S)" of one
-- made of spaces alone (seconds for 16 KB), on input anyone can send.
local find, match, sub = string.find, string.match, string.sub

return function(s)
  local first = find(s, "%S")
  if not first then return "" end
  -- Greedy to the end, then back to the last non-space: one pass, and it
  -- cannot fail from `first`, so no other start is tried.
  local after = match(s, ".*%S()", first)
  return sub(s, first, after - 1)
end

-- Whether Meta lets the Page hide a Facebook comment (its can_hide), as the
-- comment sync last read it; NULL when no sync has (a comment known from a
-- webhook, Instagram, the sandbox). A hide of one read as hideable skips
-- the can_hide read Meta asks for before a hide (lib/platforms/facebook.lua).
ALTER TABLE comments ADD COLUMN can_hide boolean;

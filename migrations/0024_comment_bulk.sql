-- The items of a bulk comment action (POST /api/v1/comments/bulk), one row per
-- comment in request order. An item that acts is an ordinary moderation
-- operation with its own job (item_operation_id), so a restart mid-way neither
-- repeats nor skips a comment; an item skipped at the request has none and
-- keeps its reason in error. See docs/comments.md, "Bulk actions".
CREATE TABLE comment_bulk_items (
  operation_id       text NOT NULL REFERENCES operations (id),
  position           integer NOT NULL,
  comment_id         text NOT NULL,
  item_operation_id  text UNIQUE REFERENCES operations (id),
  error              jsonb,
  PRIMARY KEY (operation_id, position)
);

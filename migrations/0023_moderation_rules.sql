-- Moderation rules (docs/comments.md, "Rules"): one ordered list per company
-- and environment, replaced whole by each PUT. `version` grows with each
-- save; every instance compares it with the version it compiled, so a change
-- is seen everywhere at the next comment.
CREATE TABLE moderation_rule_sets (
  company_id   text NOT NULL REFERENCES companies (id),
  environment  text NOT NULL CHECK (environment IN ('live', 'test')),
  version      integer NOT NULL,
  rules        jsonb NOT NULL,
  updated_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (company_id, environment)
);

-- What started an operation when the client did not ask for it:
-- {"type":"rule","ruleId":...}; NULL for a client's own request.
ALTER TABLE operations ADD COLUMN trigger jsonb;

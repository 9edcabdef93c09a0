-- Comments on the posts we published, and the Meta webhook deliveries they
-- come from. See docs/comments.md.

CREATE TABLE comments (
  id                          text PRIMARY KEY,
  company_id                  text NOT NULL REFERENCES companies (id),
  environment                 text NOT NULL CHECK (environment IN ('live', 'test')),
  post_target_id              text NOT NULL REFERENCES post_targets (id),
  post_id                     text NOT NULL REFERENCES posts (id),
  social_account_id           text NOT NULL REFERENCES social_accounts (id),
  platform                    text NOT NULL CHECK (platform IN ('facebook', 'instagram')),
  platform_comment_id         text NOT NULL,
  platform_post_id            text NOT NULL,
  parent_platform_comment_id  text,              -- null for a top-level comment
  text                        text,              -- null until an observation carries it
  author_platform_id          text,
  author_name                 text,
  is_from_account             boolean NOT NULL DEFAULT false,
  is_hidden                   boolean NOT NULL DEFAULT false,
  is_deleted                  boolean NOT NULL DEFAULT false,
  like_count                  integer NOT NULL DEFAULT 0,
  -- The platform's creation time. A row first seen through an edit, removal
  -- or hide holds that observation's time until the creation arrives.
  created_at                  timestamptz NOT NULL,
  created_at_known            boolean NOT NULL,
  updated_at                  timestamptz NOT NULL DEFAULT now(),
  -- When the platform said what we hold (unix seconds): the newest
  -- observation overall, and per field, so that an older observation never
  -- overwrites a newer one.
  version                     double precision NOT NULL,
  text_version                double precision,
  hidden_version              double precision,
  like_version                double precision,
  UNIQUE (social_account_id, platform_comment_id)
);
-- Listing: oldest first within a post, keyset-paged.
CREATE INDEX comments_post ON comments (post_id, created_at, id);

-- Ingest finds the target a comment belongs to by the platform's post id.
CREATE INDEX post_targets_platform_post ON post_targets (social_account_id, platform_post_id)
  WHERE platform_post_id IS NOT NULL;

-- Every signed delivery, kept as received (the bytes Meta signed) before we
-- answer 200, then processed by the job process_meta_delivery.
CREATE TABLE meta_webhook_deliveries (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  body          text NOT NULL,
  received_at   timestamptz NOT NULL DEFAULT now(),
  processed_at  timestamptz,
  error         text,
  result        jsonb              -- {"observations","created","skipped":[{"entry","change","reason"}]}
);
CREATE INDEX meta_webhook_deliveries_unprocessed ON meta_webhook_deliveries (received_at) WHERE processed_at IS NULL;

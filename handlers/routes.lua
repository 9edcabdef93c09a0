-- Every endpoint of the gateway: method, path, handler module (under
-- handlers/), the scope it needs, and its body rules. The host matches these;
-- adding an endpoint needs no C.
--
--   auth = false        no credential needed (the route may authenticate itself)
--   scope = "x:y"       the scope the credential must hold (403 otherwise)
--   sandbox_only        test credentials only (403 sandbox_only otherwise)
--   idempotency         "required" or "optional": Idempotency-Key handling
--   raw_body            any media type (forms, uploads, webhooks)
--   validates_body      the handler checks the whole JSON body (lib/fields.lua,
--                       lib/post_rules.lua) and reports a companyId with every
--                       other problem; otherwise the dispatcher refuses one alone
--   max_body            a byte count or a config key (default http.max_body_bytes)
--   rate_limit = false  no rate limit (with auth = false; benchmark routes only)
--   rate_limit = "key"  (auth = false) a per-address limit of its own, from config key "key"
--   rate_limit_by = "client_id"  (with rate_limit) counted per OAuth client_id
--                       when the request names a well-formed one, else per address
--                       at api.rate_limit.anonymous_per_minute
--   A route without auth = false is refused 401 by the host, before its body
--   is read, when it carries no credential of the right shape.
local routes = {
  { method = "GET", path = "/api/v1/openapi.json", handler = "api/openapi", auth = false },
  -- Limited per well-formed client_id (lib/oauth_client.lua), else per address.
  { method = "POST", path = "/oauth/token", handler = "oauth/token", auth = false, raw_body = true, max_body = 16384,
    rate_limit = "oauth.rate_limit_per_minute", rate_limit_by = "client_id" },
  { method = "GET", path = "/api/v1/social-accounts", handler = "api/social_accounts_list", scope = "accounts:read" },

  { method = "POST", path = "/api/v1/posts", handler = "api/posts_create", scope = "posts:write", idempotency = "required", validates_body = true },
  { method = "GET", path = "/api/v1/posts", handler = "api/posts_list", scope = "posts:read" },
  { method = "GET", path = "/api/v1/posts/{postId}", handler = "api/posts_get", scope = "posts:read" },
  { method = "POST", path = "/api/v1/posts/{postId}/cancel", handler = "api/posts_cancel", scope = "posts:write", idempotency = "optional" },
  { method = "POST", path = "/api/v1/posts/{postId}/retry", handler = "api/posts_retry", scope = "posts:write", idempotency = "optional" },
  { method = "GET", path = "/api/v1/operations/{operationId}", handler = "api/operations_get", scope = "operations:read" },

  { method = "POST", path = "/api/v1/uploads", handler = "api/uploads_create", scope = "uploads:write",
    raw_body = true, max_body = "uploads.max_request_bytes", idempotency = "optional" },
  -- Platforms fetch images from few addresses, many at once; the signed URL
  -- is the credential.
  { method = "GET", path = "/media/{file}", handler = "media/get", auth = false, rate_limit = "media.rate_limit_per_minute" },

  { method = "GET", path = "/api/v1/posts/{postId}/comments", handler = "api/comments_list", scope = "comments:read" },
  -- Literal segments win over {commentId} (host/router.c), whatever the order.
  { method = "GET", path = "/api/v1/comments", handler = "api/comments_inbox", scope = "comments:read" },
  { method = "GET", path = "/api/v1/comments/changes", handler = "api/comments_changes", scope = "comments:read" },
  { method = "POST", path = "/api/v1/comments/bulk", handler = "api/comments_bulk",
    scope = "comments:write", idempotency = "optional", validates_body = true },
  { method = "GET", path = "/api/v1/comments/{commentId}", handler = "api/comments_get", scope = "comments:read" },
  { method = "GET", path = "/api/v1/comments/{commentId}/history", handler = "api/comments_history", scope = "comments:read" },
  { method = "POST", path = "/api/v1/comments/{commentId}/replies", handler = "api/comments_reply",
    scope = "comments:write", idempotency = "optional", validates_body = true },
  { method = "POST", path = "/api/v1/comments/{commentId}/hide", handler = "api/comments_hide",
    scope = "comments:write", idempotency = "optional", validates_body = true },
  { method = "POST", path = "/api/v1/comments/{commentId}/unhide", handler = "api/comments_unhide",
    scope = "comments:write", idempotency = "optional", validates_body = true },
  { method = "DELETE", path = "/api/v1/comments/{commentId}", handler = "api/comments_delete",
    scope = "comments:write", idempotency = "optional", validates_body = true },
  -- Moderation rules (lib/moderation/rules.lua); the contract asks comments:write for reading them too.
  { method = "GET", path = "/api/v1/moderation/rules", handler = "api/moderation_rules_get", scope = "comments:write" },
  { method = "PUT", path = "/api/v1/moderation/rules", handler = "api/moderation_rules_put", scope = "comments:write" },
  { method = "POST", path = "/api/v1/moderation/rules/test", handler = "api/moderation_rules_test",
    scope = "comments:write", validates_body = true },

  -- Meta's webhooks: the handshake answers to the verify token, deliveries
  -- to their signature. Meta sends from few addresses, many at once.
  { method = "GET", path = "/webhooks/meta", handler = "webhooks/meta_verify", auth = false,
    rate_limit = "meta.webhook_rate_limit_per_minute" },
  { method = "POST", path = "/webhooks/meta", handler = "webhooks/meta_receive", auth = false, raw_body = true,
    max_body = "meta.webhook_max_bytes", rate_limit = "meta.webhook_rate_limit_per_minute" },
  -- Meta's required callbacks (a person removed the app, or asked for their
  -- data to be deleted): a signed_request form field, checked by the handler.
  { method = "POST", path = "/webhooks/meta/deauthorize", handler = "webhooks/meta_deauthorize", auth = false,
    raw_body = true, max_body = 8192, rate_limit = "meta.webhook_rate_limit_per_minute" },
  { method = "POST", path = "/webhooks/meta/data-deletion", handler = "webhooks/meta_data_deletion", auth = false,
    raw_body = true, max_body = 8192, rate_limit = "meta.webhook_rate_limit_per_minute" },
  -- The status page of a data deletion request: its code is the key.
  { method = "GET", path = "/meta/deletion/{code}", handler = "meta/deletion_status", auth = false },

  -- Sandbox tools: test credentials only.
  { method = "POST", path = "/api/v1/sandbox/accounts", handler = "api/sandbox_accounts_create",
    scope = "sandbox:write", sandbox_only = true, idempotency = "optional", validates_body = true },
  { method = "POST", path = "/api/v1/sandbox/failures", handler = "api/sandbox_failures_create",
    scope = "sandbox:write", sandbox_only = true, idempotency = "optional", validates_body = true },
  { method = "POST", path = "/api/v1/sandbox/comments", handler = "api/sandbox_comments_create",
    scope = "sandbox:write", sandbox_only = true, idempotency = "optional", validates_body = true },
  -- A sandbox post's permalink: a page for people; the token is the key.
  { method = "GET", path = "/sandbox/posts/{token}", handler = "sandbox/post_page", auth = false },
}

-- Web workspace (/workspace): people, not API clients. The pages check their
-- own session cookie and CSRF token (lib/workspace/), take HTML forms, and
-- have a per-address limit of their own. /clients/new before /clients/{id}.
for _, r in ipairs {
  { "GET", "/workspace", "workspace/home" },
  { "GET", "/workspace/static/{file}", "workspace/static" },
  { "GET", "/workspace/signup", "workspace/signup" },
  { "POST", "/workspace/signup", "workspace/signup" },
  { "GET", "/workspace/login", "workspace/login" },
  { "POST", "/workspace/login", "workspace/login" },
  { "POST", "/workspace/logout", "workspace/logout" },
  { "GET", "/workspace/connections", "workspace/connections" },
  { "POST", "/workspace/connections/test-pages", "workspace/test_pages" },
  { "GET", "/workspace/connections/{accountId}/disconnect", "workspace/disconnect" },
  { "POST", "/workspace/connections/{accountId}/disconnect", "workspace/disconnect" },
  { "GET", "/workspace/facebook/connect", "workspace/facebook_connect" },
  { "GET", "/workspace/facebook/callback", "workspace/facebook_callback" },
  { "POST", "/workspace/facebook/pick", "workspace/facebook_pick" },
  { "GET", "/workspace/posts", "workspace/posts" },
  { "POST", "/workspace/posts/{postId}/retry", "workspace/post_retry" },
  { "GET", "/workspace/posts/{postId}/row", "workspace/post_row" },
  { "GET", "/workspace/comments", "workspace/comments" },
  { "POST", "/workspace/comments/{commentId}/moderate", "workspace/comment_moderate" },
  { "GET", "/workspace/comments/{commentId}/row", "workspace/comment_row" },
  { "GET", "/workspace/rules", "workspace/rules" },
  { "POST", "/workspace/rules", "workspace/rules" },
  { "POST", "/workspace/rules/test", "workspace/rules_test" },
  { "GET", "/workspace/clients", "workspace/clients" },
  { "POST", "/workspace/clients", "workspace/clients" },
  { "GET", "/workspace/clients/new", "workspace/client_new" },
  { "GET", "/workspace/clients/{clientId}", "workspace/client" },
  { "POST", "/workspace/clients/{clientId}/rotate", "workspace/client_rotate" },
  { "GET", "/workspace/clients/{clientId}/revoke", "workspace/client_revoke" },
  { "POST", "/workspace/clients/{clientId}/revoke", "workspace/client_revoke" },
} do
  routes[#routes + 1] = { method = r[1], path = r[2], handler = r[3], auth = false, raw_body = r[1] == "POST",
    max_body = 65536, rate_limit = "workspace.rate_limit_per_minute" }
end

-- Benchmark-only routes (bench/); off unless bench.enabled.
if config.get("bench.enabled") then
  routes[#routes + 1] = { method = "POST", path = "/bench/echo", handler = "bench/echo", auth = false, rate_limit = false }
  routes[#routes + 1] = { method = "GET", path = "/bench/ping", handler = "bench/ping", auth = false, rate_limit = false }
  routes[#routes + 1] = { method = "GET", path = "/bench/ping-auth", handler = "bench/ping", scope = "accounts:read" }
  routes[#routes + 1] = { method = "GET", path = "/bench/wait", handler = "bench/wait", auth = false, rate_limit = false }
end

return routes

-- Delivery attempts recorded before tenants were shown only the class of a
-- failure (lib/webhooks.lua, failure_reason) kept the transport's own text,
-- which tells which ports answer on an address; the API Clients page shows
-- it. Reduce it to the same classes.
UPDATE webhook_deliveries SET error = CASE
    WHEN status_code IS NOT NULL THEN NULL
    WHEN error = 'destination address not allowed' THEN 'destination not allowed'
    WHEN error ILIKE '%timed out%' OR error ILIKE '%timeout%' THEN 'timed out'
    WHEN error LIKE 'response larger than%' THEN 'response too large'
    ELSE 'connection failed'
  END
  WHERE error IS NOT NULL;

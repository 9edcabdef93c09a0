-- Events, their delivery attempts, Meta deliveries and the comment change
-- feed become tables partitioned by day (UTC) on their time column, so that
-- retention (lib/retention.lua) drops a whole day at once instead of
-- deleting it row by row (README, "Retention", says why each choice).
--
-- Each table gets one partition per day from the day of its oldest row to
-- three days ahead (lib/partitions.lua keeps creating them ahead), and a
-- DEFAULT partition, so that an insert of any time lands somewhere.
--
-- A unique index of a partitioned table must hold the partition key, so the
-- primary keys become (id, time). Ids are still unique: events' are random
-- 24-character tokens, the others come from sequences that only grow and
-- keep their values here.
--
-- The old rows are copied while each table is locked (nothing writes to it
-- meanwhile), then the indexes are built. With millions of rows, run
-- `sgw migrate` by hand before starting the new version (see 0027).

CREATE TABLE events_new (
  id           text NOT NULL,
  company_id   text NOT NULL CONSTRAINT events_company_id_fkey REFERENCES companies (id),
  environment  text NOT NULL CONSTRAINT events_environment_check CHECK (environment IN ('live', 'test')),
  client_id    text NOT NULL CONSTRAINT events_client_id_fkey REFERENCES api_clients (id),
  type         text NOT NULL,
  data         jsonb NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now(),
  body         text
) PARTITION BY RANGE (created_at);

-- No foreign key to events any more: a key referencing a partitioned table
-- forbids dropping its partitions. Attempts are written after their event
-- (within webhooks.retry.max_age_hours) and are dropped by the same age, so
-- an attempt outlives its event by that much at most, and nothing reads an
-- attempt without joining its event.
CREATE TABLE webhook_deliveries_new (
  id             bigint NOT NULL DEFAULT nextval('webhook_deliveries_id_seq'),
  event_id       text NOT NULL,
  client_id      text NOT NULL CONSTRAINT webhook_deliveries_client_id_fkey REFERENCES api_clients (id),
  company_id     text NOT NULL CONSTRAINT webhook_deliveries_company_id_fkey REFERENCES companies (id),
  environment    text NOT NULL CONSTRAINT webhook_deliveries_environment_check
                   CHECK (environment IN ('live', 'test')),
  attempt        integer NOT NULL,
  url            text NOT NULL,
  outcome        text NOT NULL CONSTRAINT webhook_deliveries_outcome_check
                   CHECK (outcome IN ('delivered', 'failed', 'gave_up', 'gone')),
  status_code    integer,
  error          text,
  duration_ms    integer NOT NULL,
  next_retry_at  timestamptz,
  created_at     timestamptz NOT NULL DEFAULT now()
) PARTITION BY RANGE (created_at);

CREATE TABLE meta_webhook_deliveries_new (
  id            bigint GENERATED ALWAYS AS IDENTITY,
  body          text NOT NULL,
  received_at   timestamptz NOT NULL DEFAULT now(),
  processed_at  timestamptz,
  error         text,
  result        jsonb
) PARTITION BY RANGE (received_at);

CREATE TABLE comment_changes_new (
  id           bigint GENERATED ALWAYS AS IDENTITY,
  company_id   text NOT NULL CONSTRAINT comment_changes_company_id_fkey REFERENCES companies (id),
  environment  text NOT NULL CONSTRAINT comment_changes_environment_check CHECK (environment IN ('live', 'test')),
  comment_id   text NOT NULL,
  type         text NOT NULL CONSTRAINT comment_changes_type_check
                 CHECK (type IN ('created', 'edited', 'hidden', 'unhidden', 'deleted', 'replied')),
  actor_type   text NOT NULL CONSTRAINT comment_changes_actor_type_check
                 CHECK (actor_type IN ('platform', 'client', 'user', 'rule')),
  actor_id     text CONSTRAINT comment_changes_actor_id_check CHECK ((actor_type = 'platform') = (actor_id IS NULL)),
  changed_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  comment      jsonb NOT NULL,
  sequence     bigint,
  -- comments' key names its company (0028).
  CONSTRAINT comment_changes_comment_id_fkey FOREIGN KEY (comment_id, company_id) REFERENCES comments (id, company_id)
) PARTITION BY RANGE (changed_at);

DO $$
DECLARE
  t record;
  today date := (now() AT TIME ZONE 'UTC')::date;
  first date;
  d date;
BEGIN
  FOR t IN SELECT * FROM (VALUES ('events', 'created_at'), ('webhook_deliveries', 'created_at'),
      ('meta_webhook_deliveries', 'received_at'), ('comment_changes', 'changed_at')) AS v (name, col) LOOP
    EXECUTE format('SELECT (min(%I) AT TIME ZONE ''UTC'')::date FROM %I', t.col, t.name) INTO first;
    first := least(coalesce(first, today), today);
    FOR d IN SELECT g::date FROM generate_series(first, today + 3, interval '1 day') AS g LOOP
      EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
        t.name || '_p' || to_char(d, 'YYYYMMDD'), t.name || '_new', d || ' 00:00:00+00', (d + 1) || ' 00:00:00+00');
    END LOOP;
    EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', t.name || '_default', t.name || '_new');
  END LOOP;
END $$;

INSERT INTO events_new (id, company_id, environment, client_id, type, data, created_at, body)
  SELECT id, company_id, environment, client_id, type, data, created_at, body FROM events;
INSERT INTO webhook_deliveries_new (id, event_id, client_id, company_id, environment, attempt, url, outcome,
    status_code, error, duration_ms, next_retry_at, created_at)
  SELECT id, event_id, client_id, company_id, environment, attempt, url, outcome,
         status_code, error, duration_ms, next_retry_at, created_at FROM webhook_deliveries;
INSERT INTO meta_webhook_deliveries_new (id, body, received_at, processed_at, error, result) OVERRIDING SYSTEM VALUE
  SELECT id, body, received_at, processed_at, error, result FROM meta_webhook_deliveries;
INSERT INTO comment_changes_new (id, company_id, environment, comment_id, type, actor_type, actor_id, changed_at,
    comment, sequence) OVERRIDING SYSTEM VALUE
  SELECT id, company_id, environment, comment_id, type, actor_type, actor_id, changed_at, comment, sequence
    FROM comment_changes;

-- Ids go on from where the old sequences were, not from the highest id kept:
-- the change feed numbers changes in id order, and a reused id would sort a
-- new change before one handed out earlier.
SELECT setval(pg_get_serial_sequence('meta_webhook_deliveries_new', 'id'), last_value, is_called)
  FROM meta_webhook_deliveries_id_seq;
SELECT setval(pg_get_serial_sequence('comment_changes_new', 'id'), last_value, is_called)
  FROM comment_changes_id_seq;
ALTER SEQUENCE webhook_deliveries_id_seq OWNED BY webhook_deliveries_new.id;

DROP TABLE webhook_deliveries, events, meta_webhook_deliveries, comment_changes;
ALTER TABLE events_new RENAME TO events;
ALTER TABLE webhook_deliveries_new RENAME TO webhook_deliveries;
ALTER TABLE meta_webhook_deliveries_new RENAME TO meta_webhook_deliveries;
ALTER TABLE comment_changes_new RENAME TO comment_changes;
ALTER SEQUENCE meta_webhook_deliveries_new_id_seq RENAME TO meta_webhook_deliveries_id_seq;
ALTER SEQUENCE comment_changes_new_id_seq RENAME TO comment_changes_id_seq;

-- The indexes the tables had, on every partition.
ALTER TABLE events ADD PRIMARY KEY (id, created_at);
CREATE INDEX events_client ON events (client_id, created_at);
CREATE INDEX events_created ON events (created_at);

ALTER TABLE webhook_deliveries ADD PRIMARY KEY (id, created_at);
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id, attempt);
CREATE INDEX webhook_deliveries_client ON webhook_deliveries (client_id, created_at);

ALTER TABLE meta_webhook_deliveries ADD PRIMARY KEY (id, received_at);
CREATE INDEX meta_webhook_deliveries_unprocessed ON meta_webhook_deliveries (received_at) WHERE processed_at IS NULL;
CREATE INDEX meta_webhook_deliveries_processed ON meta_webhook_deliveries (received_at) WHERE processed_at IS NOT NULL;

-- comment_changes_feed can no longer be unique on (company, environment,
-- sequence) without changed_at; the numbering hands each sequence out once
-- under its per company and environment lock (lib/comment_changes.lua).
ALTER TABLE comment_changes ADD PRIMARY KEY (id, changed_at);
CREATE INDEX comment_changes_feed ON comment_changes (company_id, environment, sequence) WHERE sequence IS NOT NULL;
CREATE INDEX comment_changes_unnumbered ON comment_changes (company_id, environment, id) WHERE sequence IS NULL;
CREATE INDEX comment_changes_age ON comment_changes (changed_at) WHERE sequence IS NOT NULL;

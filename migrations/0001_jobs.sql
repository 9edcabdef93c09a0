-- The durable job queue run by the host's job workers (host/jobs.c), and the
-- slots that make each timer of handlers/timers.lua fire once per interval
-- across every instance.

CREATE TABLE jobs (
    id           bigserial   PRIMARY KEY,
    kind         text        NOT NULL,
    payload      jsonb       NOT NULL DEFAULT '{}',
    run_at       timestamptz NOT NULL DEFAULT now(),
    attempts     integer     NOT NULL DEFAULT 0,
    max_attempts integer     NOT NULL DEFAULT 10,
    status       text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'dead')),
    locked_by    text,
    locked_until timestamptz,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- What the claim query scans: pending jobs in the order they fall due.
CREATE INDEX jobs_due ON jobs (run_at, id) WHERE status = 'pending';

-- Dead jobs are few and looked at by people (and counted for /metrics).
CREATE INDEX jobs_dead ON jobs (id) WHERE status = 'dead';

CREATE TABLE timer_runs (
    name       text        NOT NULL,
    slot       bigint      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, slot)
);

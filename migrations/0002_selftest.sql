-- Outcomes of the host's self-test job (handlers/jobs/selftest_fetch.lua),
-- which the integration specs use to watch the job runner work. One row per
-- run of a job, so retries show up as more rows.

CREATE TABLE job_selftest_results (
    id         bigserial   PRIMARY KEY,
    job_id     bigint      NOT NULL,
    attempt    integer     NOT NULL,
    status     integer,
    error      text,
    kind       text,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX job_selftest_results_job ON job_selftest_results (job_id);

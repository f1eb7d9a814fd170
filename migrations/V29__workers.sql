-- Issue 24: the console's workers page. One row per `baton up` process,
-- inserted when it starts, heartbeated every `beat_secs` (one UPDATE of
-- this row, never on a hop's path), stopped on a graceful shutdown. A
-- process whose heartbeat is older than a few beats is gone (killed, or cut
-- off from the database); gone and stopped rows are pruned after a day.
-- What a process holds is a join on `invocations.lease_owner = worker_id`,
-- not a write of its own.
CREATE TABLE fleet_workers (
    id            uuid PRIMARY KEY,
    worker_id     text NOT NULL,
    roles         text[] NOT NULL,
    version       text NOT NULL,
    host          text NOT NULL,
    pid           integer NOT NULL,
    beat_secs     float8 NOT NULL CHECK (beat_secs > 0),
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    stopped_at    timestamptz
);
CREATE INDEX fleet_workers_by_worker ON fleet_workers (worker_id);
-- No index on invocations for it: the page reads the running ones through
-- `invocations_live`, and a hop writes no more index entries than before.

-- The navigation's Waiting badge on every console page: `manual` handoffs
-- nobody has taken and open questions, read through small partial indexes.
-- Neither names a column a hop updates that no index named before
-- (`target_agent` never changes; `run_id` and `reply_sent_at` are in
-- `handoff_requests_unreplied`'s predicate already), so no hop loses a
-- heap-only update; only a `manual` request or a question adds an entry.
CREATE INDEX handoff_requests_manual_open ON handoff_requests (created_at)
    WHERE target_agent = 'manual' AND run_id IS NULL AND reply_sent_at IS NULL;
CREATE INDEX questions_open ON questions (created_at) WHERE state = 'open';

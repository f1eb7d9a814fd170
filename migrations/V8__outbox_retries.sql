-- A message that cannot be published now waits in the outbox on its own
-- schedule instead of holding up every row behind it.
ALTER TABLE outbox
    ADD COLUMN attempts        integer NOT NULL DEFAULT 0,       -- publishes tried and refused (nack, channel error)
    ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN last_error      text;
-- Rows waiting for a retry, looked up so that a later message of the same
-- handoff does not overtake them.
CREATE INDEX outbox_waiting ON outbox (correlation_id, id) WHERE attempts > 0;

-- The sweeps re-publish with backoff: how often a row was re-published, and
-- (for runs) when last.
ALTER TABLE invocations ADD COLUMN republish_count integer NOT NULL DEFAULT 0;
ALTER TABLE runs
    ADD COLUMN republished_at  timestamptz,
    ADD COLUMN republish_count integer NOT NULL DEFAULT 0;

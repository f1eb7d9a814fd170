-- Takeovers are counted apart from ordinary claims (a wake-up or a graceful
-- hand-back is not a crash), results remember whether the parent has read
-- them, and the lookups on the delegation path get their indexes.

ALTER TABLE invocations ADD COLUMN takeovers integer NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN delivered boolean NOT NULL DEFAULT false;

CREATE INDEX tasks_by_run ON tasks (run_id, created_at);
CREATE INDEX tasks_by_parent ON tasks (parent_invocation_id, created_at);
CREATE INDEX tasks_by_child ON tasks (child_invocation_id);
DROP INDEX tasks_by_run_unfinished;

-- Woken parents whose wake-up message was missed are swept like stalled work.
DROP INDEX invocations_live;
CREATE INDEX invocations_live ON invocations (lease_expires_at)
    WHERE status IN ('created', 'running') OR (status = 'parked' AND woken);

-- Finished runs whose reply is not yet written, for the relay's sweep.
CREATE INDEX handoff_requests_unreplied ON handoff_requests (run_id)
    WHERE reply_sent_at IS NULL AND run_id IS NOT NULL;

-- Delegation: budgets, parked parents, and task results.

ALTER TABLE invocations
    ADD COLUMN budget      jsonb,               -- a child's narrowed limits
    ADD COLUMN deadline_at timestamptz,         -- a child's wall-clock deadline
    ADD COLUMN tokens_used bigint NOT NULL DEFAULT 0,
    ADD COLUMN await_spec  jsonb,               -- what a parked parent waits for
    ADD COLUMN wake_at     timestamptz,         -- when a parked parent's wait times out
    ADD COLUMN woken       boolean NOT NULL DEFAULT false;

-- The relay finds parked parents whose wait timed out without scanning history.
CREATE INDEX invocations_parked ON invocations (wake_at) WHERE status = 'parked';
CREATE INDEX invocations_by_parent ON invocations (parent_invocation_id) WHERE kind = 'child';

ALTER TABLE tasks ADD COLUMN result jsonb;
CREATE INDEX tasks_by_run_unfinished ON tasks (run_id) WHERE status IN ('queued', 'running');

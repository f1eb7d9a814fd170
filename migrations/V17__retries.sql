-- Issue 11: retried runs and the operator's views.
-- A run's attempt: 1, then 2, 3 … for each `baton runs retry`; the bridge's
-- reply of attempt n >= 2 has the message id `reply:<handoffId>:<n>`.
ALTER TABLE runs ADD COLUMN attempt integer NOT NULL DEFAULT 1;
-- When an invocation was last taken over (its worker died or stalled): the fleet view counts the last hour.
ALTER TABLE invocations ADD COLUMN taken_over_at timestamptz;
-- The runs list: newest first, paged by (created_at, id).
CREATE INDEX runs_by_created ON runs (created_at DESC, id DESC);

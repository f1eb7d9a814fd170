-- Run budgets. The limits resolved at intake are copied onto the run, so a
-- later `profiles apply` does not change a run under way. What the run
-- spends is counted on each invocation's own row, in the transaction of the
-- step that spends it (that row is already locked by the step's fence, so
-- counting adds no lock), and summed per run like `tokens_used`. A run
-- without a budget (started before this migration, or a manual one) is held
-- to the built-in defaults.
ALTER TABLE runs ADD COLUMN budget jsonb;
ALTER TABLE invocations
    ADD COLUMN model_calls integer NOT NULL DEFAULT 0,
    ADD COLUMN tool_calls integer NOT NULL DEFAULT 0;

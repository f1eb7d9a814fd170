-- Run budgets: the limits resolved at intake are copied onto the run (so a
-- later `profiles apply` does not change a run under way), and what the run
-- has spent is counted on the same row, in the transaction of the step that
-- spends it. A run without a budget (started before this migration, or a
-- manual one) is held to the built-in defaults.
ALTER TABLE runs
    ADD COLUMN budget jsonb,
    ADD COLUMN spent_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN spent_model_calls bigint NOT NULL DEFAULT 0,
    ADD COLUMN spent_tool_calls bigint NOT NULL DEFAULT 0;

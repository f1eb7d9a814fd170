-- Issue 23, the lean hop: a run's spend is not summed over every invocation
-- of the run at each claim and step (it grew with the run's length).
-- A foreground owner carries what the run spent before it (`run_spent_*`:
-- its predecessors and their delegated children, all ended when it was
-- handed the run, since a handoff waits for its caller's children); the
-- run's spend is that, plus the owner's own, plus its children's (an
-- index probe on `invocations_by_parent`). A child reads its parent's.
ALTER TABLE invocations
    ADD COLUMN run_spent_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN run_spent_model_calls bigint NOT NULL DEFAULT 0,
    ADD COLUMN run_spent_tool_calls bigint NOT NULL DEFAULT 0;

-- Live owners carry what their run spent outside them and their children.
UPDATE invocations o
   SET run_spent_tokens = s.tokens, run_spent_model_calls = s.model_calls, run_spent_tool_calls = s.tool_calls
  FROM (SELECT o.id,
               coalesce(sum(i.tokens_used), 0) AS tokens,
               coalesce(sum(i.model_calls), 0) AS model_calls,
               coalesce(sum(i.tool_calls), 0) AS tool_calls
          FROM invocations o
          JOIN invocations i ON i.run_id = o.run_id AND i.id <> o.id
                            AND NOT (i.kind = 'child' AND i.parent_invocation_id = o.id)
         WHERE o.kind IN ('root', 'handoff') AND o.status IN ('created', 'running', 'parked')
         GROUP BY o.id) s
 WHERE o.id = s.id;

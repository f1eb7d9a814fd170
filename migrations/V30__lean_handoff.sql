-- Issue 23, the lean hop: a handoff writes the successor's invocation row
-- and nothing beside it that only repeats it.
--
-- 1. A handoff stage has no `tasks` row. Its task (the brief the agent gave
--    `agent_handoff`) travels as the successor's `handoff` column, and its
--    status is the successor's own: registered with it, started by its
--    first claim, completed when it hands off or finishes, failed or
--    cancelled with it. The journal records each of those events as before
--    (`agent_task_registered`, `_started`, `_completed` …, with a `taskId`
--    that names the stage's task and is kept in `incoming_task_id`). A row
--    inserted and updated twice per hop, with four indexes and three
--    foreign keys, said nothing the invocation does not. Delegated tasks
--    keep their rows: a parent reads their status, results and budgets.
-- 2. The rendered handoff brief is not stored: `brief` is NULL for a
--    handoff stage and the brief is rendered from `handoff` when the row is
--    read (a pure function of it, `render_handoff_brief`). The row, written
--    three times per hop (created, claimed, ended), is a third of its size.
-- 3. The run's handoff count travels on the foreground owner (`handoffs`:
--    the handoffs before it), so a handoff no longer updates its run's row;
--    `runs.handoff_count` is set once, when the run ends.
-- 4. `session_id` (a stored copy of run_id:id, read by nothing) is dropped.
-- 5. An invocation's foreign keys to its run and its parent go, as the
--    journal's and the transcript's did (V28): the one writer of a new
--    invocation (`invocations::spawn`) writes it in the transaction that
--    creates its run (intake) or under its parent's fenced row lock (a
--    handoff, a delegation), so the keys checked nothing the code does not
--    already guarantee, and each check took a share lock on the run's row
--    (a WAL record per hop); retention deletes a run's invocations with it.
ALTER TABLE invocations DROP CONSTRAINT invocations_incoming_task;
ALTER TABLE invocations DROP COLUMN session_id;
ALTER TABLE invocations DROP CONSTRAINT invocations_run_id_fkey;
ALTER TABLE invocations DROP CONSTRAINT invocations_parent_invocation_id_fkey;
ALTER TABLE invocations ALTER COLUMN brief DROP NOT NULL;
ALTER TABLE invocations ADD COLUMN handoff jsonb;
ALTER TABLE invocations ADD COLUMN handoffs integer NOT NULL DEFAULT 0;
ALTER TABLE invocations ADD CONSTRAINT invocations_brief
    CHECK (brief IS NOT NULL OR jsonb_typeof(handoff) = 'object');

-- Live owners carry their run's count from now on.
UPDATE invocations i SET handoffs = r.handoff_count
  FROM runs r
 WHERE r.id = i.run_id AND i.kind IN ('root', 'handoff') AND i.status IN ('created', 'running', 'parked');

-- Existing handoff stages keep their rendered brief; their task rows, which
-- nothing reads any more, go (their events stay in the journal).
DELETE FROM tasks WHERE continuation = 'transfer_control';

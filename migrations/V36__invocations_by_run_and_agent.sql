-- Issue 23, the lean hop: a handoff reads how many tasks the run gave its
-- target's agent before (the new task's readable workspace key) with
-- `count(*) ... WHERE run_id = $1 AND profile_id = $2`. Through an index on
-- (run_id, created_at) that count read every invocation of the run, at
-- every handoff: a cost that grew with the run's length. Keyed on the run
-- and the agent instead, it reads only that agent's invocations of the run
-- (none or a few). Every other reader of a run's invocations reads them by
-- `run_id` alone, which this index serves as the old one did (the few that
-- order them by creation sort a run's rows). An entry is as large as before
-- (a short agent id in place of a timestamp), so a hop writes no more WAL.
DROP INDEX invocations_by_run;
CREATE INDEX invocations_by_run ON invocations (run_id, profile_id);

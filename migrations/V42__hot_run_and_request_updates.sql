-- Issue 23, the lean hop: a run's end and a request's start are HOT updates.
--
-- An update that changes no indexed column (key or predicate) and finds
-- room on its page is a HOT update: the new version needs no index entry,
-- and its WAL record carries only the bytes that changed. Two updates of
-- every request were not:
--
-- - A run's end (status, finished_at, its final text) moved the row into
--   `runs_finished`, so it wrote a new entry in each of the table's four
--   indexes. Retention now finds old runs through `runs_by_created` (a run
--   finishes after it was created, so every run finished before the cutoff
--   was created before it), and the table leaves room on each page for the
--   row's one update.
-- - Intake's update of a request (its status and run) moved the row into
--   `handoff_requests_unreplied` (keyed on `run_id`), and `manual_open`
--   read `run_id` too. One index of the requests not replied to yet, by
--   age, serves the sweep of unanswered runs and the manual desk: a
--   request enters it when it is stored and leaves it when it is replied
--   to, an update that is not HOT anyway (it enters `to_prune`).
--
-- The foreign keys from a run's workspace files and commits to their run
-- and invocation go, as the invocations' did (V30): only the fenced step
-- code writes those rows, for the invocation whose claim it holds, and
-- retention deletes them before their run. Each check took a share lock on
-- the run's or invocation's row, a WAL record of its own.
DROP INDEX runs_finished;
ALTER TABLE runs SET (fillfactor = 70);

DROP INDEX handoff_requests_unreplied;
DROP INDEX handoff_requests_manual_open;
CREATE INDEX handoff_requests_open ON handoff_requests (created_at) WHERE reply_sent_at IS NULL;

ALTER TABLE workspace_files DROP CONSTRAINT workspace_files_run_id_fkey;
ALTER TABLE commits DROP CONSTRAINT commits_run_id_fkey;
ALTER TABLE commits DROP CONSTRAINT commits_invocation_id_fkey;

-- Issue 23, the lean hop: an agent may replace or patch a file only after
-- reading its current version, and its own write counts as such a read.
-- That knowledge was a `workspace_reads` row written with every write: a
-- row per write that only said "the writer has seen what it wrote". The
-- file now names the invocation that wrote its current version; the writer
-- passes the check through that name, and a read mark is written only when
-- another writer replaces the file (the earlier writer's knowledge, kept so
-- that its next write is told the file is stale rather than unread).
-- Host writes (a delegated task's returned file) name no invocation.
ALTER TABLE workspace_files ADD COLUMN written_by uuid;

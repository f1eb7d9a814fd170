-- Issue 23, the lean hop: a bridge message is written pending and updated
-- once, when it is sent (V38). That update cannot be a HOT update (it takes
-- the row out of `bridge_messages_pending`), so it writes a new version of
-- the row and new index entries. Two changes make it smaller:
--
-- - Room on each page for every row's one update (fillfactor 50, as for
--   `invocations`): the new version lands beside the old, and its WAL record
--   carries only the bytes that changed, not the whole message again.
-- - The index by handoff holds sent messages only: a pending message is
--   found by handoff through `bridge_messages_pending`, so its insert writes
--   one index entry fewer. Readers by handoff read both (`sent::for_handoff`).
ALTER TABLE bridge_messages SET (fillfactor = 50);
DROP INDEX bridge_messages_by_handoff;
CREATE INDEX bridge_messages_by_handoff ON bridge_messages (handoff_id, id) WHERE NOT pending;

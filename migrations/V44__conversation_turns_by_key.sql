-- Issue 23, the lean hop: giving a chat's turn to a run and taking it back
-- are HOT updates.
--
-- `conversations.live_run` was indexed (unique) so that a run's end could
-- find the conversation it held, and a deferred foreign key checked it at
-- each commit that set it (a share lock on the run's row, a WAL record of
-- its own). Each of the two updates of a request's conversation (its run
-- takes the turn, its end gives it back) therefore wrote a new entry in
-- both indexes. A run now keeps its request's conversation key
-- (`runs.conversation_key`, written with the run), and its end finds the
-- conversation by that key, through the primary key.
--
-- Nothing else needed the index or the key: a run holds at most one chat's
-- turn because only its start gives it one, and a turn that names a run
-- no longer running is free (`conversations::lock`, retention), so a
-- deleted run leaves nothing to clean up.
ALTER TABLE runs ADD COLUMN conversation_key text;
UPDATE runs r SET conversation_key = c.key FROM conversations c WHERE c.live_run = r.id;
ALTER TABLE conversations DROP CONSTRAINT conversations_live_run_fkey;
ALTER TABLE conversations DROP CONSTRAINT conversations_live_run_key;
ALTER TABLE conversations SET (fillfactor = 70);

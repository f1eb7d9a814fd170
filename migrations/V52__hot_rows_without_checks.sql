-- Issue 23, the lean hop: Postgres 15 parses a CHECK constraint from its
-- text at every statement that writes its table (ExecRelCheck reads
-- `ccbin` with stringToNode, then compiles it), which a perf profile of the
-- end-to-end bench put among the server's busiest functions. The tables
-- below are written several times per hop, only by the store's own
-- statements, whose shapes the tests hold (tests/shape.rs, the journal's
-- and transcript's readers): the checks are dropped, as V30 dropped the
-- invocations' foreign keys.
ALTER TABLE runs DROP CONSTRAINT runs_priority_check;
ALTER TABLE invocations DROP CONSTRAINT invocations_brief;
ALTER TABLE bridge_messages DROP CONSTRAINT bridge_messages_journal_check;
ALTER TABLE bridge_messages DROP CONSTRAINT bridge_messages_body_or_status;
ALTER TABLE bridge_messages DROP CONSTRAINT bridge_messages_then_after_status;
ALTER TABLE bridge_messages DROP CONSTRAINT bridge_messages_log_check;
ALTER TABLE journal DROP CONSTRAINT journal_check;
ALTER TABLE transcript DROP CONSTRAINT transcript_check;
ALTER TABLE handoff_log DROP CONSTRAINT handoff_log_check;

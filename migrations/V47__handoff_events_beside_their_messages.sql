-- Issue 23, the lean hop: the handoff events a statement records go in the
-- row of the bridge messages the same statement writes, when it writes any.
--
-- Intake's statement and a run's end each wrote a `handoff_log` row (its
-- events: `created` … `status_changed`, then `status_changed`,
-- `result_received`, `reply_sent`) beside the `bridge_messages` row of the
-- messages that report them (V46): two rows with their own tuple header,
-- key and index entry (about 410 bytes of WAL each). The events now travel
-- as three more arrays of that row (`log_types`, `log_statuses`,
-- `log_messages`, the columns of a `handoff_log` row), at its end, so the
-- row's one update (marked sent) leaves them out of its WAL record. A
-- statement that writes events and no message, and every other writer of
-- events, still writes a `handoff_log` row.
--
-- The view `handoff_events` reads both, in one order: both tables now take
-- their ids from the outbox's sequence (bridge messages already did), set
-- past every id either has handed out, so an event's id still orders it
-- among its handoff's events.
ALTER TABLE bridge_messages
    ADD COLUMN log_types text[],
    ADD COLUMN log_statuses text[],
    ADD COLUMN log_messages text[],
    ADD CONSTRAINT bridge_messages_log_check
        CHECK (log_types IS NULL
               OR (log_statuses IS NOT NULL AND log_messages IS NOT NULL
                   AND cardinality(log_types) BETWEEN 1 AND 4096
                   AND cardinality(log_statuses) = cardinality(log_types)
                   AND cardinality(log_messages) = cardinality(log_types))) NOT VALID;

ALTER TABLE handoff_log ALTER COLUMN id DROP IDENTITY IF EXISTS;
ALTER TABLE handoff_log ALTER COLUMN id SET DEFAULT nextval('outbox_id_seq');
SELECT setval('outbox_id_seq', greatest((SELECT last_value FROM outbox_id_seq),
                                        (SELECT coalesce(max(id), 0) FROM handoff_log)) + 1, false);

-- Each branch reads a handoff's events through its own index
-- (`bridge_messages` keeps its pending and its sent rows apart, V40).
CREATE OR REPLACE VIEW handoff_events AS
SELECT l.id * 4096 + e.n AS id, l.handoff_id, e.type, e.status, e.message, '{}'::jsonb AS metadata, l.created_at
  FROM handoff_log l,
       unnest(l.types, l.statuses, l.messages) WITH ORDINALITY AS e(type, status, message, n)
UNION ALL
SELECT b.id * 4096 + e.n, b.handoff_id, e.type, e.status, e.message, '{}'::jsonb, b.created_at
  FROM bridge_messages b,
       unnest(b.log_types, b.log_statuses, b.log_messages) WITH ORDINALITY AS e(type, status, message, n)
 WHERE b.log_types IS NOT NULL AND (b.pending OR NOT b.pending);

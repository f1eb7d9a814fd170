-- Issue 23, the lean hop: a row of `bridge_messages` holds every message one
-- statement writes for a request, not one row each.
--
-- A request's four bridge messages come from two statements, two each:
-- intake's `accepted` and `running`, and its end's final status and reply.
-- Each row costs its insert, its update when the broker confirms it (marked
-- sent), and two entries in the partial indexes (pending, then sent): about
-- 530 bytes of WAL for a status. A row now holds, in order:
--   1. a status (`status`, `seq`), if any;
--   2. a second status right after it (`then_status`, number `seq + 1`);
--   3. a message with a body (`message_id`, `body`): the reply, a question.
-- Its writer and the relay publish a row's messages in that order, each only
-- once the one before it was confirmed, and mark the row sent once its last
-- one is (`outbox::Row::part`). A row refused half-way keeps how many of its
-- messages left (`sent_parts`, NULL for none) and is published again from
-- the next one: a full bridge queue that takes one message between retries
-- still gets each once.
--
-- Rows written before hold one message each and are read as they are.
ALTER TABLE bridge_messages
    ADD COLUMN then_status text,
    ADD COLUMN sent_parts smallint,
    ADD CONSTRAINT bridge_messages_then_after_status
        CHECK (then_status IS NULL OR (status IS NOT NULL AND seq IS NOT NULL)) NOT VALID;

-- The backlog operators watch counts messages, as before: a row of two
-- unsent messages is two (a row holds three at most).
CREATE OR REPLACE VIEW unsent_messages AS
    SELECT id, queue, created_at, attempts, next_attempt_at, last_error FROM outbox
    UNION ALL
    SELECT b.id, b.queue, b.created_at, b.attempts, b.next_attempt_at, b.last_error
      FROM bridge_messages b
     CROSS JOIN (VALUES (1), (2), (3)) AS message(n)
     WHERE b.pending
       AND message.n <= (b.status IS NOT NULL)::int + (b.then_status IS NOT NULL)::int + (b.body IS NOT NULL)::int
                        - coalesce(b.sent_parts, 0);

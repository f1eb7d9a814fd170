-- Issue 23, the lean hop: a message to a bridge was written three times, as
-- an outbox row, as its copy for operators in `bridge_messages`, and as the
-- outbox row's deletion once the broker confirmed it. Four such messages
-- (accepted, running, completed, the reply) were a third of a request's row
-- writes and a quarter of its WAL. A bridge message is now written once, in
-- `bridge_messages`, pending until the broker confirms it; the confirm
-- marks it sent (`pending = false`) rather than deleting a row. The outbox
-- keeps the fleet's own messages, which are kept nowhere after they leave.
--
-- Both tables take their ids from the outbox's sequence, so an id names one
-- message row in either: the publishers' code settles a list of ids without
-- saying which table each is in.
ALTER TABLE bridge_messages
    ADD COLUMN pending         boolean NOT NULL DEFAULT false,
    ADD COLUMN external        boolean NOT NULL DEFAULT false,
    ADD COLUMN mandatory       boolean NOT NULL DEFAULT true,
    ADD COLUMN attempts        integer NOT NULL DEFAULT 0,
    ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN last_error      text,
    ADD COLUMN traceparent     text,
    ADD COLUMN tracestate      text;

SELECT setval('outbox_id_seq', greatest(
    (SELECT last_value FROM outbox_id_seq),
    (SELECT coalesce(max(id), 1) FROM outbox),
    (SELECT coalesce(max(id), 1) FROM bridge_messages)));
ALTER TABLE bridge_messages ALTER COLUMN id SET DEFAULT nextval('outbox_id_seq');
DROP SEQUENCE bridge_messages_id_seq;

-- A bridge message still queued in the outbox moves to its copy (the copy
-- takes a new id, still after every earlier message of its handoff), in
-- the order they were queued. The queued rows of one handoff and message
-- id are the newest copies of that id, in order (each queued row was
-- written with its copy); a queued row with no copy left (written before
-- V18, or pruned) becomes a new row.
DO $$
DECLARE
    m record;
BEGIN
    FOR m IN
        WITH q AS (SELECT o.*, row_number() OVER (PARTITION BY o.correlation_id, o.message_id ORDER BY o.id DESC) AS k
                     FROM outbox o WHERE o.correlation_id IS NOT NULL),
             c AS (SELECT b.id AS copy, b.handoff_id, b.message_id,
                          row_number() OVER (PARTITION BY b.handoff_id, b.message_id ORDER BY b.id DESC) AS k
                     FROM bridge_messages b)
        SELECT q.*, c.copy FROM q
          LEFT JOIN c ON c.handoff_id = q.correlation_id AND c.message_id IS NOT DISTINCT FROM q.message_id AND c.k = q.k
         ORDER BY q.id
    LOOP
        IF m.copy IS NOT NULL THEN
            UPDATE bridge_messages
               SET id = nextval('outbox_id_seq'), pending = true, external = m.external, mandatory = m.mandatory,
                   attempts = m.attempts, next_attempt_at = m.next_attempt_at, last_error = m.last_error,
                   traceparent = m.traceparent, tracestate = m.tracestate
             WHERE id = m.copy;
        ELSE
            INSERT INTO bridge_messages (handoff_id, message_id, queue, body, created_at, pending, external, mandatory,
                                         attempts, next_attempt_at, last_error, traceparent, tracestate)
            VALUES (m.correlation_id, m.message_id, m.queue, m.body, m.created_at, true, m.external, m.mandatory,
                    m.attempts, m.next_attempt_at, m.last_error, m.traceparent, m.tracestate);
        END IF;
        DELETE FROM outbox WHERE id = m.id;
    END LOOP;
END $$;

-- The pending messages of a handoff, oldest first: what the relay and the
-- publishers take (each only once no earlier one of its handoff is left).
-- A row leaves this index when it is sent.
CREATE INDEX bridge_messages_pending ON bridge_messages (handoff_id, id) WHERE pending;
-- Room for a message's "sent" version beside it on its page.
ALTER TABLE bridge_messages SET (fillfactor = 90);

-- A message due at once (not left to the process that wrote it) wakes the
-- relay, as an outbox row does.
CREATE TRIGGER bridge_messages_notify AFTER INSERT ON bridge_messages
    FOR EACH ROW WHEN (NEW.pending AND NEW.next_attempt_at <= NEW.created_at)
    EXECUTE FUNCTION notify_outbox();

-- Every message not yet sent, in either table: the backlog operators watch.
CREATE VIEW unsent_messages AS
    SELECT id, queue, created_at, attempts, next_attempt_at, last_error FROM outbox
    UNION ALL
    SELECT id, queue, created_at, attempts, next_attempt_at, last_error FROM bridge_messages WHERE pending;

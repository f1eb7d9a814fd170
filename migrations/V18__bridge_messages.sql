-- Every message queued for a bridge (statuses, questions, the reply), kept
-- as it was queued so an operator sees exactly what the bridge was sent
-- (the outbox row itself is deleted once the broker confirms it).
CREATE TABLE bridge_messages (
    id         bigserial PRIMARY KEY,
    handoff_id text NOT NULL,
    message_id text,
    queue      text NOT NULL,
    body       jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bridge_messages_by_handoff ON bridge_messages (handoff_id, id);

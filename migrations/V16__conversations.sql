-- A bridge's cancels (CONTRACT §6), kept by their own id so each is applied
-- once: to its handoff at once, or, when the request has not arrived yet
-- (queues do not order across publishers), when it does. Cancels that never
-- meet a request are dropped after a week (see conversations::prune_cancels).
CREATE TABLE bridge_cancels (
    id          text PRIMARY KEY,
    handoff_id  text NOT NULL,
    reason      text,
    sent_at     text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    applied_at  timestamptz
);
CREATE INDEX bridge_cancels_by_handoff ON bridge_cancels (handoff_id);
CREATE INDEX bridge_cancels_by_age ON bridge_cancels (received_at);

-- One row per conversation (a chat, or a bridge's conversationKey). Its row
-- lock orders intake and run ends, with any number of workers; live_run is
-- the run whose turn it is.
CREATE TABLE conversations (
    key        text PRIMARY KEY,
    live_run   uuid UNIQUE REFERENCES runs(id) ON DELETE SET NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Requests waiting for their conversation's turn, oldest first. A request
-- waits here with status `accepted` and no run.
CREATE TABLE conversation_queue (
    seq        bigserial PRIMARY KEY,
    key        text NOT NULL REFERENCES conversations(key),
    handoff_id text NOT NULL UNIQUE REFERENCES handoff_requests(id) ON DELETE CASCADE
);
CREATE INDEX conversation_queue_by_key ON conversation_queue (key, seq);

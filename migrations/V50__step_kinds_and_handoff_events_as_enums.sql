-- Issue 23, the lean hop: a transcript row's step kinds and a bridge
-- message row's handoff events are arrays of enums, as a journal row's
-- event types are (V33).
--
-- In an array each text value takes a four-byte header and is padded to
-- four bytes; an enum value is four bytes. A request's bridge rows name six
-- events and four statuses in the first and three and two in the second,
-- and each of its steps names two to five kinds: about 290 bytes of every
-- request's rows and WAL. Readers still read text (the views cast).
--
-- The types hold every value the code can write (tests/events_docs.rs
-- checks them against `HandoffEvent`, `HandoffStatus` and the transcript's
-- kinds); a new one comes with a migration that adds it. Both tables are
-- rewritten (the fleet is stopped for it, as for V37-V49). `handoff_log`
-- keeps text: only events without a message of their own go there.
CREATE TYPE step_kind AS ENUM ('prompt', 'model_turn', 'tool_result', 'nudge', 'external_started');

CREATE TYPE handoff_event AS ENUM (
    'created', 'context_packaged', 'sent', 'accepted', 'status_changed', 'question_sent', 'answer_received',
    'answer_duplicate', 'answer_ignored', 'operator_answered', 'cancel_received', 'cancel_duplicate',
    'cancel_ignored', 'queued', 'result_received', 'failed', 'cancelled', 'reply_sent', 'disclosure_filtered',
    'dead_letter_recovered', 'invalid_redelivery', 'conflicting_duplicate', 'callback_failed', 'message_cut',
    'delivery_delayed', 'delivery_failed', 'run_retried');

CREATE TYPE handoff_status AS ENUM (
    'draft', 'requested', 'accepted', 'running', 'blocked', 'completed', 'failed', 'cancelled');

DROP VIEW steps;
DROP VIEW handoff_events;

ALTER TABLE transcript ALTER COLUMN kinds TYPE step_kind[] USING kinds::text[]::step_kind[];

ALTER TABLE bridge_messages
    ALTER COLUMN log_types TYPE handoff_event[] USING log_types::handoff_event[],
    ALTER COLUMN log_statuses TYPE handoff_status[] USING log_statuses::handoff_status[];

-- As V35's and V47's, with the kinds, types and statuses read as text.
CREATE VIEW steps AS
SELECT t.invocation_id, t.seq + s.n::integer - 1 AS seq, s.kind::text AS kind, s.payload::jsonb AS payload,
       t.created_at, t.xmin AS tx
  FROM transcript t,
       ROWS FROM (unnest(t.kinds), json_array_elements(t.payloads)) WITH ORDINALITY AS s(kind, payload, n);

CREATE VIEW handoff_events AS
SELECT l.id * 4096 + e.n AS id, l.handoff_id, e.type, e.status, e.message, '{}'::jsonb AS metadata, l.created_at
  FROM handoff_log l,
       unnest(l.types, l.statuses, l.messages) WITH ORDINALITY AS e(type, status, message, n)
UNION ALL
SELECT b.id * 4096 + e.n, b.handoff_id, e.type::text, e.status::text, e.message, '{}'::jsonb, b.created_at
  FROM bridge_messages b,
       unnest(b.log_types, b.log_statuses, b.log_messages) WITH ORDINALITY AS e(type, status, message, n)
 WHERE b.log_types IS NOT NULL AND (b.pending OR NOT b.pending);

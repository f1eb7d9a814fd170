-- Issue 23, the lean hop: a journal row (the events one statement appends,
-- V28) is about a third smaller.
--
-- 1. An event's type is a value of the enum `journal_event` (4 bytes), not
--    its name (25 on average): a hop's row names 13 or 14 of them. The
--    `events` view still reads the name. An event a later version adds
--    is added here by its migration (`ALTER TYPE … ADD VALUE`); a test
--    holds this list to `JournalEvent::ALL`.
-- 2. The invocation most of a row's events concern is the row's own
--    `invocation_id`; in `invocations` such an event has NULL (an array
--    keeps only a bit for it), one about no invocation the nil uuid, any
--    other its id. Rows written before keep NULL for "no invocation", with
--    no row invocation, and read as before.
CREATE TYPE journal_event AS ENUM (
    'run_created',
    'profile_resolved',
    'run_completed',
    'run_failed',
    'run_cancelled',
    'run_retried',
    'workspace_initialized',
    'context_assembled',
    'skill_scopes_resolved',
    'agent_model_binding_resolved',
    'agent_invocation_created',
    'agent_invocation_started',
    'agent_invocation_completed',
    'agent_invocation_failed',
    'agent_invocation_transferred',
    'agent_loop_finished',
    'agent_task_registered',
    'agent_task_started',
    'agent_task_completed',
    'agent_task_failed',
    'agent_handoff_requested',
    'agent_handoff_accepted',
    'model_response_stored',
    'tool_call_completed',
    'tool_call_failed',
    'workspace_file_written',
    'workspace_patch_applied',
    'chat_commit_completed',
    'claim_fenced',
    'run_cancel_requested',
    'agent_invocation_cancelled',
    'agent_invocation_parked',
    'agent_invocation_woken',
    'agent_child_invocation_failed',
    'agent_task_cancelled',
    'agent_delegate_started',
    'agent_await_started',
    'agent_await_completed',
    'ask_user_started',
    'ask_user_answered',
    'ask_user_timed_out',
    'task_return_recorded',
    'host_error',
    'run_budget_exhausted',
    'external_agent_rerun',
    'message_dead_lettered',
    'model_call_waiting',
    'model_call_throttled',
    'coding_agent_started',
    'coding_agent_command',
    'coding_agent_file_edited',
    'coding_agent_model_call',
    'coding_agent_session_restarted',
    'coding_agent_finished'
);

DROP VIEW events;
ALTER TABLE journal ALTER COLUMN types TYPE journal_event[] USING types::text[]::journal_event[];
ALTER TABLE journal ADD COLUMN invocation_id uuid;

CREATE VIEW events AS
SELECT j.id * 4096 + e.n AS id, j.run_id,
       nullif(coalesce(e.invocation_id, j.invocation_id), '00000000-0000-0000-0000-000000000000'::uuid) AS invocation_id,
       e.type::text AS type, 'info'::text AS level, e.payload, j.created_at
  FROM journal j,
       unnest(j.invocations, j.types, j.payloads) WITH ORDINALITY AS e(invocation_id, type, payload, n);

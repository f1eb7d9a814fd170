-- Issue 23, the lean hop: a run's first journal events are kept in the
-- bridge message row intake writes with them, as a statement's handoff
-- events are (V47).
--
-- Intake's statement starts a run: it writes the request's `accepted` (and
-- `running`) row for the bridge and the run's first journal row
-- (`run_created`, `profile_resolved`, `workspace_initialized`,
-- `agent_invocation_created`), whose payloads say nothing the run's and
-- the root's rows do not (V35, V48). The events are now five more columns
-- of the bridge row: a tuple, a key entry and about 250 bytes of WAL fewer
-- per request.
--
-- `events` reads both tables: the bridge rows through the run's request
-- (`runs.handoff_id`, then the rows of that handoff), so a query on one
-- run still reads by index. Journal rows take their ids from the outbox's
-- sequence, as `handoff_log` does (V47), so a run's events keep one order
-- across the two tables.
ALTER TABLE bridge_messages
    ADD COLUMN journal_run uuid,
    ADD COLUMN journal_invocation uuid,
    ADD COLUMN journal_invocations uuid[],
    ADD COLUMN journal_types journal_event[],
    ADD COLUMN journal_payloads json,
    ADD CONSTRAINT bridge_messages_journal_check
        CHECK (journal_types IS NULL
               OR journal_run IS NOT NULL AND journal_invocations IS NOT NULL AND journal_payloads IS NOT NULL
                  AND cardinality(journal_types) BETWEEN 1 AND 4096
                  AND cardinality(journal_invocations) = cardinality(journal_types)) NOT VALID;

ALTER TABLE journal ALTER COLUMN id DROP IDENTITY IF EXISTS;
ALTER TABLE journal ALTER COLUMN id SET DEFAULT nextval('outbox_id_seq');
SELECT setval('outbox_id_seq', greatest((SELECT last_value FROM outbox_id_seq),
                                        (SELECT coalesce(max(id), 0) FROM journal)) + 1, false);

-- As V48's, and the events kept in bridge rows after them.
CREATE OR REPLACE VIEW events AS
SELECT j.id * 4096 + e.n AS id, j.run_id, e.invocation_id, e.type::text AS type, 'info'::text AS level,
       journal_payload(e.type, j.run_id, e.invocation_id, run_payload(e.type, j.run_id, e.payload::jsonb)) AS payload,
       j.created_at
  FROM journal j,
       LATERAL (SELECT r.n, r.type, r.payload,
                       nullif(coalesce(r.invocation_id, j.invocation_id), '00000000-0000-0000-0000-000000000000'::uuid)
                           AS invocation_id
                  FROM ROWS FROM (unnest(j.invocations), unnest(j.types), json_array_elements(j.payloads))
                       WITH ORDINALITY AS r(invocation_id, type, payload, n)) e
UNION ALL
SELECT b.id * 4096 + e.n, run.id, e.invocation_id, e.type::text, 'info'::text,
       journal_payload(e.type, run.id, e.invocation_id, run_payload(e.type, run.id, e.payload::jsonb)),
       b.created_at
  FROM runs run
  JOIN bridge_messages b ON b.handoff_id = run.handoff_id AND b.journal_run = run.id AND (b.pending OR NOT b.pending),
       LATERAL (SELECT r.n, r.type, r.payload,
                       nullif(coalesce(r.invocation_id, b.journal_invocation), '00000000-0000-0000-0000-000000000000'::uuid)
                           AS invocation_id
                  FROM ROWS FROM (unnest(b.journal_invocations), unnest(b.journal_types),
                                  json_array_elements(b.journal_payloads))
                       WITH ORDINALITY AS r(invocation_id, type, payload, n)) e
 WHERE b.journal_types IS NOT NULL;

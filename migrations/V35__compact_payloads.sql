-- Issue 23, the lean hop: a journal row's payloads and a transcript row's
-- steps are one compact JSON array each (`json`: the text the writer
-- serialized, checked to be JSON), not an array of `jsonb` values.
--
-- A `jsonb` value spends a header, an entry per key and per value and an
-- aligned array slot of its own, and is built from its text on every
-- insert; a steady-state hop's journal row held 14 of them and its
-- transcript row 3. As one array of compact text the same events are about
-- a fifth smaller (947 -> 741 bytes per journal row, 542 -> 395 per
-- transcript row, measured on the bench's rows) and the server stores what
-- it was sent. Readers read through the `events` and `steps` views, which
-- parse a row's array when it is read (`jsonb` per event, as before).
--
-- The CHECKs keep what costs nothing to check: the number of events names
-- the number of types and invocations; that the array has as many values is
-- the one writer's (`journal::columns`, `steps::append_*`) to keep, as its
-- order already was.
DROP VIEW events;
DROP VIEW steps;

ALTER TABLE journal DROP CONSTRAINT journal_check;
ALTER TABLE journal ALTER COLUMN payloads TYPE json USING array_to_json(payloads);
ALTER TABLE journal ADD CONSTRAINT journal_check
    CHECK (cardinality(types) BETWEEN 1 AND 4096 AND cardinality(invocations) = cardinality(types));

ALTER TABLE transcript DROP CONSTRAINT transcript_check;
ALTER TABLE transcript ALTER COLUMN payloads TYPE json USING array_to_json(payloads);
ALTER TABLE transcript ADD CONSTRAINT transcript_check CHECK (cardinality(kinds) >= 1);

-- What an event's payload repeats of an invocation's row is not written
-- again (a steady-state hop's row named the successor's ids six times, as
-- 36-character text): `journal_payload` puts it back when an event is read,
-- from the row, so every reader sees the payload it saw before. Only a
-- payload without the key is completed; rows written before keep theirs
-- (a resumed `agent_invocation_started`, which never named its kind and
-- agent, now reads with them too).
--
-- A NUL character, which `jsonb` cannot hold, is written as U+FFFD
-- (`journal::json_array`): stored as `json`, it would make every later
-- read of its run fail.
--   agent_invocation_created     profileId, parentInvocationId  (its own row)
--   agent_invocation_started     kind, profileId                (its own row)
--   skill_scopes_resolved        profileId                      (its own row)
--   agent_task_*                 taskId (the invocation's incoming task)
--   agent_handoff_accepted       taskId, invocationId (the successor's)
--   agent_invocation_transferred to, agentId (the successor)
-- The successor of a handoff is the one invocation of the run whose
-- parent it is with kind `handoff` (a handoff ends its caller).
CREATE FUNCTION journal_payload(t journal_event, run uuid, inv uuid, payload jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$
SELECT CASE
    WHEN t IN ('agent_task_registered', 'agent_task_started', 'agent_task_completed', 'agent_task_failed',
               'agent_task_cancelled') AND NOT payload ? 'taskId'
        THEN payload || coalesce((SELECT jsonb_build_object('taskId', i.incoming_task_id)
                                    FROM invocations i WHERE i.id = inv), '{}')
    WHEN t = 'agent_invocation_created' AND NOT payload ? 'profileId'
        THEN payload || coalesce((SELECT jsonb_strip_nulls(jsonb_build_object('profileId', i.profile_id,
                                                                              'parentInvocationId', i.parent_invocation_id))
                                    FROM invocations i WHERE i.id = inv), '{}')
    WHEN t = 'agent_invocation_started' AND NOT payload ? 'profileId'
        THEN payload || coalesce((SELECT jsonb_build_object('kind', i.kind, 'profileId', i.profile_id)
                                    FROM invocations i WHERE i.id = inv), '{}')
    WHEN t = 'skill_scopes_resolved' AND NOT payload ? 'profileId'
        THEN payload || coalesce((SELECT jsonb_build_object('profileId', i.profile_id)
                                    FROM invocations i WHERE i.id = inv), '{}')
    WHEN t = 'agent_handoff_accepted' AND NOT payload ? 'invocationId'
        THEN payload || coalesce((SELECT jsonb_build_object('taskId', s.incoming_task_id, 'invocationId', s.id)
                                    FROM invocations s
                                   WHERE s.run_id = run AND s.parent_invocation_id = inv AND s.kind = 'handoff'
                                   ORDER BY s.created_at LIMIT 1), '{}')
    WHEN t = 'agent_invocation_transferred' AND NOT payload ? 'to'
        THEN payload || coalesce((SELECT jsonb_build_object('to', s.id, 'agentId', s.profile_id)
                                    FROM invocations s
                                   WHERE s.run_id = run AND s.parent_invocation_id = inv AND s.kind = 'handoff'
                                   ORDER BY s.created_at LIMIT 1), '{}')
    ELSE payload
END
$$;

CREATE VIEW events AS
SELECT j.id * 4096 + e.n AS id, j.run_id, e.invocation_id, e.type::text AS type, 'info'::text AS level,
       journal_payload(e.type, j.run_id, e.invocation_id, e.payload::jsonb) AS payload, j.created_at
  FROM journal j,
       LATERAL (SELECT r.n, r.type, r.payload,
                       nullif(coalesce(r.invocation_id, j.invocation_id), '00000000-0000-0000-0000-000000000000'::uuid)
                           AS invocation_id
                  FROM ROWS FROM (unnest(j.invocations), unnest(j.types), json_array_elements(j.payloads))
                       WITH ORDINALITY AS r(invocation_id, type, payload, n)) e;

CREATE VIEW steps AS
SELECT t.invocation_id, t.seq + s.n::integer - 1 AS seq, s.kind, s.payload::jsonb AS payload, t.created_at, t.xmin AS tx
  FROM transcript t,
       ROWS FROM (unnest(t.kinds), json_array_elements(t.payloads)) WITH ORDINALITY AS s(kind, payload, n);

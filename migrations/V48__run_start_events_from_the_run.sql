-- Issue 23, the lean hop: a run's first events repeat what its own row and
-- its request's row keep, so they are not written again.
--
-- `run_created` named the request, its source and the budget copied onto
-- the run (`runs.handoff_id`, `handoff_requests.source`, `runs.budget`),
-- and `profile_resolved` the request's target agent and the root's profile
-- (`handoff_requests.target_agent`, `runs.root_profile_id`): about 200
-- bytes of every request's journal. As with the events V35 completes from
-- an invocation's row (`journal_payload`), `run_payload` puts them back
-- when an event is read through `events`, so every reader sees the payload
-- it saw before. Only a payload
-- without the key is completed: rows written before keep theirs, and so
-- does a run an operator started by hand (its `run_created` names its
-- handoff and says `manual`).
CREATE FUNCTION run_payload(t journal_event, run uuid, payload jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$
SELECT CASE
    WHEN t = 'run_created' AND NOT payload ? 'handoffId'
        THEN payload || coalesce((SELECT jsonb_build_object('handoffId', r.handoff_id, 'source', h.source,
                                                            'budget', r.budget)
                                    FROM runs r LEFT JOIN handoff_requests h ON h.id = r.handoff_id
                                   WHERE r.id = run), '{}')
    WHEN t = 'profile_resolved' AND NOT payload ? 'profileId'
        THEN payload || coalesce((SELECT jsonb_build_object('targetAgent', h.target_agent, 'profileId', r.root_profile_id)
                                    FROM runs r LEFT JOIN handoff_requests h ON h.id = r.handoff_id
                                   WHERE r.id = run), '{}')
    ELSE payload
END
$$;

-- As V35's, each payload completed by both functions.
CREATE OR REPLACE VIEW events AS
SELECT j.id * 4096 + e.n AS id, j.run_id, e.invocation_id, e.type::text AS type, 'info'::text AS level,
       journal_payload(e.type, j.run_id, e.invocation_id, run_payload(e.type, j.run_id, e.payload::jsonb)) AS payload,
       j.created_at
  FROM journal j,
       LATERAL (SELECT r.n, r.type, r.payload,
                       nullif(coalesce(r.invocation_id, j.invocation_id), '00000000-0000-0000-0000-000000000000'::uuid)
                           AS invocation_id
                  FROM ROWS FROM (unnest(j.invocations), unnest(j.types), json_array_elements(j.payloads))
                       WITH ORDINALITY AS r(invocation_id, type, payload, n)) e;

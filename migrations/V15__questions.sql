-- Conversations, part one: an agent asks its user and waits (ask_user), and
-- the bridge's answers, each stored once by its id.

CREATE TABLE questions (
    id             uuid PRIMARY KEY,
    handoff_id     text NOT NULL REFERENCES handoff_requests(id),
    run_id         uuid NOT NULL REFERENCES runs(id),
    invocation_id  uuid NOT NULL REFERENCES invocations(id),
    tool_call_id   text NOT NULL,
    question       text NOT NULL,
    options        jsonb NOT NULL DEFAULT '[]',
    state          text NOT NULL,             -- open, answered, expired
    expires_at     timestamptz NOT NULL,
    answered_at    timestamptz,
    answer         text,                      -- after the disclosure policy
    created_at     timestamptz NOT NULL DEFAULT now(),
    closed_at      timestamptz,
    -- The call that asked: a resumed call finds its question, never asks twice.
    UNIQUE (invocation_id, tool_call_id)
);
CREATE INDEX questions_by_handoff ON questions (handoff_id);
CREATE INDEX questions_by_run ON questions (run_id);

-- Every BridgeAnswer received, once per id, with what became of it. No
-- foreign key: an answer for an unknown handoff is kept here too.
CREATE TABLE bridge_answers (
    id           text PRIMARY KEY,
    handoff_id   text NOT NULL,
    question_id  text NOT NULL,
    outcome      text NOT NULL,               -- applied, or why it changed nothing
    received_at  timestamptz NOT NULL DEFAULT now()
);

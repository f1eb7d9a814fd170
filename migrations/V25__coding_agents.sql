-- Coding agents (CONTRACT §7): what each one changed, and the sessions a
-- conversation's next request resumes.

-- The diff of one coding invocation's checkout, written in the fenced
-- transaction that stores the agent's result: the patch an operator reads
-- (also when the push failed) and the summary the reply carries.
CREATE TABLE coding_changes (
    invocation_id uuid PRIMARY KEY REFERENCES invocations (id) ON DELETE CASCADE,
    run_id        uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    project       text NOT NULL,
    changes       jsonb NOT NULL,          -- ReplyChanges: files, insertions, deletions, branch, commit
    patch         text NOT NULL,           -- `git diff` of the checkout, cut at 4 MiB
    push_error    text,                    -- why the push failed, when it did
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX coding_changes_run ON coding_changes (run_id, created_at);

-- One CLI session per conversation, target and project: its id, the branch
-- it pushed (the next checkout starts there), and the CLI's own session
-- files (a tar), so any worker can resume it.
CREATE TABLE coding_sessions (
    conversation_key text NOT NULL,
    target_agent     text NOT NULL,
    project          text NOT NULL DEFAULT '',
    cli              text NOT NULL,
    session_id       text NOT NULL,
    branch           text,
    state            bytea,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (conversation_key, target_agent, project)
);

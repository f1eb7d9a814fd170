-- Issue 23, the lean hop: a run's root stored its brief, the markdown
-- rendered from the bridge's request (about 700 bytes in the bench's
-- requests, most of the row), and wrote it again with the row's one update
-- (the brief lies between the columns that update changes). The request is
-- stored already, as the disclosure policy left it, and the brief is a pure
-- function of it: a new root stores no brief, and reading the row renders
-- it from its run's request, as a handoff stage's brief is rendered from the
-- arguments its predecessor gave (V30). Roots written before keep theirs.
ALTER TABLE invocations DROP CONSTRAINT invocations_brief;
ALTER TABLE invocations ADD CONSTRAINT invocations_brief
    CHECK (brief IS NOT NULL OR jsonb_typeof(handoff) = 'object' OR kind = 'root');

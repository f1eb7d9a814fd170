-- Issue 15: a run's priority, copied from its request (`priority: low |
-- normal | high`) when the run is created. Every invocation message of the
-- run (its stages, its delegated children, their wake-ups) goes to the
-- invocation queue of that priority; workers give a free slot to the
-- highest priority waiting (see baton_domain::priority).
ALTER TABLE runs ADD COLUMN priority text NOT NULL DEFAULT 'normal'
    CHECK (priority IN ('low', 'normal', 'high'));

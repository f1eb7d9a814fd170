-- Retention: finished runs are found by age without scanning live work.
CREATE INDEX runs_finished ON runs (finished_at) WHERE status <> 'running';

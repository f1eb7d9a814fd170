-- Bridge identity (CONTRACT §8): the bridge a request came from. With
-- [[bridges]], the request's id is `<bridge>:<its own id>`, and what the
-- fleet sends the bridge carries its own id again.
ALTER TABLE handoff_requests ADD COLUMN bridge_id text;

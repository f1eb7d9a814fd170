-- Skills: named instruction packs that profiles enable.
CREATE TABLE skills (
    id         text PRIMARY KEY,
    spec       jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Issue 23, the lean hop: profiles are versioned and a version is never
-- edited, so an invocation's opening prompt (its system prompt and brief,
-- about a kilobyte per hop, more with skills) is not stored: the
-- transcript's first step keeps the version of the profiles file it was
-- rendered from, and the prompt is rendered again from that version's
-- profile and skills and the invocation's brief when the transcript is read
-- (`steps::load`). Every `profiles apply` copies the profiles and skills it
-- leaves in place under the version it bumps to; rows are only inserted.
CREATE TABLE profile_versions (
    version     bigint NOT NULL,
    id          text NOT NULL,
    spec        jsonb NOT NULL,
    model_limit jsonb,
    PRIMARY KEY (version, id)
);

CREATE TABLE skill_versions (
    version bigint NOT NULL,
    id      text NOT NULL,
    spec    jsonb NOT NULL,
    PRIMARY KEY (version, id)
);

INSERT INTO profile_versions (version, id, spec, model_limit)
SELECT v.version, p.id, p.spec, p.model_limit FROM profiles p, profiles_version v;
INSERT INTO skill_versions (version, id, spec)
SELECT v.version, s.id, s.spec FROM skills s, profiles_version v;

-- Issue 14: a counter bumped in the transaction that applies a profiles
-- file. Workers cache what they read of the file (disclosure policy,
-- routes, conversation and budget settings, profiles) under it, and read
-- only the counter, pipelined with a transaction's first statement, to know
-- their copy is current.
CREATE TABLE profiles_version (
    one      boolean PRIMARY KEY DEFAULT true CHECK (one),
    version  bigint  NOT NULL
);

INSERT INTO profiles_version (version) VALUES (0);

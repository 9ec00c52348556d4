-- fleet: the registry of the builds that have the store open, and the contract revisions applied
--
-- Revision 0004 of cairn's own migration set, Postgres dialect; 0004_fleet.sqlite.sql creates the
-- same tables with the same meaning. cairn_fleet holds one row per (open store instance,
-- migration set): the build that opened the store, the newest revision of the set it knows,
-- its host and process, and when it started and last heartbeated (microseconds since the Unix
-- epoch from the store's clock). An entry whose last_seen_us is older than the expiry window
-- is not live. cairn_contract records every contract revision applied, with whether it was
-- forced past live builds that lacked it (named in blockers, one a line).
-- This text is hashed into the revision's checksum: never edit it once committed.
CREATE TABLE cairn_fleet (
    instance_id TEXT NOT NULL,
    set_name TEXT NOT NULL,
    revision TEXT NOT NULL,
    build_id TEXT NOT NULL,
    host TEXT NOT NULL,
    pid BIGINT NOT NULL,
    started_at_us BIGINT NOT NULL,
    last_seen_us BIGINT NOT NULL,
    PRIMARY KEY (instance_id, set_name)
);
CREATE TABLE cairn_contract (
    set_name TEXT NOT NULL,
    revision TEXT NOT NULL,
    applied_at_us BIGINT NOT NULL,
    forced BIGINT NOT NULL,
    blockers TEXT NOT NULL,
    PRIMARY KEY (set_name, revision, applied_at_us)
);

-- epoch log: epoch, epoch_parent, epoch_event, epoch_head (head cache)
--
-- Revision 0001 of cairn's own migration set, Postgres dialect: the text sea-query rendered
-- for cairn_core::schema::epoch_log_ddl when the revision was released, committed so that the
-- revision's checksum is over bytes that ship with the build. A test checks the generator
-- still renders exactly these statements. Never edit this file: every store's lineage holds
-- its checksum.

CREATE TABLE IF NOT EXISTS "epoch" ( "space" bytea NOT NULL, "id" bytea NOT NULL, "seq" bigint NOT NULL, PRIMARY KEY ("space", "id") );
CREATE TABLE IF NOT EXISTS "epoch_parent" ( "space" bytea NOT NULL, "parent" bytea NOT NULL, "child" bytea NOT NULL, PRIMARY KEY ("space", "child", "parent"), CONSTRAINT "epoch_parent_child_fk" FOREIGN KEY ("space", "child") REFERENCES "epoch" ("space", "id"), CONSTRAINT "epoch_parent_parent_fk" FOREIGN KEY ("space", "parent") REFERENCES "epoch" ("space", "id") );
CREATE TABLE IF NOT EXISTS "epoch_event" ( "space" bytea NOT NULL, "seq" bigint NOT NULL, "epoch_seq" integer NOT NULL, "epoch" bytea NOT NULL, "event_id" bytea NOT NULL, "kind" text NOT NULL, "key" bytea NULL, "payload" bytea NOT NULL, PRIMARY KEY ("space", "seq", "epoch_seq"), CONSTRAINT "epoch_event_epoch_fk" FOREIGN KEY ("space", "epoch") REFERENCES "epoch" ("space", "id") );
CREATE TABLE IF NOT EXISTS "epoch_head" ( "space" bytea NOT NULL, "id" bytea NOT NULL, "seq" bigint NOT NULL, PRIMARY KEY ("space", "id") );
CREATE UNIQUE INDEX IF NOT EXISTS "epoch_space_seq" ON "epoch" ("space", "seq");
CREATE INDEX IF NOT EXISTS "epoch_parent_space_parent_child" ON "epoch_parent" ("space", "parent", "child");
CREATE INDEX IF NOT EXISTS "epoch_event_space_epoch" ON "epoch_event" ("space", "epoch");

-- epoch log: epoch, epoch_parent, epoch_event, epoch_head (head cache)
--
-- Revision 0001 of cairn's own migration set, SQLite dialect: the text sea-query rendered for
-- cairn_core::schema::epoch_log_ddl when the revision was released, committed so that the
-- revision's checksum is over bytes that ship with the build. A test checks the generator
-- still renders exactly these statements. Never edit this file: every store's lineage holds
-- its checksum.

CREATE TABLE IF NOT EXISTS "epoch" ( "space" blob NOT NULL, "id" blob NOT NULL, "seq" integer NOT NULL, PRIMARY KEY ("space", "id") );
CREATE TABLE IF NOT EXISTS "epoch_parent" ( "space" blob NOT NULL, "parent" blob NOT NULL, "child" blob NOT NULL, PRIMARY KEY ("space", "child", "parent"), FOREIGN KEY ("space", "child") REFERENCES "epoch" ("space", "id"), FOREIGN KEY ("space", "parent") REFERENCES "epoch" ("space", "id") );
CREATE TABLE IF NOT EXISTS "epoch_event" ( "space" blob NOT NULL, "seq" integer NOT NULL, "epoch_seq" integer NOT NULL, "epoch" blob NOT NULL, "event_id" blob NOT NULL, "kind" text NOT NULL, "key" blob NULL, "payload" blob NOT NULL, PRIMARY KEY ("space", "seq", "epoch_seq"), FOREIGN KEY ("space", "epoch") REFERENCES "epoch" ("space", "id") );
CREATE TABLE IF NOT EXISTS "epoch_head" ( "space" blob NOT NULL, "id" blob NOT NULL, "seq" integer NOT NULL, PRIMARY KEY ("space", "id") );
CREATE UNIQUE INDEX IF NOT EXISTS "epoch_space_seq" ON "epoch" ("space", "seq");
CREATE INDEX IF NOT EXISTS "epoch_parent_space_parent_child" ON "epoch_parent" ("space", "parent", "child");
CREATE INDEX IF NOT EXISTS "epoch_event_space_epoch" ON "epoch_event" ("space", "epoch");

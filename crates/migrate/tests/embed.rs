//! `embed_migrations!` against the conformance fixtures: what is embedded is what
//! `MigrationSet::from_dir` reads.

use cairn_migrate::{embed_migrations, MigrationSet};

const V1: &[(&str, &str)] = embed_migrations!("../../tests/fixtures/app_v1");
const V2: &[(&str, &str)] = embed_migrations!("../../tests/fixtures/app_v2");

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

#[test]
fn embedded_files_are_the_sql_files_sorted_by_name() {
    let names: Vec<&str> = V2.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "0001_items.sql",
            "0002_item_notes.sql",
            "0003_item_events.postgres.sql",
            "0003_item_events.sqlite.sql"
        ]
    );
    assert_eq!(V1.len(), 1, "the README is left out");
    let on_disk = std::fs::read_to_string(fixture("app_v1").join("0001_items.sql")).unwrap();
    assert_eq!(V1[0].1, on_disk);
}

#[test]
fn an_embedded_set_equals_the_set_read_from_its_directory() {
    for (files, dir) in [(V1, "app_v1"), (V2, "app_v2")] {
        let embedded = MigrationSet::from_embedded("app", files).unwrap();
        let read = MigrationSet::from_dir("app", fixture(dir)).unwrap();
        assert_eq!(embedded, read);
    }
    let v2 = MigrationSet::from_embedded("app", V2).unwrap();
    assert_eq!(v2.head().id, "0003_item_events");
    assert_ne!(v2.head().up_sqlite, v2.head().up_postgres);
    assert_eq!(
        v2.revisions()[1].description,
        "item notes: a nullable column on items and a side table for tags"
    );
}

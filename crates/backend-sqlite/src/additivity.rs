//! The SQLite engine of the executed additivity check; see [`SqliteAdditivity`].

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use cairn_core::schema::Dialect;
use cairn_core::{epoch_id, EpochStore, Error, Event, EventId, ForeignEpoch, Result, SpaceId};
use cairn_migrate::additivity::{AdditivityEngine, Rule, Violation};
use cairn_migrate::{MigrateError, MigrationSet, Revision, Runner, CAIRN_SET};
use rusqlite::trace::{TraceEvent, TraceEventCodes};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{params, params_from_iter, Connection, ToSql};

use crate::config::SqliteOptions;
use crate::db::blocking;
use crate::error::map;
use crate::{files, SqliteStore, BOOKKEEPING_TABLES};

/// The statements the engine sends. Fixed statements are constants; the per-table ones are
/// built from identifiers read from the throwaway store's own catalog (always quoted), and
/// every value is bound.
mod sql {
    /// Every table, index, trigger and view, except SQLite's internal tables and the
    /// runner's bookkeeping (automatic indexes are kept: a rebuild replaces them too).
    pub(super) const SCHEMA: &str = "\
SELECT type, name, tbl_name, rootpage, sql FROM sqlite_schema
WHERE tbl_name NOT IN ('cairn_migration_stamp', 'cairn_migration_lineage')
  AND NOT (type = 'table' AND name LIKE 'sqlite\\_%' ESCAPE '\\')
ORDER BY type, name";

    /// A table's columns, hidden and generated ones included (`hidden`: 2 and 3 are
    /// generated columns).
    pub(super) const COLUMNS: &str =
        "SELECT name, \"notnull\", dflt_value, pk, hidden FROM pragma_table_xinfo(?1) ORDER BY cid";

    /// Whether a table of the main schema is a WITHOUT ROWID table.
    pub(super) const WITHOUT_ROWID: &str =
        "SELECT wr FROM pragma_table_list(?1) WHERE schema = 'main'";

    /// The flags of one index of a table.
    pub(super) const INDEX_FLAGS: &str =
        "SELECT \"unique\", partial FROM pragma_index_list(?1) WHERE name = ?2";

    /// The key columns of an index (`cid` -2 is an expression).
    pub(super) const INDEX_KEY_COLUMNS: &str =
        "SELECT cid FROM pragma_index_xinfo(?1) WHERE key = 1 ORDER BY seqno";

    /// Defers foreign-key checks to the end of the (never committed) transaction, so a row
    /// can be deleted and inserted back; `FOREIGN_KEY_CHECK` then finds what is left broken.
    pub(super) const DEFER_FOREIGN_KEYS: &str = "PRAGMA defer_foreign_keys = ON";
    pub(super) const FOREIGN_KEY_CHECK: &str = "PRAGMA foreign_key_check";

    pub(super) const SAVEPOINT: &str = "SAVEPOINT cairn_additivity_old_writes";
    pub(super) const ROLLBACK_TO: &str = "ROLLBACK TO cairn_additivity_old_writes";
    pub(super) const RELEASE: &str = "RELEASE cairn_additivity_old_writes";

    /// Quotes an identifier for SQLite.
    pub(super) fn quote(ident: &str) -> String {
        format!("\"{}\"", ident.replace('"', "\"\""))
    }

    fn list(cols: &[String]) -> String {
        cols.iter().map(|c| quote(c)).collect::<Vec<_>>().join(", ")
    }

    /// `WHERE k1 IS ?n AND k2 IS ?n+1 …`, numbering from `first`.
    fn key_filter(key: &[String], first: usize) -> String {
        key.iter()
            .enumerate()
            .map(|(i, k)| format!("{} IS ?{}", quote(k), first + i))
            .collect::<Vec<_>>()
            .join(" AND ")
    }

    /// The key columns then the given columns of every row.
    pub(super) fn select_rows(table: &str, key: &[String], cols: &[String]) -> String {
        let all: Vec<String> = key.iter().chain(cols).cloned().collect();
        format!("SELECT {} FROM {}", list(&all), quote(table))
    }

    pub(super) fn delete_row(table: &str, key: &[String]) -> String {
        format!("DELETE FROM {} WHERE {}", quote(table), key_filter(key, 1))
    }

    pub(super) fn insert_row(table: &str, cols: &[String]) -> String {
        let marks: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
        format!(
            "INSERT INTO {} ({}) VALUES ({})",
            quote(table),
            list(cols),
            marks.join(", ")
        )
    }

    pub(super) fn update_row(table: &str, cols: &[String], key: &[String]) -> String {
        let set: Vec<String> = cols
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{} = ?{}", quote(c), i + 1))
            .collect();
        format!(
            "UPDATE {} SET {} WHERE {}",
            quote(table),
            set.join(", "),
            key_filter(key, cols.len() + 1)
        )
    }
}

/// The SQLite engine of cairn-migrate's executed additivity check ([`AdditivityEngine`]).
///
/// Per revision, in a fresh private temporary directory (removed afterwards; nothing else is
/// touched): a throwaway store is built at the revision's parent through the lineage-aware
/// runner and seeded through cairn's real write paths — appends to three spaces with
/// multi-event epochs, keyed and unkeyed events, JSON and non-JSON payloads; an import of a
/// sibling epoch that forks a space; a repair; an append that merges the fork. Tables an
/// earlier revision created that cairn does not write stay empty. The engine snapshots
/// `sqlite_schema` and every row, opens the production transaction (`BEGIN IMMEDIATE`),
/// applies the revision's statements one at a time while SQLite's trace callback records every
/// statement SQLite runs (trigger programs included), and requires:
/// - on an existing table, only `ALTER TABLE … ADD COLUMN` and `CREATE INDEX` (any other kind
///   is refused for its kind, whatever rows it touches; an unknown kind is flagged for review);
/// - each existing table's stored SQL equal to the old one plus one insertion of column
///   definitions, at the same root page (so any rebuild, even an identical one, fails);
/// - new columns not generated, not in the key, nullable or with a literal default, without
///   CHECK, UNIQUE or REFERENCES;
/// - existing indexes, triggers and views unchanged; new indexes on existing tables
///   non-unique, non-partial and on plain columns; no new trigger on an existing table;
/// - the seeded rows unchanged, value for value, and a DELETE, INSERT and UPDATE naming only
///   the old columns succeeding on one row of every seeded table (with no foreign key left
///   broken);
/// - every statement succeeding inside the transaction (`VACUUM` cannot).
///
/// Then everything is rolled back.
///
/// It is a **guard, stricter than compatibility needs**: it refuses harmless changes too (an
/// identical rebuild, a replaced index, a `PRAGMA`). What it cannot see: what rows *mean* to
/// older code; side effects outside SQL (files, other connections); triggers created on new
/// tables that did not fire during the migration; constraints a new table places on existing
/// rows once newer code fills it (e.g. a foreign key into `epoch_head` that would stop older
/// code deleting cache rows), since new tables are not seeded; and rows of tables cairn's write
/// paths do not fill. The history it is given must be cairn's own migration set (the seed runs
/// cairn's write paths).
#[derive(Clone, Debug, Default)]
pub struct SqliteAdditivity {
    opts: SqliteOptions,
}

impl SqliteAdditivity {
    /// An engine with default store options.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl AdditivityEngine for SqliteAdditivity {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    async fn check_revision(
        &self,
        history: &[Revision],
        revision: &Revision,
    ) -> Result<Vec<Violation>, MigrateError> {
        let set = MigrationSet::new(CAIRN_SET, history.to_vec())?;
        let dir = Scratch::new()?;
        let path = dir.0.join("check.db");
        seed(&path, &self.opts, set).await?;
        let (opts, statements) = (self.opts.clone(), revision.up_sqlite.clone());
        let violations = blocking(move || inspect(&path, &opts, &statements)).await?;
        drop(dir);
        Ok(violations)
    }
}

/// A private temporary directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        loop {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let dir = base.join(format!(
                "cairn-additivity-{}-{nanos}-{n}",
                std::process::id()
            ));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(Self(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(source) => {
                    return Err(Error::Io {
                        path: base.display().to_string(),
                        source,
                    })
                }
            }
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // A leftover scratch directory holds only synthetic data; failing to remove it must
        // not turn a verdict into an error.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn space(name: &str) -> Result<SpaceId> {
    SpaceId::new(name.as_bytes().to_vec())
}

/// Builds the store at the end of `set` and fills it through cairn's own write paths.
async fn seed(path: &Path, opts: &SqliteOptions, set: MigrationSet) -> Result<(), MigrateError> {
    let store = SqliteStore::open_with_runner(path, opts.clone(), &Runner::new(set)).await?;
    let json: &[u8] = br#"{"x": 1, "y": [true, null]}"#;
    let not_json: &[u8] = b"\xff\x00";

    let forked = space("additivity-forked")?;
    let first = store
        .append(
            &forked,
            vec![
                Event::new("seed.json", json.to_vec()),
                Event::with_key("seed.keyed", b"k1".to_vec(), not_json.to_vec()),
            ],
        )
        .await?;
    store
        .append(
            &forked,
            vec![Event::with_key("seed.keyed", b"k2".to_vec(), json.to_vec())],
        )
        .await?;
    // A sibling of the second epoch, as another node would have written it: a fork.
    let events = vec![
        Event::new("seed.foreign", not_json.to_vec()),
        Event::with_key("seed.foreign", b"\x00k".to_vec(), b"plain text".to_vec()),
    ];
    let ids: Vec<EventId> = events.iter().map(Event::id).collect();
    let parents = vec![first.id];
    store
        .import(ForeignEpoch {
            space: forked.clone(),
            id: epoch_id(&forked, &parents, &ids),
            parents,
            events,
        })
        .await?;
    store.repair_heads(&forked).await?;
    store
        .append(&forked, vec![Event::new("seed.merge", json.to_vec())])
        .await?;

    let linear = space("additivity-linear")?;
    for i in 0..3u8 {
        store
            .append(
                &linear,
                vec![
                    Event::new("seed.event", vec![b'{', b'}', i]),
                    Event::with_key("seed.keyed", vec![i], json.to_vec()),
                    Event::new("seed.event", not_json.to_vec()),
                ],
            )
            .await?;
    }
    let single = space("additivity-single")?;
    store
        .append(&single, vec![Event::new("seed.one", b"[1,2,3]".to_vec())])
        .await?;
    Ok(())
}

// ---------------------------------------------------------------- tokens

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    /// An unquoted word (keyword or identifier), as written.
    Word(String),
    /// A quoted identifier ("x", `x`, [x]), unquoted.
    Ident(String),
    /// A string literal, unquoted.
    Str(String),
    Num,
    Punct(char),
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    /// Parenthesis depth the token sits at.
    depth: usize,
}

impl Token {
    fn is_word(&self, w: &str) -> bool {
        matches!(&self.tok, Tok::Word(x) if x.eq_ignore_ascii_case(w))
    }

    fn name(&self) -> Option<String> {
        match &self.tok {
            Tok::Word(x) | Tok::Ident(x) | Tok::Str(x) => Some(x.to_ascii_lowercase()),
            _ => None,
        }
    }
}

/// Splits SQL text into tokens, skipping whitespace and comments. Lenient: it never fails,
/// an unterminated quote runs to the end.
fn tokenize(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let quoted = |i: &mut usize, close: char| -> String {
        let mut s = String::new();
        *i += 1;
        while *i < chars.len() {
            if chars[*i] == close {
                if close != ']' && chars.get(*i + 1) == Some(&close) {
                    s.push(close);
                    *i += 2;
                    continue;
                }
                *i += 1;
                return s;
            }
            s.push(chars[*i]);
            *i += 1;
        }
        s
    };
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '-' && chars.get(i + 1) == Some(&'-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                i += 1;
            }
            i += 2;
        } else if c == '\'' {
            let s = quoted(&mut i, '\'');
            out.push(Token {
                tok: Tok::Str(s),
                depth,
            });
        } else if c == '"' || c == '`' || c == '[' {
            let close = if c == '[' { ']' } else { c };
            let s = quoted(&mut i, close);
            out.push(Token {
                tok: Tok::Ident(s),
                depth,
            });
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Num,
                depth,
            });
        } else if c.is_alphanumeric() || c == '_' || c == '$' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$')
            {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Word(chars[start..i].iter().collect()),
                depth,
            });
        } else {
            if c == ')' {
                depth = depth.saturating_sub(1);
            }
            out.push(Token {
                tok: Tok::Punct(c),
                depth,
            });
            if c == '(' {
                depth += 1;
            }
            i += 1;
        }
    }
    out
}

/// Reads a possibly schema-qualified name at `i`: the object's name (lowercased) and the
/// position after it.
fn qualified_name(toks: &[Token], i: usize) -> Option<(String, usize)> {
    let first = toks.get(i)?.name()?;
    if toks.get(i + 1).is_some_and(|t| t.tok == Tok::Punct('.')) {
        let second = toks.get(i + 2)?.name()?;
        return Some((second, i + 3));
    }
    Some((first, i + 1))
}

/// Skips `IF NOT EXISTS` / `IF EXISTS` at `i`; says whether it was there.
fn skip_if_exists(toks: &[Token], i: &mut usize) -> bool {
    if toks.get(*i).is_some_and(|t| t.is_word("IF")) {
        while *i < toks.len() && !toks[*i].is_word("EXISTS") {
            *i += 1;
        }
        *i += 1;
        return true;
    }
    false
}

// ---------------------------------------------------------------- statement kinds

/// What a traced statement is, as far as the rules care.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    CreateTable {
        name: String,
        if_not_exists: bool,
    },
    CreateIndex,
    CreateTrigger {
        name: String,
        table: String,
    },
    /// A view or a virtual table: a new object.
    CreateOther,
    AlterAdd,
    AlterRenameTable {
        table: String,
        to: String,
    },
    AlterOther {
        table: String,
        what: String,
    },
    Drop {
        what: String,
        name: String,
    },
    Dml {
        verb: String,
        table: String,
    },
    Select,
    Vacuum,
    Empty,
    Other {
        word: String,
    },
}

fn classify(toks: &[Token]) -> Kind {
    let words: Vec<&Token> = toks.iter().filter(|t| t.depth == 0).collect();
    let Some(first) = words.first() else {
        return Kind::Empty;
    };
    let word = match &first.tok {
        Tok::Word(w) => w.to_ascii_uppercase(),
        _ => return Kind::Other { word: "?".into() },
    };
    let other = || Kind::Other { word: word.clone() };
    match word.as_str() {
        "CREATE" => classify_create(toks).unwrap_or_else(other),
        "ALTER" => classify_alter(toks).unwrap_or_else(other),
        "DROP" => {
            let what = toks.get(1).and_then(Token::name).unwrap_or_default();
            let mut i = 2;
            skip_if_exists(toks, &mut i);
            match qualified_name(toks, i) {
                Some((name, _)) => Kind::Drop {
                    what: what.to_ascii_uppercase(),
                    name,
                },
                None => other(),
            }
        }
        "INSERT" | "REPLACE" | "UPDATE" | "DELETE" => dml(toks, 0).unwrap_or_else(other),
        "WITH" => {
            // The verb is the first top-level keyword after the common table expressions.
            let at = toks.iter().position(|t| {
                t.depth == 0
                    && ["INSERT", "REPLACE", "UPDATE", "DELETE", "SELECT", "VALUES"]
                        .iter()
                        .any(|w| t.is_word(w))
            });
            match at {
                Some(i) if toks[i].is_word("SELECT") || toks[i].is_word("VALUES") => Kind::Select,
                Some(i) => dml(toks, i).unwrap_or_else(other),
                None => other(),
            }
        }
        "SELECT" | "VALUES" | "EXPLAIN" => Kind::Select,
        "VACUUM" => Kind::Vacuum,
        _ => other(),
    }
}

/// `INSERT [OR x] INTO t`, `REPLACE INTO t`, `UPDATE [OR x] t`, `DELETE FROM t` at `i`.
fn dml(toks: &[Token], i: usize) -> Option<Kind> {
    let verb = match &toks.get(i)?.tok {
        Tok::Word(w) => w.to_ascii_uppercase(),
        _ => return None,
    };
    let mut j = i + 1;
    if toks.get(j).is_some_and(|t| t.is_word("OR")) {
        j += 2;
    }
    if toks
        .get(j)
        .is_some_and(|t| t.is_word("INTO") || t.is_word("FROM"))
    {
        j += 1;
    }
    let (table, _) = qualified_name(toks, j)?;
    Some(Kind::Dml { verb, table })
}

fn classify_create(toks: &[Token]) -> Option<Kind> {
    let mut i = 1;
    while toks
        .get(i)
        .is_some_and(|t| t.is_word("TEMP") || t.is_word("TEMPORARY") || t.is_word("UNIQUE"))
    {
        i += 1;
    }
    let what = toks.get(i)?.name()?.to_ascii_uppercase();
    i += 1;
    let if_not_exists = skip_if_exists(toks, &mut i);
    let (name, after) = qualified_name(toks, i)?;
    match what.as_str() {
        "TABLE" => Some(Kind::CreateTable {
            name,
            if_not_exists,
        }),
        "INDEX" => Some(Kind::CreateIndex),
        "TRIGGER" => {
            let on = (after..toks.len()).find(|&j| toks[j].depth == 0 && toks[j].is_word("ON"))?;
            let (table, _) = qualified_name(toks, on + 1)?;
            Some(Kind::CreateTrigger { name, table })
        }
        "VIEW" | "VIRTUAL" => Some(Kind::CreateOther),
        _ => None,
    }
}

fn classify_alter(toks: &[Token]) -> Option<Kind> {
    if !toks.get(1)?.is_word("TABLE") {
        return None;
    }
    let (table, i) = qualified_name(toks, 2)?;
    let verb = toks.get(i)?;
    if verb.is_word("ADD") {
        return Some(Kind::AlterAdd);
    }
    if verb.is_word("RENAME") && toks.get(i + 1).is_some_and(|t| t.is_word("TO")) {
        let (to, _) = qualified_name(toks, i + 2)?;
        return Some(Kind::AlterRenameTable { table, to });
    }
    let what = toks[i..]
        .iter()
        .take(2)
        .filter_map(|t| match &t.tok {
            Tok::Word(w) => Some(w.to_ascii_uppercase()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ");
    Some(Kind::AlterOther { table, what })
}

/// The statements of a trigger's body (between its top-level BEGIN and END).
fn trigger_body(create: &str) -> Vec<Vec<Token>> {
    let toks = tokenize(create);
    let Some(begin) = toks.iter().position(|t| t.depth == 0 && t.is_word("BEGIN")) else {
        return Vec::new();
    };
    let end = toks
        .iter()
        .rposition(|t| t.depth == 0 && t.is_word("END"))
        .unwrap_or(toks.len());
    toks[begin + 1..end.max(begin + 1)]
        .split(|t| t.depth == 0 && t.tok == Tok::Punct(';'))
        .filter(|s| !s.is_empty())
        .map(<[Token]>::to_vec)
        .collect()
}

// ---------------------------------------------------------------- snapshots

#[derive(Clone, Debug, PartialEq, Eq)]
struct Object {
    kind: String,
    table: String,
    rootpage: i64,
    sql: Option<String>,
}

/// `sqlite_schema`, keyed by lowercased name.
type Schema = BTreeMap<String, Object>;

fn read_schema(conn: &Connection) -> rusqlite::Result<Schema> {
    let mut stmt = conn.prepare(sql::SCHEMA)?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(1)?.to_ascii_lowercase(),
            Object {
                kind: r.get(0)?,
                table: r.get::<_, String>(2)?.to_ascii_lowercase(),
                rootpage: r.get::<_, Option<i64>>(3)?.unwrap_or_default(),
                sql: r.get(4)?,
            },
        ))
    })?;
    rows.collect()
}

fn of_kind<'s>(
    schema: &'s Schema,
    kind: &'s str,
) -> impl Iterator<Item = (&'s String, &'s Object)> {
    schema.iter().filter(move |(_, o)| o.kind == kind)
}

#[derive(Clone, Debug)]
struct Column {
    name: String,
    notnull: bool,
    default: Option<String>,
    pk: bool,
    hidden: i64,
}

fn columns(conn: &Connection, table: &str) -> rusqlite::Result<Vec<Column>> {
    let mut stmt = conn.prepare_cached(sql::COLUMNS)?;
    let rows = stmt.query_map(params![table], |r| {
        Ok(Column {
            name: r.get(0)?,
            notnull: r.get::<_, i64>(1)? != 0,
            default: r.get(2)?,
            pk: r.get::<_, i64>(3)? != 0,
            hidden: r.get(4)?,
        })
    })?;
    rows.collect()
}

/// One stored value, compared exactly (text as its bytes, reals by their bits).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Cell {
    Null,
    Int(i64),
    Real(u64),
    Text(Vec<u8>),
    Blob(Vec<u8>),
}

impl From<ValueRef<'_>> for Cell {
    fn from(v: ValueRef<'_>) -> Self {
        match v {
            ValueRef::Null => Cell::Null,
            ValueRef::Integer(i) => Cell::Int(i),
            ValueRef::Real(f) => Cell::Real(f.to_bits()),
            ValueRef::Text(t) => Cell::Text(t.to_vec()),
            ValueRef::Blob(b) => Cell::Blob(b.to_vec()),
        }
    }
}

impl ToSql for Cell {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Cell::Null => ValueRef::Null,
            Cell::Int(i) => ValueRef::Integer(*i),
            Cell::Real(b) => ValueRef::Real(f64::from_bits(*b)),
            Cell::Text(t) => ValueRef::Text(t),
            Cell::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

/// An existing table as seeded: how its rows are addressed, its ordinary columns and its rows
/// (key cells first), sorted.
#[derive(Debug)]
struct Seeded {
    key: Vec<String>,
    cols: Vec<String>,
    columns: Vec<Column>,
    rows: Vec<Vec<Cell>>,
}

fn read_rows(
    conn: &Connection,
    table: &str,
    key: &[String],
    cols: &[String],
) -> rusqlite::Result<Vec<Vec<Cell>>> {
    let mut stmt = conn.prepare(&sql::select_rows(table, key, cols))?;
    let width = key.len() + cols.len();
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(
            (0..width)
                .map(|i| row.get_ref(i).map(Cell::from))
                .collect::<rusqlite::Result<_>>()?,
        );
    }
    // Compared as a sorted list, so a changed collation cannot reorder what is compared.
    out.sort();
    Ok(out)
}

fn read_seeded(conn: &Connection, table: &str) -> rusqlite::Result<Seeded> {
    let columns = columns(conn, table)?;
    let cols: Vec<String> = columns
        .iter()
        .filter(|c| c.hidden == 0)
        .map(|c| c.name.clone())
        .collect();
    let without_rowid: i64 = conn
        .query_row(sql::WITHOUT_ROWID, params![table], |r| r.get(0))
        .unwrap_or(0);
    let key = if without_rowid != 0 {
        // pragma order is cid order; the key's order does not matter for addressing a row.
        columns
            .iter()
            .filter(|c| c.pk)
            .map(|c| c.name.clone())
            .collect()
    } else {
        vec!["rowid".to_owned()]
    };
    let rows = read_rows(conn, table, &key, &cols)?;
    Ok(Seeded {
        key,
        cols,
        columns,
        rows,
    })
}

// ---------------------------------------------------------------- the check

thread_local! {
    /// Statements the trace callback saw on this thread (the check runs on one blocking
    /// thread from `BEGIN IMMEDIATE` to `ROLLBACK`).
    static TRACED: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

fn record(event: TraceEvent<'_>) {
    if let TraceEvent::Stmt(_, text) = event {
        TRACED.with(|t| t.borrow_mut().push(text.to_owned()));
    }
}

struct Verdict(Vec<Violation>);

impl Verdict {
    fn add(&mut self, rule: Rule, table: Option<&str>, detail: impl Into<String>) {
        let v = Violation {
            rule,
            table: table.map(str::to_owned),
            detail: detail.into(),
        };
        if !self.0.contains(&v) {
            self.0.push(v);
        }
    }
}

/// A SQLite error as one line (SQLite's messages name objects, never row values).
fn one_line(e: rusqlite::Error) -> String {
    map(e).to_string().replace('\n', " ")
}

fn inspect(path: &Path, opts: &SqliteOptions, statements: &[String]) -> Result<Vec<Violation>> {
    let conn = files::connect(path, opts)?;
    let before = read_schema(&conn).map_err(map)?;
    let mut seeded = BTreeMap::new();
    for (name, _) in of_kind(&before, "table") {
        seeded.insert(name.clone(), read_seeded(&conn, name).map_err(map)?);
    }
    conn.execute_batch(crate::sql::BEGIN_IMMEDIATE)
        .map_err(map)?;
    let mut verdict = Verdict(Vec::new());

    TRACED.with(|t| t.borrow_mut().clear());
    conn.trace_v2(TraceEventCodes::SQLITE_TRACE_STMT, Some(record));
    for (i, statement) in statements.iter().enumerate() {
        if let Err(e) = conn.execute_batch(statement) {
            verdict.add(
                Rule::Failed,
                None,
                format!(
                    "statement {} failed inside the transaction: {}",
                    i + 1,
                    one_line(e)
                ),
            );
            break;
        }
        if conn.is_autocommit() {
            verdict.add(
                Rule::Failed,
                None,
                format!("statement {} ended the migration transaction", i + 1),
            );
            break;
        }
    }
    conn.trace_v2(TraceEventCodes::empty(), None);
    let traced = TRACED.with(|t| std::mem::take(&mut *t.borrow_mut()));

    judge_statements(&traced, &before, &mut verdict);
    match read_schema(&conn) {
        Ok(after) => {
            judge_schema(&conn, &before, &after, &seeded, &mut verdict);
            // A table that is gone is reported once, by its definition.
            seeded.retain(|t, _| after.get(t).is_some_and(|o| o.kind == "table"));
            judge_rows(&conn, &seeded, &mut verdict);
            if !conn.is_autocommit() {
                judge_old_writes(&conn, &seeded, &mut verdict);
            }
        }
        Err(e) => verdict.add(
            Rule::Failed,
            None,
            format!(
                "the schema cannot be read after the revision: {}",
                one_line(e)
            ),
        ),
    }
    if !conn.is_autocommit() {
        conn.execute_batch(crate::sql::ROLLBACK).map_err(map)?;
    }
    Ok(verdict.0)
}

fn judge_statements(traced: &[String], before: &Schema, v: &mut Verdict) {
    let existing_table = |name: &str| {
        name.starts_with("sqlite_")
            || BOOKKEEPING_TABLES.contains(&name)
            || before.get(name).is_some_and(|o| o.kind == "table")
    };
    // Trigger texts created during the revision, so a trigger that fires can be judged by
    // what its body does.
    let mut created_triggers: BTreeMap<String, String> = BTreeMap::new();
    let mut queue: Vec<(Vec<Token>, String)> = Vec::new();
    for text in traced {
        // trace_v2 reports the start of a trigger program as `-- TRIGGER name`.
        let marker = text
            .trim()
            .strip_prefix("-- TRIGGER ")
            .filter(|n| !n.contains('\n'));
        if let Some(name) = marker {
            queue.push((Vec::new(), name.trim().to_ascii_lowercase()));
            continue;
        }
        let toks = tokenize(text);
        if let Kind::CreateTrigger { name, .. } = classify(&toks) {
            created_triggers.insert(name, text.clone());
        }
        queue.push((toks, String::new()));
    }
    for (toks, fired) in queue {
        if !fired.is_empty() {
            // A trigger that existed before fires only on a write to an existing table, which
            // is refused on its own; a new one is judged by its body.
            if let Some(text) = created_triggers.get(&fired) {
                for stmt in trigger_body(text) {
                    judge_kind(&classify(&stmt), before, &existing_table, Some(&fired), v);
                }
            }
            continue;
        }
        judge_kind(&classify(&toks), before, &existing_table, None, v);
    }
}

fn judge_kind(
    kind: &Kind,
    before: &Schema,
    existing_table: &dyn Fn(&str) -> bool,
    via_trigger: Option<&str>,
    v: &mut Verdict,
) {
    let via = via_trigger.map_or(String::new(), |t| format!(" (in trigger {t})"));
    match kind {
        Kind::CreateTable {
            name,
            if_not_exists,
        } => {
            if existing_table(name) && !if_not_exists {
                v.add(
                    Rule::StatementKind,
                    Some(name),
                    format!("CREATE TABLE recreates an existing table{via}"),
                );
            }
        }
        Kind::CreateIndex | Kind::CreateOther | Kind::AlterAdd | Kind::Select | Kind::Empty => {}
        Kind::CreateTrigger { table, .. } => {
            if existing_table(table) {
                v.add(
                    Rule::Trigger,
                    Some(table),
                    format!("CREATE TRIGGER on an existing table{via}"),
                );
            }
        }
        Kind::AlterRenameTable { table, to } => {
            if existing_table(table) {
                v.add(
                    Rule::StatementKind,
                    Some(table),
                    format!("ALTER TABLE … RENAME TO renames an existing table{via}"),
                );
            }
            if existing_table(to) {
                v.add(
                    Rule::StatementKind,
                    Some(to),
                    format!("ALTER TABLE … RENAME TO takes an existing table's name{via}"),
                );
            }
        }
        Kind::AlterOther { table, what } => {
            if existing_table(table) {
                v.add(
                    Rule::StatementKind,
                    Some(table),
                    format!("ALTER TABLE … {what} on an existing table{via}"),
                );
            }
        }
        Kind::Drop { what, name } => {
            if let Some(o) = before.get(name) {
                v.add(
                    Rule::StatementKind,
                    Some(&o.table),
                    format!("DROP {what} {name} drops an existing object{via}"),
                );
            } else if existing_table(name) {
                v.add(
                    Rule::StatementKind,
                    Some(name),
                    format!("DROP {what} on an internal table{via}"),
                );
            }
        }
        Kind::Dml { verb, table } => {
            if existing_table(table) {
                v.add(
                    Rule::StatementKind,
                    Some(table),
                    format!("{verb} on an existing table{via}"),
                );
            }
        }
        Kind::Vacuum => v.add(
            Rule::StatementKind,
            None,
            format!("VACUUM rewrites every table{via}"),
        ),
        Kind::Other { word } => v.add(
            Rule::Unrecognised,
            None,
            format!("{word} statement not recognised by the check; for review{via}"),
        ),
    }
}

/// Whether a column default is a literal that cannot fail (SQLite stores the default as
/// written). `CURRENT_*` and parenthesised expressions are not.
fn literal_default(text: &str) -> bool {
    let t = text.trim();
    let upper = t.to_ascii_uppercase();
    if ["NULL", "TRUE", "FALSE"].contains(&upper.as_str()) {
        return true;
    }
    let toks = tokenize(t);
    match toks.as_slice() {
        [Token {
            tok: Tok::Str(_), ..
        }] => true,
        [Token {
            tok: Tok::Word(x), ..
        }, Token {
            tok: Tok::Str(h), ..
        }] if x.eq_ignore_ascii_case("x") => {
            h.len() % 2 == 0 && h.chars().all(|c| c.is_ascii_hexdigit())
        }
        _ => {
            let digits = t.trim_start_matches(['+', '-']).trim_start();
            digits.parse::<f64>().is_ok_and(f64::is_finite)
                || digits
                    .strip_prefix("0x")
                    .or_else(|| digits.strip_prefix("0X"))
                    .is_some_and(|h| !h.is_empty() && i64::from_str_radix(h, 16).is_ok())
        }
    }
}

/// The column definitions ADD COLUMN inserted: `new` is `old` with `, <definitions>` inserted
/// at one place, which ADD COLUMN chooses after the last column definition (before any table
/// constraint, or the closing parenthesis). `None` when `new` is not of that shape.
fn inserted_definitions(old: &str, new: &str) -> Option<Vec<Vec<Token>>> {
    let grown = new.len().checked_sub(old.len()).filter(|g| *g > 0)?;
    let prefix = old
        .bytes()
        .zip(new.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    let suffix = old
        .bytes()
        .rev()
        .zip(new.bytes().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let lowest = old.len().saturating_sub(suffix);
    (lowest..=prefix.min(old.len())).find_map(|p| {
        if !old.is_char_boundary(p) || !new.is_char_boundary(p) || !new.is_char_boundary(p + grown)
        {
            return None;
        }
        let rest = old[p..].trim_start();
        if !(rest.starts_with(',') || rest.starts_with(')')) || new[p + grown..] != old[p..] {
            return None;
        }
        let toks = tokenize(&new[p..p + grown]);
        if toks.first()?.tok != Tok::Punct(',') {
            return None;
        }
        Some(
            toks[1..]
                .split(|t| t.depth == 0 && t.tok == Tok::Punct(','))
                .map(<[Token]>::to_vec)
                .collect(),
        )
    })
}

fn judge_schema(
    conn: &Connection,
    before: &Schema,
    after: &Schema,
    seeded: &BTreeMap<String, Seeded>,
    v: &mut Verdict,
) {
    for (name, old) in before {
        let new = after.get(name);
        match old.kind.as_str() {
            "table" => judge_table(conn, name, old, new, seeded.get(name), v),
            "index" => {
                if new != Some(old) {
                    let what = if new.is_some() {
                        "was changed or replaced"
                    } else {
                        "was dropped"
                    };
                    v.add(
                        Rule::Index,
                        Some(&old.table),
                        format!("existing index {name} {what}"),
                    );
                }
            }
            "trigger" => {
                if new != Some(old) {
                    let what = if new.is_some() {
                        "was changed or replaced"
                    } else {
                        "was dropped"
                    };
                    v.add(
                        Rule::Trigger,
                        Some(&old.table),
                        format!("existing trigger {name} {what}"),
                    );
                }
            }
            _ => {
                if new.map(|n| (&n.kind, &n.sql)) != Some((&old.kind, &old.sql)) {
                    v.add(
                        Rule::Definition,
                        Some(&old.table),
                        format!("existing {} {name} was changed or dropped", old.kind),
                    );
                }
            }
        }
    }
    let existing = |t: &str| before.get(t).is_some_and(|o| o.kind == "table");
    for (name, obj) in after.iter().filter(|(n, _)| !before.contains_key(*n)) {
        if !existing(&obj.table) {
            continue;
        }
        match obj.kind.as_str() {
            "index" => judge_new_index(conn, name, obj, v),
            "trigger" => v.add(
                Rule::Trigger,
                Some(&obj.table),
                format!("new trigger {name} on an existing table"),
            ),
            _ => {}
        }
    }
}

fn judge_table(
    conn: &Connection,
    name: &str,
    old: &Object,
    new: Option<&Object>,
    seeded: Option<&Seeded>,
    v: &mut Verdict,
) {
    let Some(new) = new.filter(|n| n.kind == "table") else {
        v.add(Rule::Definition, Some(name), "the table is gone");
        return;
    };
    if new.rootpage != old.rootpage {
        v.add(
            Rule::Definition,
            Some(name),
            "the table was rebuilt (its storage moved)",
        );
    }
    let (Some(old_sql), Some(new_sql)) = (&old.sql, &new.sql) else {
        return;
    };
    if old_sql == new_sql {
        return;
    }
    let Some(defs) = inserted_definitions(old_sql, new_sql) else {
        v.add(
            Rule::Definition,
            Some(name),
            "the definition is not the old one plus added columns (rebuilt or altered)",
        );
        return;
    };
    for def in &defs {
        let col = def.first().and_then(Token::name).unwrap_or_default();
        // The first token names the column; an unquoted constraint keyword there means a table
        // constraint was inserted, not a column.
        let first_is_name = def.first().is_some_and(|t| matches!(t.tok, Tok::Ident(_)));
        for t in def
            .iter()
            .skip(usize::from(first_is_name))
            .filter(|t| t.depth == 0)
        {
            if t.is_word("GENERATED") || t.is_word("AS") {
                v.add(
                    Rule::NewColumn,
                    Some(name),
                    format!("new column {col} is generated"),
                );
            }
            for kw in [
                "CHECK",
                "UNIQUE",
                "REFERENCES",
                "PRIMARY",
                "CONSTRAINT",
                "FOREIGN",
            ] {
                if t.is_word(kw) {
                    v.add(
                        Rule::NewColumn,
                        Some(name),
                        format!("new column {col} has {kw}"),
                    );
                }
            }
        }
    }
    let Some(seeded) = seeded else { return };
    let now = match columns(conn, name) {
        Ok(c) => c,
        Err(e) => {
            v.add(
                Rule::Definition,
                Some(name),
                format!("its columns cannot be read: {}", one_line(e)),
            );
            return;
        }
    };
    let old_names: BTreeSet<&str> = seeded.columns.iter().map(|c| c.name.as_str()).collect();
    for c in now.iter().filter(|c| !old_names.contains(c.name.as_str())) {
        if c.hidden == 2 || c.hidden == 3 {
            v.add(
                Rule::NewColumn,
                Some(name),
                format!("new column {} is generated", c.name),
            );
        }
        if c.pk {
            v.add(
                Rule::NewColumn,
                Some(name),
                format!("new column {} is in the primary key", c.name),
            );
        }
        match &c.default {
            None if c.notnull => {
                v.add(
                    Rule::NewColumn,
                    Some(name),
                    format!("new column {} is NOT NULL without a default", c.name),
                );
            }
            Some(d) if !literal_default(d) => {
                v.add(
                    Rule::NewColumn,
                    Some(name),
                    format!("new column {} has a non-literal default", c.name),
                );
            }
            _ => {}
        }
    }
}

fn judge_new_index(conn: &Connection, name: &str, obj: &Object, v: &mut Verdict) {
    let table = obj.table.as_str();
    if obj.sql.is_none() {
        v.add(
            Rule::Index,
            Some(table),
            format!("new constraint index {name}"),
        );
        return;
    }
    let flags: rusqlite::Result<(bool, bool)> =
        conn.query_row(sql::INDEX_FLAGS, params![table, name], |r| {
            Ok((r.get::<_, i64>(0)? != 0, r.get::<_, i64>(1)? != 0))
        });
    match flags {
        Ok((unique, partial)) => {
            if unique {
                v.add(
                    Rule::Index,
                    Some(table),
                    format!("new index {name} is unique"),
                );
            }
            if partial {
                v.add(
                    Rule::Index,
                    Some(table),
                    format!("new index {name} is partial"),
                );
            }
        }
        Err(e) => v.add(
            Rule::Index,
            Some(table),
            format!("new index {name} cannot be inspected: {}", one_line(e)),
        ),
    }
    let cids: rusqlite::Result<Vec<i64>> = conn
        .prepare(sql::INDEX_KEY_COLUMNS)
        .and_then(|mut s| s.query_map(params![name], |r| r.get(0))?.collect());
    if cids.map_or(true, |c| c.contains(&-2)) {
        v.add(
            Rule::Index,
            Some(table),
            format!("new index {name} is on an expression"),
        );
    }
}

fn judge_rows(conn: &Connection, seeded: &BTreeMap<String, Seeded>, v: &mut Verdict) {
    for (table, s) in seeded {
        match read_rows(conn, table, &s.key, &s.cols) {
            Ok(rows) if rows == s.rows => {}
            Ok(rows) => v.add(
                Rule::Rows,
                Some(table),
                format!(
                    "seeded rows changed ({} before, {} after)",
                    s.rows.len(),
                    rows.len()
                ),
            ),
            Err(e) => v.add(
                Rule::Rows,
                Some(table),
                format!("seeded rows cannot be read: {}", one_line(e)),
            ),
        }
    }
}

/// Deletes one seeded row, inserts it back naming only the old columns, and updates it to
/// its own values, each required to touch exactly one row and leave no foreign key broken.
fn judge_old_writes(conn: &Connection, seeded: &BTreeMap<String, Seeded>, v: &mut Verdict) {
    if let Err(e) = conn.execute_batch(sql::DEFER_FOREIGN_KEYS) {
        v.add(
            Rule::OldWrites,
            None,
            format!("cannot prepare the old-code writes: {}", one_line(e)),
        );
        return;
    }
    for (table, s) in seeded.iter().filter(|(_, s)| !s.rows.is_empty()) {
        // A row as it is now: rows the revision changed are reported on their own.
        let row = match read_rows(conn, table, &s.key, &s.cols) {
            Ok(rows) => match rows.into_iter().next() {
                Some(row) => row,
                None => continue,
            },
            Err(e) => {
                v.add(
                    Rule::OldWrites,
                    Some(table),
                    format!("rows cannot be read with the old columns: {}", one_line(e)),
                );
                continue;
            }
        };
        let (key, values) = row.split_at(s.key.len());
        if let Err(e) = conn.execute_batch(sql::SAVEPOINT) {
            v.add(
                Rule::OldWrites,
                Some(table),
                format!("cannot open a savepoint: {}", one_line(e)),
            );
            return;
        }
        let result = old_writes(conn, table, s, key, values);
        let _ = conn.execute_batch(sql::ROLLBACK_TO);
        let _ = conn.execute_batch(sql::RELEASE);
        if let Err(what) = result {
            v.add(Rule::OldWrites, Some(table), what);
        }
    }
}

fn old_writes(
    conn: &Connection,
    table: &str,
    s: &Seeded,
    key: &[Cell],
    values: &[Cell],
) -> std::result::Result<(), String> {
    let one = |verb: &str, r: rusqlite::Result<usize>| match r {
        Ok(1) => Ok(()),
        Ok(n) => Err(format!(
            "{verb} naming only the old columns touched {n} rows, not 1"
        )),
        Err(e) => Err(format!(
            "{verb} naming only the old columns failed: {}",
            one_line(e)
        )),
    };
    one(
        "DELETE",
        conn.execute(&sql::delete_row(table, &s.key), params_from_iter(key)),
    )?;
    one(
        "INSERT",
        conn.execute(&sql::insert_row(table, &s.cols), params_from_iter(values)),
    )?;
    let new_key: Vec<Cell> = if s.key == ["rowid"] {
        vec![Cell::Int(conn.last_insert_rowid())]
    } else {
        s.key
            .iter()
            .map(|k| {
                s.cols
                    .iter()
                    .position(|c| c == k)
                    .and_then(|i| values.get(i))
                    .cloned()
                    .unwrap_or(Cell::Null)
            })
            .collect()
    };
    one(
        "UPDATE",
        conn.execute(
            &sql::update_row(table, &s.cols, &s.key),
            params_from_iter(values.iter().chain(&new_key)),
        ),
    )?;
    let broken = conn.prepare(sql::FOREIGN_KEY_CHECK).and_then(|mut st| {
        st.query_map([], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<String>>>()
    });
    match broken {
        Ok(rows) if rows.is_empty() => Ok(()),
        Ok(rows) => Err(format!(
            "writes naming only the old columns leave a broken foreign key in {}",
            rows[0]
        )),
        Err(e) => Err(format!("the foreign-key check failed: {}", one_line(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(s: &str) -> Kind {
        classify(&tokenize(s))
    }

    #[test]
    fn statements_are_classified_by_verb_and_target() {
        assert_eq!(
            kind("WITH d AS (SELECT 1 FROM epoch_event) DELETE FROM \"epoch_event\" WHERE 1"),
            Kind::Dml {
                verb: "DELETE".into(),
                table: "epoch_event".into()
            }
        );
        assert_eq!(
            kind("insert or replace into main.Epoch_Head (a) values (1)"),
            Kind::Dml {
                verb: "INSERT".into(),
                table: "epoch_head".into()
            }
        );
        assert_eq!(kind("  -- note\nALTER TABLE t ADD c TEXT"), Kind::AlterAdd);
        assert_eq!(
            kind("ALTER TABLE t RENAME TO u"),
            Kind::AlterRenameTable {
                table: "t".into(),
                to: "u".into()
            }
        );
        assert_eq!(
            kind("ALTER TABLE t RENAME COLUMN a TO b"),
            Kind::AlterOther {
                table: "t".into(),
                what: "RENAME COLUMN".into()
            }
        );
        assert_eq!(
            kind("CREATE TRIGGER IF NOT EXISTS g AFTER UPDATE OF a ON t BEGIN DELETE FROM u; END"),
            Kind::CreateTrigger {
                name: "g".into(),
                table: "t".into()
            }
        );
        assert_eq!(
            kind("DROP INDEX IF EXISTS i"),
            Kind::Drop {
                what: "INDEX".into(),
                name: "i".into()
            }
        );
        assert_eq!(
            kind("PRAGMA user_version = 2"),
            Kind::Other {
                word: "PRAGMA".into()
            }
        );
    }

    #[test]
    fn inserted_definitions_follow_add_column() {
        let old = "CREATE TABLE t (a INT, b TEXT, PRIMARY KEY (a))";
        let new = "CREATE TABLE t (a INT, b TEXT, c TEXT DEFAULT 'x,y', d INT CHECK (d > 0), PRIMARY KEY (a))";
        let defs = inserted_definitions(old, new).expect("an insertion");
        assert_eq!(defs.len(), 2);
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(old).unwrap();
        conn.execute_batch(
            "ALTER TABLE t ADD COLUMN c TEXT DEFAULT 'x,y'; ALTER TABLE t ADD d INT CHECK (d > 0)",
        )
        .unwrap();
        let stored: String = conn
            .query_row("SELECT sql FROM sqlite_schema", [], |r| r.get(0))
            .unwrap();
        assert_eq!(stored, new);
        assert!(inserted_definitions(
            old,
            "CREATE TABLE t (a INT, b TEXT COLLATE NOCASE, PRIMARY KEY (a))"
        )
        .is_none());
    }

    #[test]
    fn only_literal_defaults_pass() {
        for ok in ["0", "-1.5", "- 5", "'x'", "NULL", "true", "X'00ff'", "0x1F"] {
            assert!(literal_default(ok), "{ok}");
        }
        for bad in [
            "(length('x') * 2)",
            "1+1",
            "CURRENT_TIMESTAMP",
            "random()",
            "'a' || 'b'",
        ] {
            assert!(!literal_default(bad), "{bad}");
        }
    }
}

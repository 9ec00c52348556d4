//! One synthesized row per table: how the additivity check fills tables cairn's write paths do
//! not (an application's tables), so their rows and old-column writes are checked too.
//!
//! The row must be one an older writer could have written: columns no writer may name
//! (generated columns, `GENERATED ALWAYS AS IDENTITY`) are left to the engine, and a row the
//! table refuses (a CHECK, an enum, a partition bound that routes it nowhere) is retried with
//! values the table's own definition names ([`ColumnSpec::hints`]), see [`candidate_rows`].

use cairn_core::schema::Dialect;

/// One column of a table, as an engine reads it from the throwaway store's catalog.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ColumnSpec {
    /// The column's name.
    pub name: String,
    /// The declared type as the catalog shows it (SQLite: the declared text, possibly empty;
    /// Postgres: `format_type` output, e.g. `character varying(20)`, `integer[]`).
    pub declared_type: String,
    /// Whether the column is NOT NULL.
    pub not_null: bool,
    /// Whether the column has a default.
    pub has_default: bool,
    /// Whether no value may be given for it: a generated column, or a Postgres `GENERATED
    /// ALWAYS AS IDENTITY` column.
    pub generated: bool,
    /// Values the table's own definition names for this column, in the type's input syntax:
    /// an enum's labels, the literals of the CHECK constraints on it, its partition bounds
    /// (see [`super::hints::literals`]). Tried after the plain seed value.
    pub hints: Vec<String>,
    /// Whether a CHECK constraint or a partition key involves the column: its candidates
    /// then also include a few neighbours of the plain value (numbers) and, when the column
    /// may be left out, leaving it out (NULL or its default).
    pub constrained: bool,
}

impl ColumnSpec {
    /// A column of `declared_type` with no default, hints or constraint, nullable unless
    /// `not_null`.
    pub fn new(name: impl Into<String>, declared_type: impl Into<String>, not_null: bool) -> Self {
        Self {
            name: name.into(),
            declared_type: declared_type.into(),
            not_null,
            has_default: false,
            generated: false,
            hints: Vec::new(),
            constrained: false,
        }
    }
}

/// A synthesized value. SQLite binds it as is; Postgres takes [`SeedValue::text`], the type's
/// input syntax (e.g. through `json_populate_record(NULL::t, $1)` or `$1::text` cast to the
/// column's type), so one value fits integers, numerics, dates, UUIDs and JSON alike.
#[derive(Clone, PartialEq, Debug)]
pub enum SeedValue {
    /// An integer.
    Integer(i64),
    /// A floating-point or exact numeric.
    Real(f64),
    /// A boolean.
    Boolean(bool),
    /// Text (also the input syntax of dates, times, UUIDs, JSON, network types, arrays).
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

impl SeedValue {
    /// The value in the input syntax of its type (Postgres `bytea` hex form for bytes).
    pub fn text(&self) -> String {
        match self {
            SeedValue::Integer(n) => n.to_string(),
            SeedValue::Real(x) => x.to_string(),
            SeedValue::Boolean(b) => b.to_string(),
            SeedValue::Text(t) => t.clone(),
            SeedValue::Blob(b) => {
                let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
                format!("\\x{hex}")
            }
        }
    }
}

/// The value to store in a column of `declared_type`, or `None` for a type the check does not
/// know how to fill (a Postgres enum, domain or composite).
pub fn seed_value(dialect: Dialect, declared_type: &str) -> Option<SeedValue> {
    let t = declared_type.trim().to_ascii_lowercase();
    let text = |s: &str| Some(SeedValue::Text(s.to_owned()));
    if t.ends_with("[]") {
        return text("{}");
    }
    // Order matters: `timestamp` contains `time`, and on SQLite `interval` and `point` contain
    // `int`.
    if t.starts_with("timestamp") || t == "datetime" {
        return text("2026-11-30 12:00:00");
    }
    if t.starts_with("time") {
        return text("12:00:00");
    }
    if t == "date" {
        return text("2026-11-30");
    }
    if t.starts_with("interval") {
        return text("1 day");
    }
    if t.starts_with("bool") {
        return Some(SeedValue::Boolean(true));
    }
    if t == "uuid" {
        return text("00000000-0000-4000-8000-000000000001");
    }
    if t == "json" || t == "jsonb" {
        return text("{\"seed\": 1}");
    }
    if t == "inet" || t == "cidr" {
        return text("10.0.0.1");
    }
    if t.starts_with("macaddr") {
        return text("08:00:2b:01:02:03");
    }
    if t == "money" {
        return text("1.00");
    }
    let integer = match dialect {
        // SQLite's affinity rule: any declared type containing INT is an integer.
        Dialect::Sqlite => t.contains("int"),
        Dialect::Postgres => matches!(
            t.as_str(),
            "smallint"
                | "integer"
                | "bigint"
                | "int"
                | "int2"
                | "int4"
                | "int8"
                | "smallserial"
                | "serial"
                | "bigserial"
                | "serial4"
                | "serial8"
        ),
    };
    if integer {
        return Some(SeedValue::Integer(1));
    }
    if dialect == Dialect::Postgres && t.ends_with("range") {
        return text("empty");
    }
    if dialect == Dialect::Postgres && t == "point" {
        return text("(0,0)");
    }
    if t.contains("char") || t.contains("clob") || t.contains("text") || t == "name" {
        // A length limit (`varchar(2)`, `character(1)`) is honoured.
        let limit = t
            .split_once('(')
            .and_then(|(_, rest)| rest.trim_end_matches(')').trim().parse::<usize>().ok());
        let mut s = String::from("seed");
        if let Some(n) = limit {
            s.truncate(n.max(1));
        }
        return Some(SeedValue::Text(s));
    }
    if t.contains("blob") || t == "bytea" {
        return Some(SeedValue::Blob(vec![0x00, 0xff, b's']));
    }
    if t.contains("real")
        || t.contains("floa")
        || t.contains("doub")
        || t.starts_with("numeric")
        || t.starts_with("decimal")
    {
        // 0.5 fits every numeric(p, s) (it rounds to 0 or 1 when s = 0).
        return Some(SeedValue::Real(0.5));
    }
    match dialect {
        // SQLite: no declared type (BLOB affinity) takes anything; any other name has NUMERIC
        // affinity.
        Dialect::Sqlite if t.is_empty() => text("seed"),
        Dialect::Sqlite => Some(SeedValue::Integer(1)),
        Dialect::Postgres => None,
    }
}

/// How many candidate rows [`candidate_rows`] offers a table at most.
pub const MAX_CANDIDATES: usize = 64;

/// The values to try for one column, in order: `Some` a value, `None` leaving the column out.
/// Empty when the column must be named and no value is known.
fn choices(dialect: Dialect, c: &ColumnSpec) -> Vec<Option<SeedValue>> {
    let base = seed_value(dialect, &c.declared_type);
    let mut out: Vec<Option<SeedValue>> = Vec::new();
    let mut push = |v: Option<SeedValue>| {
        if !out.contains(&v) {
            out.push(v);
        }
    };
    if let Some(v) = &base {
        push(Some(v.clone()));
    }
    for h in &c.hints {
        match &base {
            Some(SeedValue::Integer(_)) => match h.parse::<i64>() {
                Ok(n) => {
                    for m in [n.checked_add(1), Some(n), n.checked_sub(1)]
                        .into_iter()
                        .flatten()
                    {
                        push(Some(SeedValue::Integer(m)));
                    }
                }
                // SQLite stores any value in any column; Postgres refuses it, and the next
                // candidate is tried.
                Err(_) => push(Some(SeedValue::Text(h.clone()))),
            },
            Some(SeedValue::Real(_)) => match h.parse::<f64>() {
                Ok(x) if x.is_finite() => {
                    for y in [x + 1.0, x, x - 1.0] {
                        push(Some(SeedValue::Real(y)));
                    }
                }
                _ => push(Some(SeedValue::Text(h.clone()))),
            },
            _ => push(Some(SeedValue::Text(h.clone()))),
        }
    }
    if c.constrained {
        match &base {
            Some(SeedValue::Integer(_)) => {
                for n in [2, 0, -1] {
                    push(Some(SeedValue::Integer(n)));
                }
            }
            Some(SeedValue::Real(_)) => {
                for x in [1.5, 0.0, -0.5] {
                    push(Some(SeedValue::Real(x)));
                }
            }
            _ => {}
        }
    }
    let may_omit = !c.not_null || c.has_default;
    if may_omit && (c.constrained || base.is_none() && c.hints.is_empty()) {
        push(None);
    }
    out
}

/// The rows to try, in order, for a table with `columns`, at most [`MAX_CANDIDATES`]; the
/// engine inserts them one by one until the table accepts one (a table that refuses them all
/// stays empty: its definition is still checked, its rows cannot be).
///
/// Each row names every column a writer may name (generated and identity-always columns are
/// left to the engine), so nullable and defaulted columns hold a value too; a column of a
/// type the check does not know is left out when it may be, or takes its hints. The first row
/// is the plain one: integers 1, text `seed`, so a foreign key between two seeded tables
/// usually finds its row when the tables are filled in creation order. A column's alternatives
/// are its hints (a literal `n` of a number column gives `n + 1`, `n` and `n - 1`, which
/// satisfy `>`, `>=`, `=`, `<=`, `<` against it), a few neighbours of the plain value when it
/// is constrained, and leaving it out when it may be. The second row takes every column's
/// first alternative at once (several single-column checks); the rest stray from the plain row
/// one change at a time, then two, and so on, constrained columns first.
///
/// Empty when a column that must be named (NOT NULL, no default) has no value at all (an
/// unknown type without hints).
pub fn candidate_rows(dialect: Dialect, columns: &[ColumnSpec]) -> Vec<Vec<(String, SeedValue)>> {
    let writable: Vec<&ColumnSpec> = columns.iter().filter(|c| !c.generated).collect();
    let options: Vec<Vec<Option<SeedValue>>> =
        writable.iter().map(|c| choices(dialect, c)).collect();
    if options.iter().any(Vec::is_empty) {
        return Vec::new();
    }
    // Rows in order of how far they stray from the plain row (the sum of the option indexes
    // chosen), so every single-column change comes before any pair of changes: a table with
    // several independent checks finds its row long before the bound. Among rows as far, the
    // constrained columns change first.
    let mut order: Vec<usize> = (0..writable.len())
        .filter(|&i| options[i].len() > 1)
        .collect();
    order.sort_by_key(|&i| !writable[i].constrained);
    let bounds: Vec<usize> = order.iter().map(|&i| options[i].len() - 1).collect();
    let mut picks = Vec::new();
    for distance in 0..=bounds.iter().sum::<usize>() {
        at_distance(&bounds, distance, &mut Vec::new(), &mut picks);
        if picks.len() >= MAX_CANDIDATES {
            break;
        }
    }
    // Second, right after the plain row: every varying column at its first alternative (the
    // usual shape: several single-column checks, each satisfied by its own first hint).
    if !bounds.is_empty() {
        let alternatives: Vec<usize> = bounds.iter().map(|_| 1).collect();
        picks.retain(|p| *p != alternatives);
        picks.insert(1.min(picks.len()), alternatives);
    }
    picks.truncate(MAX_CANDIDATES);
    picks
        .into_iter()
        .map(|pick| {
            let mut digits = vec![0usize; writable.len()];
            for (&i, d) in order.iter().zip(pick) {
                digits[i] = d;
            }
            writable
                .iter()
                .zip(&digits)
                .zip(&options)
                .filter_map(|((c, &d), o)| o[d].clone().map(|v| (c.name.clone(), v)))
                .collect()
        })
        .collect()
}

/// Appends to `out` every choice of one index per column (index `i` of column `k` at most
/// `bounds[k]`) whose indexes sum to `distance`, the first columns' indexes growing first;
/// stops adding once `out` holds [`MAX_CANDIDATES`].
fn at_distance(
    bounds: &[usize],
    distance: usize,
    prefix: &mut Vec<usize>,
    out: &mut Vec<Vec<usize>>,
) {
    if out.len() >= MAX_CANDIDATES {
        return;
    }
    let k = prefix.len();
    if k == bounds.len() {
        if distance == 0 {
            out.push(prefix.clone());
        }
        return;
    }
    let rest: usize = bounds[k + 1..].iter().sum();
    // This column takes what the later ones cannot, and at most its bound.
    let low = distance.saturating_sub(rest);
    for d in (low..=bounds[k].min(distance)).rev() {
        prefix.push(d);
        at_distance(bounds, distance - d, prefix, out);
        prefix.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, ty: &str, not_null: bool) -> ColumnSpec {
        ColumnSpec::new(name, ty, not_null)
    }

    fn first(columns: &[ColumnSpec]) -> Option<Vec<(String, SeedValue)>> {
        candidate_rows(Dialect::Postgres, columns)
            .into_iter()
            .next()
    }

    #[test]
    fn values_follow_declared_types_on_both_dialects() {
        use SeedValue::*;
        for d in [Dialect::Sqlite, Dialect::Postgres] {
            assert_eq!(seed_value(d, "BIGINT"), Some(Integer(1)));
            assert_eq!(seed_value(d, "integer"), Some(Integer(1)));
            assert_eq!(seed_value(d, "TEXT"), Some(Text("seed".into())));
            assert_eq!(
                seed_value(d, "character varying(2)"),
                Some(Text("se".into()))
            );
            assert_eq!(seed_value(d, "boolean"), Some(Boolean(true)));
            assert_eq!(seed_value(d, "numeric(10,2)"), Some(Real(0.5)));
            assert_eq!(seed_value(d, "double precision"), Some(Real(0.5)));
            assert!(matches!(
                seed_value(d, "timestamp with time zone"),
                Some(Text(_))
            ));
            assert!(matches!(seed_value(d, "interval"), Some(Text(t)) if t == "1 day"));
            assert!(matches!(seed_value(d, "bytea"), Some(Blob(_))));
            assert!(matches!(seed_value(d, "integer[]"), Some(Text(t)) if t == "{}"));
        }
        assert_eq!(seed_value(Dialect::Sqlite, ""), Some(Text("seed".into())));
        assert_eq!(seed_value(Dialect::Sqlite, "MONEYBAGS"), Some(Integer(1)));
        assert_eq!(seed_value(Dialect::Postgres, "mood"), None);
        assert_eq!(
            seed_value(Dialect::Postgres, "int4range"),
            Some(Text("empty".into()))
        );
        assert_eq!(
            seed_value(Dialect::Postgres, "point"),
            Some(Text("(0,0)".into()))
        );
        assert_eq!(seed_value(Dialect::Sqlite, "POINT"), Some(Integer(1)));
        assert_eq!(Blob(vec![0, 255]).text(), "\\x00ff");
    }

    #[test]
    fn rows_honour_not_null_and_leave_generated_columns_out() {
        let mut gen = col("g", "BIGINT", true);
        gen.generated = true;
        let row = first(&[
            col("id", "bigint", true),
            gen,
            col("m", "mood", false),
            col("n", "text", false),
        ])
        .unwrap();
        let names: Vec<&str> = row.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["id", "n"]);
        assert_eq!(
            first(&[col("m", "mood", true)]),
            None,
            "a required column of an unknown type cannot be filled"
        );
        let mut defaulted = col("m", "mood", true);
        defaulted.has_default = true;
        assert_eq!(first(&[defaulted]), Some(vec![]));
    }

    #[test]
    fn an_enum_takes_its_labels() {
        let mut mood = col("m", "mood", true);
        mood.hints = vec!["calm".into(), "busy".into()];
        let rows = candidate_rows(Dialect::Postgres, &[col("id", "bigint", true), mood]);
        let moods: Vec<&SeedValue> = rows.iter().map(|r| &r[1].1).collect();
        assert_eq!(
            moods,
            [
                &SeedValue::Text("calm".into()),
                &SeedValue::Text("busy".into())
            ]
        );
    }

    /// The candidates, as (column, value text) lists, until one satisfies `accepts`.
    fn first_accepted(
        columns: &[ColumnSpec],
        accepts: impl Fn(&[(String, SeedValue)]) -> bool,
    ) -> Option<Vec<(String, String)>> {
        candidate_rows(Dialect::Postgres, columns)
            .into_iter()
            .find(|r| accepts(r))
            .map(|r| r.into_iter().map(|(n, v)| (n, v.text())).collect())
    }

    fn int(row: &[(String, SeedValue)], name: &str) -> Option<i64> {
        row.iter().find(|(n, _)| n == name).map(|(_, v)| match v {
            SeedValue::Integer(n) => *n,
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn checks_are_satisfied_from_their_literals_and_neighbours() {
        // CHECK (qty > 5): 5 fails, 6 passes.
        let mut qty = col("qty", "integer", true);
        qty.hints = vec!["5".into()];
        qty.constrained = true;
        let found = first_accepted(&[col("id", "bigint", true), qty.clone()], |r| {
            int(r, "qty").is_some_and(|q| q > 5)
        });
        assert_eq!(found.unwrap()[1], ("qty".into(), "6".into()));
        // CHECK (lo < hi), no literals: neighbours.
        let mut lo = col("lo", "integer", true);
        lo.constrained = true;
        let hi = lo.clone();
        let hi = ColumnSpec {
            name: "hi".into(),
            ..hi
        };
        assert!(first_accepted(&[lo, hi], |r| int(r, "lo") < int(r, "hi")).is_some());
        // CHECK (status IN ('open', 'shut')) on a nullable column: a label, before NULL.
        let mut status = col("status", "text", false);
        status.hints = vec!["open".into(), "shut".into()];
        status.constrained = true;
        let rows = candidate_rows(Dialect::Postgres, &[status]);
        assert_eq!(
            rows[1],
            [("status".to_owned(), SeedValue::Text("open".into()))]
        );
        assert_eq!(rows.last().unwrap(), &Vec::new(), "left out (NULL) last");
        // A nullable constrained column may be left out (NULL passes a CHECK).
        qty.not_null = false;
        assert!(candidate_rows(Dialect::Postgres, &[qty])
            .iter()
            .any(Vec::is_empty));
    }

    #[test]
    fn several_single_column_checks_are_satisfied_together() {
        // CHECK (c_i > 10 * i) on eight columns: each needs its own hint, all at once.
        let cols: Vec<ColumnSpec> = (1..=8)
            .map(|i| {
                let mut c = col(&format!("c{i}"), "integer", true);
                c.hints = vec![(10 * i).to_string()];
                c.constrained = true;
                c
            })
            .collect();
        let found = first_accepted(&cols, |r| {
            (1..=8).all(|i| int(r, &format!("c{i}")).is_some_and(|v| v > 10 * i))
        });
        assert!(found.is_some());
    }

    #[test]
    fn candidates_are_bounded_and_start_with_the_plain_row() {
        let cols: Vec<ColumnSpec> = (0..6)
            .map(|i| {
                let mut c = col(&format!("c{i}"), "integer", true);
                c.hints = vec!["10".into(), "20".into()];
                c.constrained = true;
                c
            })
            .collect();
        let rows = candidate_rows(Dialect::Sqlite, &cols);
        assert_eq!(rows.len(), MAX_CANDIDATES);
        assert!(rows[0].iter().all(|(_, v)| *v == SeedValue::Integer(1)));
        let distinct: std::collections::BTreeSet<String> =
            rows.iter().map(|r| format!("{r:?}")).collect();
        assert_eq!(distinct.len(), rows.len(), "no row twice");
    }
}

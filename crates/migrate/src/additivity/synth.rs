//! One synthesized row per table: how the additivity check fills tables cairn's write paths do
//! not (an application's tables), so their rows and old-column writes are checked too.

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

/// One row for a table with `columns`: a value for every column a row may name (generated and
/// identity-always columns are left to the engine), so nullable and defaulted columns hold a
/// value too. A column of an unknown type is left out when it is nullable or defaulted.
/// Integer keys are 1 and text keys `seed` in every table, so a foreign key between two seeded
/// tables usually finds its row when the tables are filled in creation order.
///
/// `None` when a NOT NULL column without a default has an unknown type: the table cannot be
/// filled and stays empty (its definition is still checked; its rows cannot be).
pub fn synthesize_row(
    dialect: Dialect,
    columns: &[ColumnSpec],
) -> Option<Vec<(String, SeedValue)>> {
    let mut row = Vec::with_capacity(columns.len());
    for c in columns.iter().filter(|c| !c.generated) {
        match seed_value(dialect, &c.declared_type) {
            Some(v) => row.push((c.name.clone(), v)),
            None if c.not_null && !c.has_default => return None,
            None => {}
        }
    }
    Some(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, ty: &str, not_null: bool) -> ColumnSpec {
        ColumnSpec {
            name: name.into(),
            declared_type: ty.into(),
            not_null,
            has_default: false,
            generated: false,
        }
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
        let row = synthesize_row(
            Dialect::Postgres,
            &[
                col("id", "bigint", true),
                gen,
                col("m", "mood", false),
                col("n", "text", false),
            ],
        )
        .unwrap();
        let names: Vec<&str> = row.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["id", "n"]);
        assert_eq!(
            synthesize_row(Dialect::Postgres, &[col("m", "mood", true)]),
            None,
            "a required column of an unknown type cannot be filled"
        );
        let mut defaulted = col("m", "mood", true);
        defaulted.has_default = true;
        assert_eq!(
            synthesize_row(Dialect::Postgres, &[defaulted]),
            Some(vec![])
        );
    }
}

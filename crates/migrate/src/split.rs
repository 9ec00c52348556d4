//! Splitting a SQL file into statements.

use cairn_core::schema::Dialect;

/// Why a SQL text could not be split: a quote, comment or dollar-quoted body left open.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct SplitError {
    /// The 1-based line where the unterminated construct starts.
    pub line: usize,
    /// What is left open.
    pub reason: String,
}

/// Splits `sql` into its statements as `dialect` reads them.
///
/// A `;` ends a statement only outside string literals (`'…'` with `''`, and on Postgres
/// `E'…'` with backslash escapes), quoted identifiers (`"…"`; on SQLite also `` `…` `` and
/// `[…]`), parentheses, comments (`--` to the end of the line, `/* … */`, nested on Postgres),
/// Postgres dollar-quoted bodies (`$$ … $$`, `$tag$ … $tag$`), and the `BEGIN … END` body of a
/// SQLite `CREATE TRIGGER` or a Postgres `BEGIN ATOMIC … END` (where `CASE … END` nests). A last
/// statement without a `;` counts. Each statement is returned without its `;`, without the
/// comments and blank lines before it and without trailing whitespace; text holding only
/// comments and whitespace is no statement.
///
/// # Errors
/// [`SplitError`] for a literal, identifier, comment or body that is never closed.
pub fn split_statements(sql: &str, dialect: Dialect) -> Result<Vec<String>, SplitError> {
    let pg = dialect == Dialect::Postgres;
    let b = sql.as_bytes();
    let line_at = |pos: usize| sql[..pos].bytes().filter(|&c| c == b'\n').count() + 1;
    let open = |pos: usize, what: &str| SplitError {
        line: line_at(pos),
        reason: format!("{what} is never closed"),
    };
    let mut out = Vec::new();
    let mut code_start: Option<usize> = None;
    // The statement's first words (to recognise a trigger) and the word before this one.
    let mut words: Vec<String> = Vec::new();
    let mut prev = String::new();
    let mut depth = 0usize;
    // A `;` inside parentheses never ends a statement (a Postgres rule's `( … ; … )` actions).
    let mut parens = 0usize;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        match c {
            b'-' if next == Some(b'-') => {
                i = sql[i..].find('\n').map_or(b.len(), |n| i + n);
                continue;
            }
            b'/' if next == Some(b'*') => {
                let mut level = 0usize;
                let mut j = i;
                loop {
                    if j + 1 >= b.len() {
                        return Err(open(i, "a /* comment"));
                    }
                    if b[j] == b'/' && b[j + 1] == b'*' && (pg || level == 0) {
                        level += 1;
                        j += 2;
                    } else if b[j] == b'*' && b[j + 1] == b'/' {
                        level -= 1;
                        j += 2;
                        if level == 0 {
                            break;
                        }
                    } else {
                        j += 1;
                    }
                }
                i = j;
                continue;
            }
            c if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            b';' if depth == 0 && parens == 0 => {
                if let Some(s) = code_start.take() {
                    out.push(trim_end_ascii(&sql[s..i]).to_owned());
                }
                words.clear();
                prev.clear();
                parens = 0;
                i += 1;
                continue;
            }
            _ => {}
        }
        code_start.get_or_insert(i);
        match c {
            b'\'' => {
                let backslash = pg
                    && i > 0
                    && matches!(b[i - 1], b'E' | b'e')
                    && (i < 2 || !is_ident(b[i - 2]));
                i = close_quote(b, i, b'\'', backslash).ok_or_else(|| open(i, "a string"))?;
            }
            b'"' => i = close_quote(b, i, b'"', false).ok_or_else(|| open(i, "a quoted name"))?,
            b'`' if !pg => {
                i = close_quote(b, i, b'`', false).ok_or_else(|| open(i, "a quoted name"))?;
            }
            b'[' if !pg => {
                i = sql[i..]
                    .find(']')
                    .map(|n| i + n + 1)
                    .ok_or_else(|| open(i, "a [quoted] name"))?;
            }
            b'$' if pg && (i == 0 || !is_ident(b[i - 1])) => match dollar_tag(b, i) {
                Some(tag_end) => {
                    let tag = &sql[i..tag_end];
                    i = sql[tag_end..]
                        .find(tag)
                        .map(|n| tag_end + n + tag.len())
                        .ok_or_else(|| open(i, "a dollar-quoted body"))?;
                }
                None => i += 1,
            },
            c if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 => {
                let start = i;
                while i < b.len() && (is_ident(b[i]) || b[i] >= 0x80) {
                    i += 1;
                }
                let word = sql[start..i].to_ascii_uppercase();
                depth = block_depth(pg, &words, &prev, &word, depth);
                if words.len() < 3 {
                    words.push(word.clone());
                }
                prev = word;
            }
            b'(' => {
                parens += 1;
                i += 1;
            }
            b')' => {
                parens = parens.saturating_sub(1);
                i += 1;
            }
            _ => i += 1,
        }
    }
    if let Some(s) = code_start {
        out.push(trim_end_ascii(&sql[s..]).to_owned());
    }
    Ok(out)
}

/// `text` without trailing ASCII whitespace — the same whitespace the scanner skips between
/// statements, so a statement that starts at a character the scanner does not skip (a vertical
/// tab, a no-break space) never trims to nothing; the engine judges such a statement.
fn trim_end_ascii(text: &str) -> &str {
    text.trim_end_matches(|c: char| c.is_ascii_whitespace())
}

/// The block depth after `word`: a SQLite trigger body opens at `BEGIN`, a Postgres SQL-standard
/// body at `BEGIN ATOMIC`; inside a body `CASE` opens and `END` closes.
fn block_depth(pg: bool, words: &[String], prev: &str, word: &str, depth: usize) -> usize {
    let opens = if pg {
        word == "ATOMIC" && prev == "BEGIN"
    } else {
        word == "BEGIN" && depth == 0 && is_trigger(words)
    };
    match word {
        _ if opens => depth + 1,
        "CASE" if depth > 0 => depth + 1,
        "END" if depth > 0 => depth - 1,
        _ => depth,
    }
}

/// Whether the statement's first words are `CREATE [TEMP|TEMPORARY] TRIGGER`.
fn is_trigger(words: &[String]) -> bool {
    match words {
        [create, trigger, ..] if create == "CREATE" && trigger == "TRIGGER" => true,
        [create, temp, trigger, ..] => {
            create == "CREATE" && (temp == "TEMP" || temp == "TEMPORARY") && trigger == "TRIGGER"
        }
        _ => false,
    }
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$'
}

/// The position after the quote closing the one at `start` (a doubled quote is an escaped one;
/// with `backslash`, a backslash escapes the next byte).
fn close_quote(b: &[u8], start: usize, quote: u8, backslash: bool) -> Option<usize> {
    let mut j = start + 1;
    while j < b.len() {
        if backslash && b[j] == b'\\' {
            j += 2;
        } else if b[j] == quote {
            if b.get(j + 1) == Some(&quote) {
                j += 2;
            } else {
                return Some(j + 1);
            }
        } else {
            j += 1;
        }
    }
    None
}

/// When a dollar-quote tag (`$$` or `$name$`, the name not starting with a digit) starts at
/// `start`, the position after it.
fn dollar_tag(b: &[u8], start: usize) -> Option<usize> {
    let mut j = start + 1;
    if b.get(j).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] >= 0x80) {
        j += 1;
    }
    (b.get(j) == Some(&b'$')).then_some(j + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn both(sql: &str) -> Vec<String> {
        let s = split_statements(sql, Dialect::Sqlite).unwrap();
        assert_eq!(
            s,
            split_statements(sql, Dialect::Postgres).unwrap(),
            "{sql}"
        );
        s
    }

    #[test]
    fn splits_on_semicolons_and_keeps_a_last_statement_without_one() {
        assert_eq!(
            both("CREATE TABLE a (x INT);\nCREATE TABLE b (y INT)\n"),
            ["CREATE TABLE a (x INT)", "CREATE TABLE b (y INT)"]
        );
        assert_eq!(both("SELECT 1; SELECT 2;"), ["SELECT 1", "SELECT 2"]);
    }

    #[test]
    fn a_statement_of_characters_the_scanner_does_not_skip_is_never_empty() {
        // Found by the fuzzer: a vertical tab or a no-break space is not skipped between
        // statements, and used to trim (Unicode trim) to an empty statement.
        assert_eq!(both("\u{b};"), ["\u{b}"]);
        assert_eq!(
            both("\u{a0};SELECT 1 \u{a0}\n"),
            ["\u{a0}", "SELECT 1 \u{a0}"]
        );
    }

    #[test]
    fn semicolons_inside_quotes_and_comments_do_not_split() {
        let sql = "INSERT INTO t VALUES ('a;b', 'it''s;'); -- trailing; comment\n\
                   CREATE TABLE \"we;ird\" (x TEXT /* a; b */ DEFAULT ';');";
        assert_eq!(
            both(sql),
            [
                "INSERT INTO t VALUES ('a;b', 'it''s;')",
                "CREATE TABLE \"we;ird\" (x TEXT /* a; b */ DEFAULT ';')"
            ]
        );
    }

    #[test]
    fn comments_and_blank_text_are_not_statements() {
        assert!(both("-- only a comment\n/* and; another */\n\n;;").is_empty());
        assert_eq!(
            both("-- users\n-- second line\nCREATE TABLE u (id INT);\n-- the end\n"),
            ["CREATE TABLE u (id INT)"]
        );
    }

    #[test]
    fn postgres_dollar_quotes_and_escape_strings() {
        let sql = "CREATE FUNCTION f() RETURNS trigger AS $body$\nBEGIN\n  PERFORM 1; RETURN NEW;\nEND;\n$body$ LANGUAGE plpgsql;\n\
                   SELECT $$a;b$$, E'it\\'s;', $1;\nSELECT 2";
        assert_eq!(
            split_statements(sql, Dialect::Postgres).unwrap(),
            [
                "CREATE FUNCTION f() RETURNS trigger AS $body$\nBEGIN\n  PERFORM 1; RETURN NEW;\nEND;\n$body$ LANGUAGE plpgsql",
                "SELECT $$a;b$$, E'it\\'s;', $1",
                "SELECT 2",
            ]
        );
        assert_eq!(
            split_statements("SELECT a$b; SELECT 1", Dialect::Postgres).unwrap(),
            ["SELECT a$b", "SELECT 1"]
        );
    }

    #[test]
    fn postgres_begin_atomic_bodies_and_nested_comments() {
        let sql = "CREATE FUNCTION g() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; SELECT 2; END;\n\
                   /* outer /* inner; */ still comment; */ SELECT 3;";
        assert_eq!(
            split_statements(sql, Dialect::Postgres).unwrap(),
            [
                "CREATE FUNCTION g() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; SELECT 2; END",
                "SELECT 3"
            ]
        );
    }

    #[test]
    fn sqlite_trigger_bodies_and_quoted_names() {
        let sql = "CREATE TEMP TRIGGER tr AFTER INSERT ON t BEGIN\n  UPDATE t SET n = CASE WHEN n > 0 THEN 1 ELSE 0 END;\n  DELETE FROM u;\nEND;\n\
                   CREATE TABLE [a;b] (`c;d` TEXT);\nBEGIN;";
        assert_eq!(
            split_statements(sql, Dialect::Sqlite).unwrap(),
            [
                "CREATE TEMP TRIGGER tr AFTER INSERT ON t BEGIN\n  UPDATE t SET n = CASE WHEN n > 0 THEN 1 ELSE 0 END;\n  DELETE FROM u;\nEND",
                "CREATE TABLE [a;b] (`c;d` TEXT)",
                "BEGIN",
            ]
        );
    }

    #[test]
    fn semicolons_inside_parentheses_do_not_split() {
        let sql = "CREATE RULE r AS ON INSERT TO t DO ALSO (INSERT INTO a VALUES (1); DELETE FROM b);\nSELECT 1";
        assert_eq!(
            both(sql),
            [
                "CREATE RULE r AS ON INSERT TO t DO ALSO (INSERT INTO a VALUES (1); DELETE FROM b)",
                "SELECT 1"
            ]
        );
    }

    #[test]
    fn unterminated_constructs_are_refused_with_their_line() {
        for (sql, dialect) in [
            ("SELECT 1;\nSELECT 'open", Dialect::Sqlite),
            ("SELECT 1;\nSELECT \"open", Dialect::Postgres),
            ("SELECT 1;\n/* open", Dialect::Sqlite),
            ("SELECT 1;\nSELECT $x$ open", Dialect::Postgres),
            ("SELECT 1;\n/* /* */ open", Dialect::Postgres),
        ] {
            let err = split_statements(sql, dialect).unwrap_err();
            assert_eq!(err.line, 2, "{sql}: {err}");
            assert!(err.to_string().contains("never closed"));
        }
    }

    /// Pieces of statement text, some holding `;` where it must not split.
    fn fragment(pg: bool) -> BoxedStrategy<String> {
        let mut pieces = vec![
            "CREATE",
            "TABLE",
            "t1",
            "x",
            "(x, 1)",
            "(a; 'b;' (c; d))",
            ",",
            "1",
            "INSERT",
            "VALUES",
            "'a;b'",
            "'it''s; ok'",
            "\"we;ird\"",
            "/* c; */",
            "-- note; here\n",
            "''",
            "\"\"",
        ];
        if pg {
            pieces.extend(["$$ a; 'b \" $$", "$q$ ; $$ ; $q$", "E'x\\';y'", "$1"]);
        } else {
            pieces.extend(["[a;b]", "`c;d`"]);
        }
        proptest::sample::select(pieces)
            .prop_map(str::to_owned)
            .boxed()
    }

    fn statement(pg: bool) -> impl Strategy<Value = String> {
        (
            proptest::sample::select(vec!["CREATE", "SELECT", "t2"]),
            proptest::collection::vec(fragment(pg), 0..8),
        )
            .prop_map(|(first, rest)| {
                let mut s = first.to_owned();
                for f in rest {
                    s.push(' ');
                    s.push_str(&f);
                }
                s
            })
    }

    fn file(pg: bool) -> impl Strategy<Value = (Vec<String>, String)> {
        (
            proptest::collection::vec(statement(pg), 0..6),
            any::<bool>(),
            proptest::sample::select(vec![";\n", ";", " ;\n\n", ";\n-- between; x\n", ";/* ; */"]),
        )
            .prop_map(|(stmts, trailing, sep)| {
                let mut text = String::from("-- header; comment\n");
                text.push_str(&stmts.join(sep));
                if trailing && !stmts.is_empty() {
                    text.push(';');
                }
                (stmts, text)
            })
    }

    /// Cases per property: `CAIRN_PROPTEST_CASES` when set (deep runs), else 128 (splitting
    /// is cheap).
    fn cases() -> u32 {
        std::env::var("CAIRN_PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(128)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn split_recovers_the_statements_sqlite((stmts, text) in file(false)) {
            let want: Vec<String> = stmts.iter().map(|s| s.trim_end().to_owned()).collect();
            prop_assert_eq!(split_statements(&text, Dialect::Sqlite).unwrap(), want);
        }

        #[test]
        fn split_recovers_the_statements_postgres((stmts, text) in file(true)) {
            let want: Vec<String> = stmts.iter().map(|s| s.trim_end().to_owned()).collect();
            prop_assert_eq!(split_statements(&text, Dialect::Postgres).unwrap(), want);
        }
    }
}

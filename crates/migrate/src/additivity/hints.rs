//! Where the alternative values of a synthesized row come from: the literals a table's own
//! definition names. A CHECK constraint, a partition bound or an enum's labels say which values
//! an older writer's rows hold; the engines read those texts from their catalogs and hand the
//! literals to [`super::synth::candidate_rows`] as [`super::synth::ColumnSpec::hints`].
//!
//! The scanner knows SQL's lexical shapes only (quoted strings and identifiers, numbers,
//! comments, punctuation); it never parses an expression.

/// One lexical token of SQL text.
#[derive(Clone, PartialEq, Eq, Debug)]
enum Token {
    /// A word or a quoted identifier, unquoted (`"Qty"` → `Qty`); words keep their spelling.
    Ident { text: String, quoted: bool },
    /// A string literal's content (`'it''s'` → `it's`).
    Str(String),
    /// A numeric literal, with its sign when a `-` directly precedes it after an operator or an
    /// opening parenthesis.
    Num(String),
    /// Any other character (operators, parentheses, commas).
    Punct(char),
}

/// Tokens of `sql` with the byte offset each starts at; comments and whitespace dropped.
fn tokens(sql: &str) -> Vec<(usize, Token)> {
    let b = sql.as_bytes();
    let mut out: Vec<(usize, Token)> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        match c {
            _ if c.is_ascii_whitespace() => i += 1,
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i = (i + 2).min(b.len());
            }
            // `[x]` quotes an identifier (SQLite) where an operand starts; after an operand
            // (`ARRAY[`, `a[1]`) it is a subscript.
            b'\'' | b'"' | b'`' | b'['
                if c != b'['
                    || match out.last() {
                        None => true,
                        Some((_, Token::Punct(p))) => *p != ')' && *p != ']',
                        Some(_) => false,
                    } =>
            {
                let close = if c == b'[' { b']' } else { c };
                let mut text = Vec::new();
                i += 1;
                while i < b.len() {
                    if b[i] == close {
                        // A doubled quote is one quote inside the literal.
                        if close != b']' && b.get(i + 1) == Some(&close) {
                            text.push(close);
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    text.push(b[i]);
                    i += 1;
                }
                i = (i + 1).min(b.len());
                let text = String::from_utf8_lossy(&text).into_owned();
                out.push((
                    start,
                    if c == b'\'' {
                        Token::Str(text)
                    } else {
                        Token::Ident { text, quoted: true }
                    },
                ));
            }
            _ if c.is_ascii_digit()
                || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) =>
            {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                    i += 1;
                }
                let mut text = sql[start..i].to_owned();
                // `x > -5`, `(-5)`: the minus belongs to the number; `a-5` stays a subtraction.
                let signed = matches!(
                    out.as_slice(),
                    [.., (_, prev), (_, Token::Punct('-'))]
                        if matches!(prev, Token::Punct(p) if *p != ')')
                ) || matches!(out.as_slice(), [(_, Token::Punct('-'))]);
                if signed {
                    out.pop();
                    text.insert(0, '-');
                }
                out.push((start, Token::Num(text)));
            }
            _ if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 => {
                while i < b.len()
                    && (b[i].is_ascii_alphanumeric()
                        || b[i] == b'_'
                        || b[i] == b'$'
                        || b[i] >= 0x80)
                {
                    i += 1;
                }
                out.push((
                    start,
                    Token::Ident {
                        text: sql[start..i].to_owned(),
                        quoted: false,
                    },
                ));
            }
            _ => {
                let ch = sql[i..].chars().next().unwrap_or(' ');
                i += ch.len_utf8();
                out.push((start, Token::Punct(ch)));
            }
        }
    }
    out
}

/// The literals of `sql`, in order, each once: string literals' contents and numbers (with a
/// leading minus when it is a sign). `CHECK ((status = ANY (ARRAY['open'::text, 'shut'::text])))`
/// gives `open`, `shut`; `FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')` the two dates.
pub fn literals(sql: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, t) in tokens(sql) {
        let lit = match t {
            Token::Str(s) | Token::Num(s) => s,
            _ => continue,
        };
        if !out.contains(&lit) {
            out.push(lit);
        }
    }
    out
}

/// The bodies of the `CHECK (…)` clauses of a `CREATE TABLE` statement (column and table
/// constraints alike), as written: what SQLite's catalog keeps of a table's checks.
pub fn check_clauses(create_table: &str) -> Vec<String> {
    let toks = tokens(create_table);
    let mut out = Vec::new();
    let mut k = 0;
    while k < toks.len() {
        let is_check = matches!(&toks[k].1, Token::Ident { text, quoted: false } if text.eq_ignore_ascii_case("check"));
        if is_check && matches!(toks.get(k + 1), Some((_, Token::Punct('(')))) {
            let open = toks[k + 1].0;
            let mut depth = 0usize;
            let mut end = None;
            for (j, (at, t)) in toks.iter().enumerate().skip(k + 1) {
                match t {
                    Token::Punct('(') => depth += 1,
                    Token::Punct(')') => {
                        depth -= 1;
                        if depth == 0 {
                            end = Some((j, *at));
                            break;
                        }
                    }
                    _ => {}
                }
            }
            match end {
                Some((j, close)) => {
                    out.push(create_table[open + 1..close].trim().to_owned());
                    k = j + 1;
                }
                None => break,
            }
        } else {
            k += 1;
        }
    }
    out
}

/// Whether SQL text `sql` names the column `column` (as an identifier, quoted or not; case
/// folded as SQLite folds names).
pub fn mentions(sql: &str, column: &str) -> bool {
    tokens(sql).iter().any(|(_, t)| match t {
        Token::Ident { text, .. } => text.eq_ignore_ascii_case(column),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_of_postgres_catalog_texts() {
        assert_eq!(literals("CHECK ((qty > 5))"), ["5"]);
        assert_eq!(literals("CHECK ((price > (0)::numeric))"), ["0"]);
        assert_eq!(literals("CHECK ((n >= '-3'::integer))"), ["-3"]);
        assert_eq!(literals("CHECK ((n > -3))"), ["-3"]);
        assert_eq!(literals("CHECK ((a - 3 > b))"), ["3"]);
        assert_eq!(
            literals("CHECK ((status = ANY (ARRAY['open'::text, 'it''s'::text, 'open'::text])))"),
            ["open", "it's"]
        );
        assert_eq!(
            literals("FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')"),
            ["2026-01-01", "2027-01-01"]
        );
        assert_eq!(
            literals("FOR VALUES WITH (modulus 4, remainder 1)"),
            ["4", "1"]
        );
        assert_eq!(literals("CHECK ((\"x1\" > 0.25))"), ["0.25"]);
        assert!(literals("DEFAULT").is_empty());
    }

    #[test]
    fn check_clauses_of_a_sqlite_create_table() {
        let sql = "CREATE TABLE t (id INTEGER PRIMARY KEY, -- check (not this)
            n INTEGER NOT NULL CHECK (n > 5), note TEXT DEFAULT 'check (no)',
            kind TEXT CHECK(kind IN ('a', 'b')), CONSTRAINT lh check ((lo < hi) AND (lo > 0)),
            lo INT, hi INT)";
        assert_eq!(
            check_clauses(sql),
            ["n > 5", "kind IN ('a', 'b')", "(lo < hi) AND (lo > 0)"]
        );
        assert!(mentions("(lo < hi) AND (lo > 0)", "HI"));
        assert!(mentions("\"we\"\"ird\" > 0", "we\"ird"));
        assert!(!mentions("kind IN ('lo')", "lo"));
        assert!(check_clauses("CREATE TABLE t (x CHECK (x > (1)").is_empty());
    }
}

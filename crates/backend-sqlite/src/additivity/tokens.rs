//! Statement recognition: a lenient SQL tokenizer and the classification of a traced
//! statement into the kinds the rules care about (what it does, to which object).

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Tok {
    /// An unquoted word (keyword or identifier), as written.
    Word(String),
    /// A quoted identifier (`"x"`, `` `x` ``, `[x]`), unquoted.
    Ident(String),
    /// A string literal, unquoted.
    Str(String),
    Num,
    Punct(char),
}

#[derive(Clone, Debug)]
pub(super) struct Token {
    pub(super) tok: Tok,
    /// Parenthesis depth the token sits at.
    pub(super) depth: usize,
}

impl Token {
    pub(super) fn is_word(&self, w: &str) -> bool {
        matches!(&self.tok, Tok::Word(x) if x.eq_ignore_ascii_case(w))
    }

    pub(super) fn name(&self) -> Option<String> {
        match &self.tok {
            Tok::Word(x) | Tok::Ident(x) | Tok::Str(x) => Some(x.to_ascii_lowercase()),
            _ => None,
        }
    }
}

/// Splits SQL text into tokens, skipping whitespace and comments. Lenient: it never fails,
/// an unterminated quote runs to the end.
pub(super) fn tokenize(text: &str) -> Vec<Token> {
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
pub(super) fn qualified_name(toks: &[Token], i: usize) -> Option<(String, usize)> {
    let first = toks.get(i)?.name()?;
    if toks.get(i + 1).is_some_and(|t| t.tok == Tok::Punct('.')) {
        let second = toks.get(i + 2)?.name()?;
        return Some((second, i + 3));
    }
    Some((first, i + 1))
}

/// Skips `IF NOT EXISTS` / `IF EXISTS` at `i`; says whether it was there.
pub(super) fn skip_if_exists(toks: &[Token], i: &mut usize) -> bool {
    if toks.get(*i).is_some_and(|t| t.is_word("IF")) {
        while *i < toks.len() && !toks[*i].is_word("EXISTS") {
            *i += 1;
        }
        *i += 1;
        return true;
    }
    false
}

/// What a traced statement is, as far as the rules care.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Kind {
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

pub(super) fn classify(toks: &[Token]) -> Kind {
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
pub(super) fn dml(toks: &[Token], i: usize) -> Option<Kind> {
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

pub(super) fn classify_create(toks: &[Token]) -> Option<Kind> {
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

pub(super) fn classify_alter(toks: &[Token]) -> Option<Kind> {
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
pub(super) fn trigger_body(create: &str) -> Vec<Vec<Token>> {
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
}

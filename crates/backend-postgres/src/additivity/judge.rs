//! The judging rules: what each captured command means for an existing table, and the final
//! comparison of every existing table with its old definition.

use std::collections::{BTreeMap, BTreeSet};

use cairn_migrate::additivity::{Rule, Violation};

use super::capture::LogRow;
use super::snapshot::{Column, Snapshot, TableDef};

/// Findings, merged per (rule, table, statement) so one statement's many dropped objects read
/// as one line.
#[derive(Default)]
pub(super) struct Findings {
    pub(super) items: BTreeMap<(Rule, Option<String>, usize), Vec<String>>,
}

impl Findings {
    pub(super) fn add(
        &mut self,
        rule: Rule,
        table: Option<&str>,
        stmt: usize,
        what: impl Into<String>,
    ) {
        let list = self
            .items
            .entry((rule, table.map(str::to_owned), stmt))
            .or_default();
        let what = what.into();
        if !list.contains(&what) {
            list.push(what);
        }
    }

    pub(super) fn into_violations(self) -> Vec<Violation> {
        let mut out: Vec<(usize, Violation)> = self
            .items
            .into_iter()
            .map(|((rule, table, stmt), list)| {
                let shown: Vec<&str> = list.iter().take(4).map(String::as_str).collect();
                let more = if list.len() > 4 {
                    format!(" (+{} more)", list.len() - 4)
                } else {
                    String::new()
                };
                let detail = if stmt == 0 {
                    format!("{}{more}", shown.join("; "))
                } else {
                    format!("statement {stmt}: {}{more}", shown.join("; "))
                };
                (
                    stmt,
                    Violation {
                        rule,
                        table,
                        detail,
                    },
                )
            })
            .collect();
        out.sort_by_key(|(stmt, v)| (*stmt, v.rule));
        out.into_iter().map(|(_, v)| v).collect()
    }
}

/// Flags every DDL command or drop of one statement that touched an object in a schema other
/// than the throwaway store's (`scratch`): a revision checked here must not reach past the
/// store it migrates, and whatever it did there would only be undone by the rollback.
pub(super) fn judge_outside(findings: &mut Findings, n: usize, log: &[LogRow], scratch: &str) {
    for row in log.iter().filter(|r| r.source != "dml") {
        let Some(schema) = row.schema.as_deref() else {
            continue;
        };
        if schema == scratch || schema.starts_with("pg_temp_") {
            continue;
        }
        let ident = row.ident.as_deref().unwrap_or(schema);
        findings.add(
            Rule::OutsideStore,
            Some(ident),
            n,
            format!("touches {ident}, outside the throwaway store"),
        );
    }
}

/// Judges the commands one statement issued, as the capture logged them.
pub(super) fn judge_commands(
    findings: &mut Findings,
    n: usize,
    log: &[LogRow],
    before: &Snapshot,
    objects: &BTreeSet<(String, i64)>,
    previous: &Snapshot,
    current: &Snapshot,
) {
    let table_name = |oid: i64| before.tables.get(&oid).map(|t| t.name.clone());
    // The existing table an object of the old schema belongs to.
    let owner = |classid: &str, objid: i64| -> Option<i64> {
        before.tables.iter().find_map(|(oid, t)| {
            let hit = match classid {
                "pg_class" => *oid == objid || t.indexes.contains_key(&objid),
                "pg_constraint" => t.constraints.contains_key(&objid),
                "pg_trigger" => t.triggers.contains_key(&objid),
                _ => false,
            };
            hit.then_some(*oid)
        })
    };
    for row in log {
        let what = || {
            let object = match (&row.otype, &row.ident) {
                (Some(t), Some(i)) => format!(" {t} {i}"),
                (Some(t), None) => format!(" {t}"),
                _ => String::new(),
            };
            format!("{}{object}", row.tag)
        };
        match row.source.as_str() {
            "dml" => {
                let Some(rel) = row.rel else { continue };
                let name = table_name(rel);
                findings.add(
                    Rule::StatementKind,
                    name.as_deref(),
                    n,
                    format!("{} on an existing table", row.tag),
                );
            }
            "drop" => {
                let (Some(classid), Some(objid)) = (&row.classid, row.objid) else {
                    continue;
                };
                if let Some(rel) = owner(classid, objid) {
                    findings.add(
                        Rule::StatementKind,
                        table_name(rel).as_deref(),
                        n,
                        format!("{} dropped {}", row.tag, what_dropped(row)),
                    );
                } else if objects.contains(&(classid.clone(), objid)) && classid != "pg_type" {
                    findings.add(
                        Rule::StatementKind,
                        None,
                        n,
                        format!("{} dropped {}", row.tag, what_dropped(row)),
                    );
                }
            }
            _ => {
                let existing_rel = row.rel.filter(|r| before.tables.contains_key(r));
                if let Some(rel) = existing_rel {
                    let name = table_name(rel);
                    let name = name.as_deref();
                    match row.tag.as_str() {
                        "CREATE INDEX" => {}
                        "ALTER TABLE" if only_storage_changed(rel, previous, current) => {}
                        "ALTER TABLE" => {
                            if let Err(why) = only_adds_columns(rel, previous, current) {
                                findings.add(
                                    Rule::StatementKind,
                                    name,
                                    n,
                                    format!("ALTER TABLE other than ADD COLUMN ({why})"),
                                );
                            }
                        }
                        "CREATE TRIGGER" | "ALTER TRIGGER" => {
                            findings.add(Rule::Trigger, name, n, what());
                        }
                        tag if tag.starts_with("ALTER ") || tag.starts_with("DROP ") => {
                            findings.add(Rule::StatementKind, name, n, what());
                        }
                        _ => findings.add(
                            Rule::Unrecognised,
                            name,
                            n,
                            format!("{}, for review", what()),
                        ),
                    }
                } else {
                    let existing_object = matches!((&row.classid, row.objid), (Some(c), Some(o)) if objects.contains(&(c.clone(), o)));
                    let unidentified = row.objid.is_none() || row.classid.is_none();
                    if existing_object {
                        if row.tag.starts_with("ALTER ") || row.tag.starts_with("DROP ") {
                            findings.add(Rule::StatementKind, None, n, what());
                        } else {
                            findings.add(
                                Rule::Unrecognised,
                                None,
                                n,
                                format!("{} on an existing object, for review", what()),
                            );
                        }
                    } else if unidentified {
                        findings.add(
                            Rule::Unrecognised,
                            None,
                            n,
                            format!(
                                "{} (the object it touches is not reported), for review",
                                what()
                            ),
                        );
                    }
                }
            }
        }
    }
}

fn what_dropped(row: &LogRow) -> String {
    let kind = row.otype.as_deref().unwrap_or("object");
    let ident = row.ident.as_deref().unwrap_or("?");
    match row.objsubid {
        Some(sub) if sub > 0 && kind == "table column" => format!("column {ident}"),
        _ => format!("{kind} {ident}"),
    }
}

/// Whether one statement changed existing table `oid`'s storage parameters (`fillfactor`,
/// the autovacuum settings, …: see `sql::REL_PROPS`) and nothing else: a change that alters no
/// statement's result, so older builds tolerate it.
pub(super) fn only_storage_changed(oid: i64, previous: &Snapshot, current: &Snapshot) -> bool {
    let (Some(old), Some(new)) = (previous.tables.get(&oid), current.tables.get(&oid)) else {
        return false;
    };
    old.storage != new.storage
        && TableDef {
            storage: String::new(),
            ..old.clone()
        } == TableDef {
            storage: String::new(),
            ..new.clone()
        }
}

/// Whether one statement's change to existing table `oid` is exactly new columns (with what
/// belongs only to them); otherwise what else changed.
pub(super) fn only_adds_columns(
    oid: i64,
    previous: &Snapshot,
    current: &Snapshot,
) -> Result<(), String> {
    let (Some(old), Some(new)) = (previous.tables.get(&oid), current.tables.get(&oid)) else {
        return Err("the table is gone".into());
    };
    if old.name != new.name {
        return Err(format!("renamed to {}", new.name));
    }
    if old.props != new.props {
        return Err(format!("table options {} -> {}", old.props, new.props));
    }
    if old.filenode != new.filenode {
        return Err("the table was rewritten".into());
    }
    for (num, col) in &old.columns {
        match new.columns.get(num) {
            None => return Err(format!("column {} dropped", col.name)),
            Some(c) if !col.same_as(c) => return Err(col.differences(c)),
            Some(_) => {}
        }
    }
    let added: BTreeSet<i32> = new
        .columns
        .keys()
        .filter(|k| !old.columns.contains_key(k))
        .copied()
        .collect();
    if added.is_empty() {
        return Err("no column was added".into());
    }
    for (k, c) in &old.constraints {
        if new.constraints.get(k) != Some(c) {
            return Err(format!("constraint {} changed or dropped", c.name));
        }
    }
    for (k, c) in &new.constraints {
        let only_new = !c.columns.is_empty() && c.columns.iter().all(|n| added.contains(n));
        if !old.constraints.contains_key(k) && !only_new {
            return Err(format!("constraint {} added on existing columns", c.name));
        }
    }
    for (k, i) in &old.indexes {
        if new.indexes.get(k) != Some(i) {
            return Err(format!("index {} changed or dropped", i.name));
        }
    }
    for (k, i) in &new.indexes {
        if !old.indexes.contains_key(k)
            && (i.expression || !i.columns.iter().all(|n| added.contains(n)))
        {
            return Err(format!("index {} added on existing columns", i.name));
        }
    }
    for (k, t) in &old.triggers {
        if new.triggers.get(k) != Some(t) {
            return Err(format!("trigger {} changed or dropped", t.name));
        }
    }
    Ok(())
}

/// Whether a column default's parse tree is a constant, possibly cast: only `Const`,
/// `RelabelType` and cast-form `FuncExpr` nodes (`:funcformat` 1 explicit or 2 implicit cast).
/// Such a default evaluates the same way on every insert, so it cannot start failing.
fn constant_default(tree: &str) -> bool {
    let mut rest = tree;
    while let Some(at) = rest.find('{') {
        rest = &rest[at + 1..];
        let node: String = rest
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || *c == '_')
            .collect();
        match node.as_str() {
            "CONST" | "RELABELTYPE" => {}
            "FUNCEXPR" => {
                let format = rest
                    .split(":funcformat ")
                    .nth(1)
                    .and_then(|s| s.split(' ').next());
                if !matches!(format, Some("1" | "2")) {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

/// The final comparison of every existing table against its old definition.
pub(super) fn compare(findings: &mut Findings, before: &Snapshot, after: &Snapshot) {
    for (oid, old) in &before.tables {
        let name = Some(old.name.as_str());
        let Some(new) = after.tables.get(oid) else {
            let what = match after.names.get(&old.name) {
                Some(_) => "rebuilt: a new table (new oid) now holds its name",
                None => "dropped",
            };
            findings.add(Rule::Definition, name, 0, what);
            continue;
        };
        if old.name != new.name {
            findings.add(
                Rule::Definition,
                name,
                0,
                format!("renamed to {}", new.name),
            );
        }
        if old.props != new.props {
            findings.add(
                Rule::Definition,
                name,
                0,
                format!("table options {} -> {}", old.props, new.props),
            );
        }
        if old.filenode != new.filenode {
            findings.add(Rule::Definition, name, 0, "rewritten (new file node)");
        }
        for (num, col) in &old.columns {
            match new.columns.get(num) {
                None => findings.add(
                    Rule::Definition,
                    name,
                    0,
                    format!("column {} dropped", col.name),
                ),
                Some(c) if !col.same_as(c) => {
                    findings.add(Rule::Definition, name, 0, col.differences(c))
                }
                Some(_) => {}
            }
        }
        let added: BTreeMap<i32, &Column> = new
            .columns
            .iter()
            .filter(|(k, _)| !old.columns.contains_key(k))
            .map(|(k, c)| (*k, c))
            .collect();
        for col in added.values() {
            let c = &col.name;
            if !col.generated.is_empty() {
                findings.add(
                    Rule::NewColumn,
                    name,
                    0,
                    format!("new column {c} is generated"),
                );
            }
            if !col.identity.is_empty() {
                findings.add(
                    Rule::NewColumn,
                    name,
                    0,
                    format!("new column {c} is an identity column"),
                );
            }
            if col.not_null && col.default.is_none() {
                findings.add(
                    Rule::NewColumn,
                    name,
                    0,
                    format!("new column {c} is NOT NULL without a default"),
                );
            }
            if col.generated.is_empty() && !col.default_tree.as_deref().is_none_or(constant_default)
            {
                findings.add(
                    Rule::NewColumn,
                    name,
                    0,
                    format!(
                        "new column {c} has a default that is not a constant: {}",
                        col.default.as_deref().unwrap_or("?")
                    ),
                );
            }
        }
        for (k, c) in &old.constraints {
            match new.constraints.get(k) {
                Some(now) if now == c => {}
                Some(now) => findings.add(
                    Rule::Definition,
                    name,
                    0,
                    format!("constraint {} is now {}", c.name, now.def),
                ),
                None => findings.add(
                    Rule::Definition,
                    name,
                    0,
                    format!("constraint {} dropped", c.name),
                ),
            }
        }
        for (k, c) in &new.constraints {
            if old.constraints.contains_key(k) || c.kind == "n" {
                continue;
            }
            let on_new: Vec<&str> = c
                .columns
                .iter()
                .filter_map(|n| added.get(n))
                .map(|col| col.name.as_str())
                .collect();
            if !on_new.is_empty() {
                findings.add(
                    Rule::NewColumn,
                    name,
                    0,
                    format!(
                        "new column {} carries constraint {} ({})",
                        on_new.join(", "),
                        c.name,
                        c.def
                    ),
                );
            } else {
                findings.add(
                    Rule::Definition,
                    name,
                    0,
                    format!("new constraint {} ({})", c.name, c.def),
                );
            }
        }
        for (k, i) in &old.indexes {
            match new.indexes.get(k) {
                Some(now) if now == i => {}
                Some(now) if now.filenode != i.filenode && now.def == i.def => findings.add(
                    Rule::Index,
                    name,
                    0,
                    format!("index {} was rebuilt", i.name),
                ),
                Some(now) => findings.add(
                    Rule::Index,
                    name,
                    0,
                    format!("index {} is now {}", i.name, now.def),
                ),
                None => findings.add(
                    Rule::Index,
                    name,
                    0,
                    format!("index {} dropped or replaced", i.name),
                ),
            }
        }
        for (k, i) in &new.indexes {
            if old.indexes.contains_key(k) {
                continue;
            }
            let mut why = Vec::new();
            if i.unique {
                why.push("unique");
            }
            if i.partial {
                why.push("partial");
            }
            if i.expression {
                why.push("on an expression");
            }
            if !why.is_empty() {
                findings.add(
                    Rule::Index,
                    name,
                    0,
                    format!("new index {} is {}", i.name, why.join(", ")),
                );
            }
        }
        for (k, t) in &old.triggers {
            match new.triggers.get(k) {
                Some(now) if now == t => {}
                Some(_) => findings.add(
                    Rule::Index,
                    name,
                    0,
                    format!("trigger {} changed or disabled", t.name),
                ),
                None if t.internal => {}
                None => findings.add(Rule::Index, name, 0, format!("trigger {} dropped", t.name)),
            }
        }
        for (k, t) in &new.triggers {
            if !old.triggers.contains_key(k) && !t.internal {
                findings.add(Rule::Trigger, name, 0, format!("new trigger {}", t.name));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_defaults_are_told_from_expressions() {
        assert!(constant_default("{CONST :consttype 23 :consttypmod -1 :constcollid 0 :constlen 4 :constbyval true :constisnull false :location 52 :constvalue 4 [ 0 0 0 0 0 0 0 0 ]}"));
        assert!(constant_default("{FUNCEXPR :funcid 669 :funcresulttype 1043 :funcretset false :funcvariadic false :funcformat 2 :funccollid 100 :inputcollid 100 :args ({CONST :consttype 1043 :location 1} {CONST :consttype 23 :location -1} {CONST :consttype 16 :location -1}) :location -1}"));
        assert!(!constant_default("{FUNCEXPR :funcid 1299 :funcresulttype 1184 :funcretset false :funcvariadic false :funcformat 0 :funccollid 0 :inputcollid 0 :args <> :location 1}"));
        assert!(!constant_default("{FUNCEXPR :funcid 481 :funcresulttype 20 :funcretset false :funcvariadic false :funcformat 2 :funccollid 0 :inputcollid 0 :args ({OPEXPR :opno 514 :args ({CONST :consttype 23} {CONST :consttype 23})}) :location -1}"));
    }
}

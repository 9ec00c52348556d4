//! The report of rows 1–5: the table (cairn and each peer, cairn ÷ the best peer), the CPU
//! lines, what a duplicate enqueue returns, the settings; and the chart's bars.

use super::super::chart::Bar;
use super::super::cpu::CpuUse;
use super::super::figures::thousands;
use super::super::setup::Backend;
use super::args::SpoolArgs;
use super::drain;
use super::rates::{fmt_rate, median};
use super::runs::{Runs, System};
use super::wake::Wake;

/// The rows of the table: name, accessor.
pub(super) type Row = (&'static str, fn(&Runs) -> &Vec<f64>);

pub(super) fn rows() -> [Row; 4] {
    [
        ("1. enqueue, one at a time", |r| &r.enqueue),
        ("2. duplicate enqueue", |r| &r.duplicate),
        ("3. claim + complete, 10 workers", |r| &r.claim_complete),
        ("4. enqueue, 8 producers", |r| &r.producers_n),
    ]
}

pub(super) fn print_table(
    backend: Backend,
    args: &SpoolArgs,
    systems: &[System],
    wake: &Wake,
    fsync: f64,
) {
    let cairn = &systems[0];
    let all = systems;
    let mut systems: Vec<&System> = vec![cairn];
    systems.extend(
        drain::peers_of(backend)
            .iter()
            .filter_map(|n| all.iter().find(|s| s.name == *n)),
    );
    let peers = &systems[1..];
    println!(
        "\n### {} — ops/s, median of {} runs\n",
        backend.name(),
        args.runs
    );
    let mut header = "| row | cairn |".to_owned();
    let mut rule = "|---|---:|".to_owned();
    for p in peers {
        header.push_str(&format!(" {} |", drain::display(&p.name)));
        rule.push_str("---:|");
    }
    header.push_str(" cairn ÷ best peer |");
    rule.push_str("---:|");
    println!("{header}\n{rule}");
    for (name, get) in rows() {
        let c = median(get(&cairn.runs));
        let mut line = format!("| {name} | {} |", fmt_rate(c));
        let mut best: Option<f64> = None;
        for p in peers {
            let m = median(get(&p.runs));
            line.push_str(&format!(" {} |", fmt_rate(m)));
            if let Some(m) = m {
                best = Some(best.map_or(m, |b: f64| b.max(m)));
            }
        }
        let ratio = match (c, best) {
            (Some(c), Some(b)) => format!("{:.2}×", c / b),
            _ => "n/a".into(),
        };
        println!("{line} {ratio} |");
    }
    let scaling = |r: &Runs| match (median(&r.producers_n), median(&r.producers_1)) {
        (Some(n), Some(one)) => format!("{:.2}×", n / one),
        _ => "n/a".into(),
    };
    let mut line = format!(
        "| 4. {} producers ÷ 1 producer | {} |",
        args.producers,
        scaling(&cairn.runs)
    );
    for p in peers {
        line.push_str(&format!(" {} |", scaling(&p.runs)));
    }
    println!("{line} |");
    let wake_cell = match wake {
        Ok((p50, p99, n)) => format!(
            "p50 {:.1} ms, p99 {:.1} ms ({n} samples)",
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3
        ),
        Err(e) => format!("not measured: {e}"),
    };
    let mut line = format!("| 5. cross-process wake latency | {wake_cell} |");
    for _ in peers {
        line.push_str(" not measured |");
    }
    println!("{line} |");
    println!(
        "\nRaw durable single-row commit rate of this engine in the same run (the fsync bound): {} commits/s",
        thousands(fsync.round() as u64)
    );
    println!(
        "\nCPU while cairn's rows ran (medians; busy = the whole machine, engine server included):"
    );
    let names = rows();
    for (i, cpu) in cairn.runs.cpu.iter().take(4).enumerate() {
        if let Some(c) = CpuUse::median(cpu) {
            let name = if i == 3 {
                format!("4. enqueue, {} producers", args.producers)
            } else {
                names[i].0.to_string()
            };
            let writes = match backend {
                Backend::Sqlite => format!(" · {}", c.describe_writes()),
                Backend::Postgres => String::new(),
            };
            println!("- {name}: {}{writes}", c.describe("cairn"));
        }
    }
    println!("\nDuplicate enqueue returns:");
    for s in &systems {
        if s.failed.is_none() && !s.runs.duplicate.is_empty() {
            println!(
                "- {}: {}",
                drain::display(&s.name),
                s.runs.duplicate_returns
            );
        }
    }
    println!("\nSettings:");
    for s in &systems {
        match &s.failed {
            None => println!("- {}: {}", drain::display(&s.name), s.settings),
            Some(why) => println!("- {}: NOT MEASURED — {why}", drain::display(&s.name)),
        }
    }
}

pub(super) fn chart_rows(backend: Backend, systems: &[System]) -> Vec<(String, Vec<Bar>)> {
    rows()
        .iter()
        .map(|(name, get)| {
            let bars = systems
                .iter()
                .filter_map(|s| {
                    median(get(&s.runs)).map(|v| Bar {
                        label: s.name.clone(),
                        value: v,
                    })
                })
                .collect();
            (format!("{}: {name}", backend.name()), bars)
        })
        .collect()
}

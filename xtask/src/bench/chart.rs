//! A horizontal grouped bar chart as plain SVG text: one group per table row, one bar per
//! system, each group scaled to its own largest bar (the rows' units differ by orders of
//! magnitude), the value printed at the end of each bar.
//!
//! Written by hand rather than with plotters: the chart is a few rectangles and labels, and
//! xtask stays free of a plotting stack that would add minutes to every cold build on the
//! project's 2-core machines.

use std::fmt::Write;

/// One bar: a system and its value.
pub(crate) struct Bar {
    pub(crate) label: String,
    pub(crate) value: f64,
}

const WIDTH: f64 = 860.0;
const LABEL_W: f64 = 110.0;
const BAR_H: f64 = 18.0;
const GAP: f64 = 4.0;
const GROUP_TITLE: f64 = 22.0;
const GROUP_GAP: f64 = 14.0;
const TOP: f64 = 40.0;
const COLORS: [&str; 4] = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1"];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn thousands(x: f64) -> String {
    super::figures::thousands(x.round().max(0.0) as u64)
}

/// The chart: `groups` of (title, bars).
pub(crate) fn svg(title: &str, groups: &[(String, Vec<Bar>)]) -> String {
    let mut labels: Vec<&str> = Vec::new();
    for (_, bars) in groups {
        for b in bars {
            if !labels.contains(&b.label.as_str()) {
                labels.push(&b.label);
            }
        }
    }
    let height = TOP
        + groups
            .iter()
            .map(|(_, bars)| GROUP_TITLE + bars.len() as f64 * (BAR_H + GAP) + GROUP_GAP)
            .sum::<f64>()
        + 10.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="100%" height="100%" fill="white"/><text x="10" y="22" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let mut y = TOP;
    let bar_max_w = WIDTH - LABEL_W - 90.0;
    for (name, bars) in groups {
        let _ = writeln!(
            out,
            r#"<text x="10" y="{:.1}" font-weight="bold">{}</text>"#,
            y + 14.0,
            escape(name)
        );
        y += GROUP_TITLE;
        let max = bars.iter().map(|b| b.value).fold(0.0_f64, f64::max);
        for b in bars {
            let color = labels
                .iter()
                .position(|l| *l == b.label)
                .map_or(COLORS[0], |i| COLORS[i % COLORS.len()]);
            let w = if max > 0.0 {
                (b.value / max * bar_max_w).max(1.0)
            } else {
                1.0
            };
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text><rect x="{LABEL_W}" y="{y:.1}" width="{w:.1}" height="{BAR_H}" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                LABEL_W - 6.0,
                y + 13.0,
                escape(&b.label),
                LABEL_W + w + 6.0,
                y + 13.0,
                thousands(b.value)
            );
            y += BAR_H + GAP;
        }
        y += GROUP_GAP;
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_has_one_bar_per_value_and_escapes_labels() {
        let groups = vec![(
            "sqlite: 1. enqueue".to_owned(),
            vec![
                Bar {
                    label: "cairn".into(),
                    value: 3000.0,
                },
                Bar {
                    label: "a<b".into(),
                    value: 1500.0,
                },
            ],
        )];
        let svg = svg("t", &groups);
        assert_eq!(svg.matches("<rect x=").count(), 2);
        assert!(svg.contains("a&lt;b"));
        assert!(svg.contains("3,000"));
        assert!(svg.ends_with("</svg>\n"));
    }
}

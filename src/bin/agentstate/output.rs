//! Output helpers: JSON documents, aligned text tables, compact values, and
//! progress bars that only draw on a terminal.
//!
//! Everything on stdout goes through [`line`]: a reader that goes away (`|
//! head`) ends the command quietly instead of a panic.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;

use crate::{exit, CliResult, Failure};

/// Writes `text` and a newline on stdout. A closed pipe gives a quiet
/// [`Failure::closed_pipe`]; other write errors a failure (exit 1).
pub fn line(text: &str) -> CliResult {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.write_all(b"\n")).map_err(|e| {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Failure::closed_pipe()
        } else {
            Failure::new(exit::FAILURE, format!("cannot write the output: {e}"))
        }
    })
}

/// Prints `value` as one pretty JSON document on stdout.
pub fn json(value: &Value) -> CliResult {
    line(&serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string()))
}

/// Compact JSON of `value`, cut to about `max` characters with `…`.
pub fn compact(value: &Value, max: usize) -> String {
    let s = value.to_string();
    cut(&s, max)
}

/// `s` cut to `max` characters with `…`.
pub fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Pretty JSON of `value`, every line indented by `indent` spaces.
pub fn pretty_indented(value: &Value, indent: usize) -> String {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    let pad = " ".repeat(indent);
    text.lines().map(|l| format!("{pad}{l}")).collect::<Vec<_>>().join("\n")
}

/// A checkpoint namespace for people: `(root)` for `""`.
pub fn ns_label(ns: &str) -> String {
    if ns.is_empty() {
        "(root)".to_string()
    } else {
        ns.to_string()
    }
}

/// `n thing` / `n things`.
pub fn plural(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("{n} {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// A byte count for people (`12.3 KiB`).
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// Left-aligned columns separated by two spaces; the last column is not
/// padded.
#[derive(Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with a header row.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Table {
        Table { rows: vec![header.into_iter().map(Into::into).collect()] }
    }

    /// Adds a row.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// The table as text lines.
    pub fn render(&self) -> Vec<String> {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0; cols];
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        self.rows
            .iter()
            .map(|row| {
                let mut line = String::new();
                for (i, cell) in row.iter().enumerate() {
                    if i + 1 < row.len() {
                        line.push_str(cell);
                        line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
                    } else {
                        line.push_str(cell);
                    }
                }
                line.trim_end().to_string()
            })
            .collect()
    }

    /// Prints the table on stdout.
    pub fn print(&self) -> CliResult {
        for text in self.render() {
            line(&text)?;
        }
        Ok(())
    }
}

fn on_terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// A progress bar of `len` steps on stderr, drawn only when stderr is a
/// terminal (hidden otherwise).
pub fn bar(len: u64, message: &str) -> ProgressBar {
    if !on_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({eta})") {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(message.to_string());
    pb
}

/// A spinner on stderr for an operation of unknown length, drawn only when
/// stderr is a terminal.
pub fn spinner(message: &str) -> ProgressBar {
    if !on_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        pb.set_style(style);
    }
    pb.set_message(message.to_string());
    pb.enable_steady_tick(Duration::from_millis(100));
    pb
}

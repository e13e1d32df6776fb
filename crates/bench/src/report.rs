//! Writing an experiment's run directory: the last step of every
//! experiment.
//!
//! After the measurements, an experiment hands [`write_run`] its raw
//! samples (anything serialisable), its [`Figure`]s (one per figure of the
//! source document it reproduces: title, axis labels with units, one
//! [`Series`] per engine) and its Markdown report. The directory gets
//! `samples.json` (everything measured, so `--render` can rebuild the
//! report without measuring), one CSV per figure, `figures.json`,
//! `report.md`, and one PNG per figure drawn by `scripts/plot.py` with
//! `/usr/bin/python3` (the system Python, which has matplotlib on Debian
//! with python3-matplotlib; a pyenv `python3` on PATH may not). The script
//! is compiled into the binary and fed on stdin, so a run directory never
//! depends on the current directory. Without matplotlib everything else is
//! written and the report says plots were skipped.

use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The plotting script (also runnable by hand:
/// `/usr/bin/python3 scripts/plot.py DIR/figures.json DIR`).
pub const PLOT_PY: &str = include_str!("../../../scripts/plot.py");

/// The interpreter with matplotlib.
pub const PYTHON: &str = "/usr/bin/python3";

/// One line of a figure.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Series {
    /// Legend label (the engine).
    pub name: String,
    /// `(x, y)`; y NaN (null in JSON) where the engine has no value.
    pub points: Vec<(f64, Option<f64>)>,
}

/// One figure: a PNG, a CSV and a table in the report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Figure {
    /// File stem (`throughput` -> throughput.png, throughput.csv).
    pub id: String,
    pub title: String,
    /// Axis labels with units, e.g. "parallel TCP streams",
    /// "throughput (Gbit/s)".
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub series: Vec<Series>,
}

impl Figure {
    /// Every x of every series, sorted, deduplicated.
    pub fn xs(&self) -> Vec<f64> {
        let mut xs: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .collect();
        xs.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        xs.dedup();
        xs
    }

    fn y(&self, s: &Series, x: f64) -> Option<f64> {
        s.points
            .iter()
            .find(|p| p.0 == x)
            .and_then(|p| p.1)
            .filter(|y| y.is_finite())
    }

    /// Wide CSV: the x column, then one column per engine.
    pub fn csv(&self) -> String {
        let mut out = String::new();
        let _ = write!(out, "{}", csv_field(&self.x_label));
        for s in &self.series {
            let _ = write!(out, ",{}", csv_field(&s.name));
        }
        out.push('\n');
        for x in self.xs() {
            let _ = write!(out, "{}", fmt_x(x));
            for s in &self.series {
                match self.y(s, x) {
                    Some(y) => {
                        let _ = write!(out, ",{y}");
                    }
                    None => out.push(','),
                }
            }
            out.push('\n');
        }
        out
    }

    /// Markdown table: x down, engines across, `decimals` digits.
    pub fn markdown(&self, decimals: usize) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "**{}** — {}\n", self.title, self.y_label);
        let _ = write!(out, "| {} |", self.x_label);
        for s in &self.series {
            let _ = write!(out, " {} |", s.name);
        }
        out.push('\n');
        let _ = write!(out, "|---:|");
        for _ in &self.series {
            out.push_str("---:|");
        }
        out.push('\n');
        for x in self.xs() {
            let _ = write!(out, "| {} |", fmt_x(x));
            for s in &self.series {
                let cell = self
                    .y(s, x)
                    .map(|y| format!("{y:.decimals$}"))
                    .unwrap_or_else(|| "—".into());
                let _ = write!(out, " {cell} |");
            }
            out.push('\n');
        }
        out
    }
}

fn fmt_x(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// What [`write_run`] wrote.
#[derive(Clone, Debug)]
pub struct Written {
    pub dir: PathBuf,
    pub pngs: Vec<PathBuf>,
    /// Why plots are missing, if they are.
    pub plots_skipped: Option<String>,
}

/// Whether `/usr/bin/python3` can import matplotlib.
pub fn matplotlib_available() -> Result<(), String> {
    match Command::new(PYTHON)
        .args(["-c", "import matplotlib"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
    {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "{PYTHON} cannot import matplotlib ({})",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or("")
        )),
        Err(e) => Err(format!("{PYTHON}: {e}")),
    }
}

/// Draw `figures.json` in `dir` into PNGs next to it.
pub fn plot(dir: &Path) -> Result<Vec<PathBuf>, String> {
    matplotlib_available()?;
    let mut child = Command::new(PYTHON)
        .arg("-")
        .arg(dir.join("figures.json"))
        .arg(dir)
        .env("MPLBACKEND", "Agg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{PYTHON}: {e}"))?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        stdin
            .write_all(PLOT_PY.as_bytes())
            .map_err(|e| format!("feeding plot.py: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("plot.py: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "plot.py failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .collect())
}

/// Write the run directory. `markdown` is the report without the plot
/// section; the figure list (or why plots were skipped) is appended.
pub fn write_run<T: Serialize>(
    dir: &Path,
    samples: &T,
    figures: &[Figure],
    markdown: &str,
) -> anyhow::Result<Written> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let write = |name: &str, text: &str| -> anyhow::Result<()> {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
    };
    write(
        "samples.json",
        &serde_json::to_string_pretty(samples).context("serialising samples")?,
    )?;
    // The load average belongs to the measurement, not to a later
    // `--render`: kept beside the samples so a re-render repeats it.
    write(LOAD_FILE, &load_average())?;
    write(
        "figures.json",
        &serde_json::to_string_pretty(figures).context("serialising figures")?,
    )?;
    for f in figures {
        write(&format!("{}.csv", f.id), &f.csv())?;
    }
    let (pngs, skipped) = match plot(dir) {
        Ok(p) => (p, None),
        Err(e) => {
            tracing::warn!("plots skipped: {e}");
            (Vec::new(), Some(e))
        }
    };
    let mut md = markdown.to_string();
    let _ = writeln!(md, "\n## Plots\n");
    match &skipped {
        None => {
            for f in figures {
                let _ = writeln!(md, "![{}]({}.png)\n", f.title, f.id);
            }
        }
        Some(e) => {
            let _ = writeln!(
                md,
                "Plots were skipped: {e}. The data of each figure is in its CSV and in \
                 figures.json (`{PYTHON} scripts/plot.py figures.json .` draws them)."
            );
        }
    }
    write("report.md", &md)?;
    Ok(Written {
        dir: dir.to_path_buf(),
        pngs,
        plots_skipped: skipped,
    })
}

/// `--render SAMPLES_JSON`: an earlier run's samples, and where to write
/// its rebuilt report (`out`, else the samples' own directory).
pub fn load_render<T: serde::de::DeserializeOwned>(
    samples: &Path,
    out: Option<&Path>,
) -> anyhow::Result<(T, PathBuf)> {
    let text = std::fs::read_to_string(samples)
        .with_context(|| format!("reading {}", samples.display()))?;
    let r: T = serde_json::from_str(&text)
        .with_context(|| format!("{}: not this experiment's samples.json", samples.display()))?;
    // The report's machine line must say the load of the run, not of now.
    let recorded = samples
        .parent()
        .and_then(|d| std::fs::read_to_string(d.join(LOAD_FILE)).ok())
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "not recorded (report re-rendered from samples.json)".into());
    if let Ok(mut g) = RECORDED_LOAD.lock() {
        *g = Some(recorded);
    }
    let dir = out
        .map(Path::to_path_buf)
        .or_else(|| samples.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    Ok((r, dir))
}

/// Write the run directory ([`write_run`]) and print the report, the
/// directory and why plots are missing, if they are: the last step of every
/// experiment's command.
pub fn publish<T: Serialize>(
    dir: &Path,
    samples: &T,
    figures: &[Figure],
    markdown: &str,
) -> anyhow::Result<()> {
    let w = write_run(dir, samples, figures, markdown)?;
    println!("{markdown}");
    println!("run directory: {}", w.dir.display());
    if let Some(e) = w.plots_skipped {
        println!("plots skipped: {e}");
    }
    Ok(())
}

/// An experiment's command. With a `render` path (`--render`), rebuild
/// the report of an earlier run from its samples.json (into `out`, else
/// next to it); else install the Ctrl-C handlers, `measure`, and write the
/// run directory (`out`, else `bench-<name>-<time>`). Either way the
/// figures and the Markdown report come from `figures` and `markdown`, and
/// [`publish`] writes them.
pub fn cli<T: Serialize + serde::de::DeserializeOwned>(
    run: &super::RunArgs,
    name: &str,
    measure: impl FnOnce() -> anyhow::Result<T>,
    figures: fn(&T) -> Vec<Figure>,
    markdown: fn(&T, &[Figure]) -> String,
) -> anyhow::Result<()> {
    let out = run.out.as_deref();
    let (r, dir) = match run.render.as_deref() {
        Some(p) => load_render::<T>(p, out)?,
        None => {
            super::forward::install_signal_handlers();
            let dir = out.map(Path::to_path_buf);
            (measure()?, dir.unwrap_or_else(|| default_dir(name)))
        }
    };
    let figs = figures(&r);
    publish(&dir, &r, &figs, &markdown(&r, &figs))
}

/// The file of a run directory that keeps the load average at the end of
/// the measurement, for `--render`.
const LOAD_FILE: &str = "machine-load.txt";

/// The load average a re-rendered report shows: the one recorded with its
/// samples (set by [`load_render`]); `None` while measuring.
static RECORDED_LOAD: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// The load average (1/5/15 min) of the run being reported: the recorded
/// one when re-rendering, else the machine's now (the end of the run).
fn load_average() -> String {
    if let Some(l) = RECORDED_LOAD.lock().ok().and_then(|g| g.clone()) {
        return l;
    }
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The machine section every report opens with.
pub fn machine_section(perf: &str) -> String {
    let load = load_average();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<f64>().ok())
        })
        .map(|kb| format!("{:.1} GiB RAM", kb / 1024.0 / 1024.0))
        .unwrap_or_default();
    format!(
        "Machine: {}, {mem}. Load average (1/5/15 min) at the end: {load}. {perf}.\n",
        super::machine_description()
    )
}

/// Seconds since the epoch (0 if the clock is before it).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A default output directory: `bench-<name>-<unix time>` in the current
/// directory.
pub fn default_dir(name: &str) -> PathBuf {
    PathBuf::from(format!("bench-{name}-{}", unix_now()))
}

/// A table cell: `v` with `decimals` digits, `—` where there is none.
pub fn cell(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.decimals$}"),
        _ => "—".into(),
    }
}

/// Counts (or names) joined by `sep`: `1, 2, 5`.
pub fn join<T: ToString>(v: &[T], sep: &str) -> String {
    v.iter().map(T::to_string).collect::<Vec<_>>().join(sep)
}

/// A Markdown table: `head` is each column's title and whether it is
/// right-aligned (numbers); every line ends in a newline.
pub fn table(head: &[(&str, bool)], rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    let line = |out: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        out.push('|');
        for c in cells {
            let _ = write!(out, " {c} |");
        }
        out.push('\n');
    };
    line(&mut out, &mut head.iter().map(|h| h.0));
    out.push('|');
    for (_, right) in head {
        out.push_str(if *right { "---:|" } else { "---|" });
    }
    out.push('\n');
    for r in rows {
        line(&mut out, &mut r.iter().map(String::as_str));
    }
    out
}

/// `\n## <title>\n` and one `- item` line per item; nothing if no items.
pub fn write_list(s: &mut String, title: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n## {title}\n");
    for f in items {
        let _ = writeln!(s, "- {f}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig() -> Figure {
        Figure {
            id: "tp".into(),
            title: "Throughput".into(),
            x_label: "streams".into(),
            y_label: "Gbit/s".into(),
            log_x: true,
            series: vec![
                Series {
                    name: "a".into(),
                    points: vec![(1.0, Some(2.5)), (4.0, Some(3.0))],
                },
                Series {
                    name: "b,c".into(),
                    points: vec![(1.0, None), (4.0, Some(f64::NAN))],
                },
            ],
        }
    }

    #[test]
    fn a_rerendered_report_shows_the_runs_load_average() {
        let dir = std::env::temp_dir().join(format!("nicflow-report-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("samples.json"), "{}").unwrap();
        std::fs::write(dir.join(LOAD_FILE), "9.99 8.88 7.77\n").unwrap();
        let (_v, out) = load_render::<serde_json::Value>(&dir.join("samples.json"), None).unwrap();
        assert_eq!(out, dir);
        let m = machine_section("x");
        // Process-wide: later tests of this binary measure, not re-render.
        *RECORDED_LOAD.lock().unwrap() = None;
        let _ = std::fs::remove_dir_all(&dir);
        assert!(m.contains("at the end: 9.99 8.88 7.77."), "{m}");
    }

    #[test]
    fn csv_and_markdown() {
        let f = fig();
        assert_eq!(f.csv(), "streams,a,\"b,c\"\n1,2.5,\n4,3,\n");
        let md = f.markdown(2);
        assert!(md.contains("| 1 | 2.50 | — |"), "{md}");
        assert!(md.contains("| 4 | 3.00 | — |"), "{md}");
    }

    #[test]
    fn table_cells_lists() {
        let t = table(
            &[("engine", false), ("Gbit/s", true)],
            &[
                vec!["a".into(), cell(Some(1.234), 2)],
                vec!["b".into(), cell(None, 0)],
            ],
        );
        assert_eq!(
            t,
            "| engine | Gbit/s |\n|---|---:|\n| a | 1.23 |\n| b | — |\n"
        );
        assert_eq!(join(&[1, 2, 5], ", "), "1, 2, 5");
        let mut s = String::new();
        write_list(&mut s, "Failures", &[]);
        assert!(s.is_empty());
        write_list(&mut s, "Failures", &["x".into()]);
        assert_eq!(s, "\n## Failures\n\n- x\n");
    }
}

//! `pto soak`: `pto_scene::soak` against `pto serve` processes of this same binary.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use pto_scene::soak::{ServerPool, SoakOptions, SoakReport, default_files, soak};

use crate::args::SoakArgs;
use crate::{InputError, Outcome};

/// `pto serve` processes, killed and reaped when dropped.
struct Servers {
    children: Vec<(String, Child)>,
}

impl Servers {
    fn start(n: usize) -> anyhow::Result<Servers> {
        let mut s = Servers {
            children: Vec::new(),
        };
        for _ in 0..n {
            s.children.push(spawn_server()?);
        }
        Ok(s)
    }
}

/// A fresh `pto serve` on a loopback port (a new process image of this binary).
fn spawn_server() -> anyhow::Result<(String, Child)> {
    let exe = std::env::current_exe().context("finding this binary")?;
    // Not a node child (those go through pto-node's spawn module): a `pto serve` of this
    // binary, a fresh process image with this process's environment, which the soak faults.
    #[allow(clippy::disallowed_methods)]
    let mut child = Command::new(exe)
        .args(["serve", "--listen", "127.0.0.1:0", "--chips", "2"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting pto serve")?;
    let mut line = String::new();
    let stdout = child.stdout.take().context("pto serve's stdout")?;
    BufReader::new(stdout)
        .read_line(&mut line)
        .context("reading pto serve's address")?;
    let addr = line
        .split_whitespace()
        .find(|w| w.starts_with("127.0.0.1:"))
        .with_context(|| format!("no address in pto serve's first line {line:?}"))?;
    Ok((format!("http://{addr}"), child))
}

impl ServerPool for Servers {
    fn servers(&self) -> Vec<(String, u32)> {
        self.children
            .iter()
            .map(|(a, c)| (a.clone(), c.id()))
            .collect()
    }

    fn restart(&mut self, pid: u32) -> anyhow::Result<()> {
        let Some(i) = self.children.iter().position(|(_, c)| c.id() == pid) else {
            return Ok(());
        };
        let (_, mut old) = self.children.remove(i);
        let _ = old.kill();
        let _ = old.wait();
        self.children.insert(i, spawn_server()?);
        Ok(())
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn seconds(flag: &str, v: f64) -> Result<Duration, InputError> {
    if v.is_finite() && v > 0.0 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(InputError(format!(
            "{flag} {v} must be a positive number of seconds"
        )))
    }
}

pub(crate) fn run(args: &SoakArgs) -> anyhow::Result<Outcome> {
    let duration = seconds("--seconds", args.seconds)?;
    let run_deadline = seconds("--run-deadline", args.run_deadline)?;
    if !(0.0..=1.0).contains(&args.fault_rate) {
        return Err(InputError(format!(
            "--fault-rate {} must be between 0 and 1",
            args.fault_rate
        ))
        .into());
    }
    let files = if args.scenes.is_empty() {
        default_files(Path::new("scenes"))
    } else {
        args.scenes.clone()
    };
    if files.is_empty() {
        return Err(InputError(
            "no level-3 or level-4 scene file to soak (give some, or run from the repository root)"
                .into(),
        )
        .into());
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let output = tempfile::tempdir().context("a directory for the cases' output")?;
    let options = SoakOptions {
        duration,
        seed,
        files,
        fault_rate: args.fault_rate,
        run_deadline,
        warm_up: duration.mul_f64(0.2).min(Duration::from_secs(120)),
        output: output.path().to_path_buf(),
    };
    let mut servers = Servers::start(args.servers)?;
    eprintln!(
        "pto soak: {} s, seed {seed}, {} scene file(s), {} server(s)",
        args.seconds,
        options.files.len(),
        args.servers
    );
    let mut next_line = Duration::from_secs(10);
    let report = soak(&options, &mut servers, |r| {
        if r.elapsed >= next_line {
            next_line = r.elapsed + Duration::from_secs(10);
            eprintln!(
                "  {:>5.0} s: {} runs, {} passed, {} failed by a fault, {} faults, {} problem(s)",
                r.elapsed.as_secs_f64(),
                r.runs,
                r.passed,
                r.failed_by_fault,
                r.faults_injected(),
                r.problems.len()
            );
        }
    })
    .map_err(|e| InputError(format!("{e:#}")))?;
    drop(servers);
    crate::print_out(&render(&report, seed));
    Ok(if report.problems.is_empty() {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}

fn render(r: &SoakReport, seed: u64) -> String {
    let mut out = format!(
        "soak: {:.0} s, seed {seed}: {} runs — {} passed, {} failed as their fault explains; {} faults injected ({} between runs)\n",
        r.elapsed.as_secs_f64(),
        r.runs,
        r.passed,
        r.failed_by_fault,
        r.faults_injected(),
        r.faults_between_runs
    );
    for (what, n) in &r.faults {
        out.push_str(&format!("  fault  {what:<24} {n}\n"));
    }
    for (case, n) in &r.cases {
        out.push_str(&format!("  case   {case:<40} {n} run(s)\n"));
    }
    out.push_str(&format!(
        "  RSS {} → {} MiB after warm-up; threads {} → {}\n",
        r.rss_after_warm_up >> 20,
        r.rss_end >> 20,
        r.threads_after_warm_up,
        r.threads_end
    ));
    if let Some((took, what)) = &r.slowest {
        out.push_str(&format!(
            "  slowest run {:.2} s: {what}\n",
            took.as_secs_f64()
        ));
    }
    if r.problems.is_empty() {
        out.push_str(
            "no problem: every run passed or failed naming its dead worker; nothing leaked\n",
        );
    } else {
        for p in &r.problems {
            out.push_str(&format!("PROBLEM: {p}\n"));
        }
    }
    out
}

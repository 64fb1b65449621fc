//! The folder of one run: `<out>/<run-id>/` holding one CSV per bench and `meta.json`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::csv::{CsvSink, CsvTable, SamplesTable};
use super::meta::RunMeta;

#[derive(Debug)]
pub struct RunDir {
    pub id: String,
    pub path: PathBuf,
    pub meta: RunMeta,
    /// Keep every iteration's sample in `<bench>_samples.csv`.
    pub raw: bool,
}

/// `20261129T140102Z-hostname`: sortable, unique per host and second.
/// `text` with every character but letters, digits and `-` made `_` (for file names).
pub fn file_safe(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

pub fn new_run_id(host: &str) -> String {
    let host = file_safe(host);
    // The process id makes it unique on the host: two runs started in the same second (into
    // two --out folders) would otherwise share an id, and `check` would take them for one.
    format!(
        "{}-{}-{}",
        chrono::Utc::now().format("%Y%m%dT%H%M%SZ"),
        host,
        std::process::id()
    )
}

/// Points `<out>/latest` at the run `id` (a relative symlink, replaced atomically). Best
/// effort: a `latest` that is not a symlink is left alone, and a failure only logs.
fn point_latest_at(out: &Path, id: &str) {
    #[cfg(unix)]
    {
        let latest = out.join("latest");
        if latest.exists() && !latest.is_symlink() {
            tracing::warn!(
                "{} is not a symlink; not pointing it at the new run",
                latest.display()
            );
            return;
        }
        let tmp = out.join(format!(".latest-{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let made =
            std::os::unix::fs::symlink(id, &tmp).and_then(|_| std::fs::rename(&tmp, &latest));
        if let Err(e) = made {
            tracing::warn!("cannot point {} at {id}: {e}", latest.display());
        }
    }
}

/// Replaces `dir/meta.json` atomically (a crash leaves the old one whole).
fn write_meta_json(dir: &Path, meta: &impl serde::Serialize) -> Result<()> {
    let tmp = dir.join("meta.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(meta)?)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, dir.join("meta.json"))?;
    Ok(())
}

/// Rewrites the meta.json of the run in `dir` as aborted by `why` (a signal), keeping
/// everything else it says.
pub fn mark_aborted(dir: &Path, why: &str) -> Result<()> {
    let path = dir.join("meta.json");
    let mut meta: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    meta["status"] = "aborted".into();
    meta["error"] = format!("interrupted by {why}").into();
    meta["finished_utc"] = chrono::Utc::now().to_rfc3339().into();
    write_meta_json(dir, &meta)?;
    ended(dir);
    Ok(())
}

/// What a run ends with beside meta.json (summary.json). The reading layer, which knows what
/// a run's tables mean, sets it once at start (`commands::run`); this layer only knows when a
/// run ends, and a run's outcome never hangs on it.
static ON_END: std::sync::OnceLock<fn(&Path) -> Result<String>> = std::sync::OnceLock::new();

/// Sets what [`RunDir::finish`] and [`mark_aborted`] write last.
pub fn on_end(write: fn(&Path) -> Result<String>) {
    let _ = ON_END.set(write);
}

fn ended(dir: &Path) {
    if let Some(Err(e)) = ON_END.get().map(|write| write(dir)) {
        tracing::warn!("{e:#}");
    }
}

/// A folder with a meta.json of any kind (a damaged one too: its reader says what is wrong)
/// or with a CSV: a run, or what is left of one.
fn looks_like_a_run(dir: &Path) -> bool {
    dir.is_dir() && (dir.join("meta.json").symlink_metadata().is_ok() || holds_csv(dir))
}

/// Whether `dir` holds a CSV file (a run's tables, whatever its meta.json says).
pub fn holds_csv(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut it| {
        it.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "csv")))
    })
}

/// The run folders under `out` (those with a meta.json, or CSVs), oldest first.
pub fn list_runs(out: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(out).with_context(|| {
        format!(
            "cannot read {}: give the folder that holds the runs (default results/)",
            out.display()
        )
    })?;
    let mut runs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| !e.path().is_symlink())
        .map(|e| e.path())
        .filter(|p| looks_like_a_run(p))
        .collect();
    runs.sort();
    Ok(runs)
}

impl RunDir {
    /// Creates the folder (and a unique suffix if a run of the same second exists) and writes
    /// `meta.json` with status "running", so an interrupted run never looks complete. `out`
    /// is made and opened without following a link, and as root refused where another user
    /// owns or may write it or a folder on its way ([`crate::safe_fs`]).
    pub fn create(out: &Path, meta: RunMeta, raw: bool) -> Result<RunDir> {
        crate::safe_fs::make_dir(out, &crate::safe_fs::OUT)?;
        let base = new_run_id(&meta.host.hostname);
        let mut id = base.clone();
        let mut k = 1;
        // create_dir, not a look first: the folder is this run's only if this call made it.
        let path = loop {
            let path = out.join(&id);
            match std::fs::create_dir(&path) {
                Ok(()) => break path,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && k < 1000 => {
                    k += 1;
                    id = format!("{base}-{k}");
                }
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "cannot create run folder {}: choose a writable one with --out DIR",
                            path.display()
                        )
                    })
                }
            }
        };
        let mut dir = RunDir {
            id,
            path,
            meta,
            raw,
        };
        dir.meta.run_id = dir.id.clone();
        dir.write_meta()?;
        point_latest_at(out, &dir.id);
        crate::interrupt::opened(dir.path.clone(), mark_aborted);
        Ok(dir)
    }

    /// Creates `<T::NAME>.csv` in the run folder, header first.
    pub fn table<T: CsvTable>(&self) -> Result<CsvSink<T>> {
        CsvSink::create(&self.path.join(format!("{}.csv", T::NAME)))
    }

    /// `<bench>_samples.csv` when the run keeps every sample (`--raw`).
    pub fn samples_table(&self, bench: &str) -> Result<Option<CsvSink<SamplesTable>>> {
        if !self.raw {
            return Ok(None);
        }
        CsvSink::create(&self.path.join(format!("{bench}_samples.csv"))).map(Some)
    }

    pub fn write_meta(&self) -> Result<()> {
        write_meta_json(&self.path, &self.meta)
    }

    pub fn finish(&mut self, result: &Result<()>) -> Result<()> {
        crate::interrupt::closed(&self.path);
        self.meta.finished_utc = Some(chrono::Utc::now().to_rfc3339());
        match result {
            Ok(()) => self.meta.status = "complete".into(),
            Err(e) => {
                self.meta.status = "failed".into();
                self.meta.error = Some(format!("{e:#}"));
            }
        }
        self.write_meta()?;
        ended(&self.path);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_id_names_its_second_its_host_and_its_process() {
        let id = new_run_id("gpu 01");
        let pid = std::process::id().to_string();
        assert!(id.ends_with(&format!("-gpu_01-{pid}")), "{id}");
        // Two runs of one process in one folder in the same second: two folders.
        let out = tempfile::tempdir().unwrap();
        let meta = || RunMeta::new(crate::host::HostInfo::probe());
        let a = RunDir::create(out.path(), meta(), false).unwrap();
        let b = RunDir::create(out.path(), meta(), false).unwrap();
        assert_ne!(a.id, b.id);
        assert!(a.path.is_dir() && b.path.is_dir());
    }

    #[test]
    fn a_symlinked_output_folder_is_refused_and_nothing_is_written_through_it() {
        let home = tempfile::tempdir().unwrap();
        let real = home.path().join("root-only");
        std::fs::create_dir(&real).unwrap();
        let out = home.path().join("out");
        std::os::unix::fs::symlink(&real, &out).unwrap();
        let meta = RunMeta::new(crate::host::HostInfo::probe());
        let e = format!("{:#}", RunDir::create(&out, meta, false).unwrap_err());
        assert!(e.contains("a symbolic link") && e.contains("--out"), "{e}");
        assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0);
    }
}

//! Writers for run outputs: CSV tables (one per bench) and the run's metadata.

pub mod csv;
pub mod label;
pub mod meta;
pub mod metrics;
pub mod run_dir;
pub mod table_spec;
pub mod view;

pub use self::csv::{
    read_optional, read_table, CsvSink, CsvTable, DataError, Line, SCHEMA_VERSION,
};
pub use self::run_dir::RunDir;
pub use self::table_spec::{AnyRows, Charts, TableSpec};

/// The most bytes of meta.json that are read back.
pub const MAX_META_BYTES: u64 = 16 << 20;

/// A run folder's meta.json: `Ok(None)` when the folder has none, else its document, or what
/// is wrong with it, naming the file: a FIFO, a socket, a device or a folder in its place (a
/// link followed to what it names), a dangling link, an empty file, a file too large, text
/// that is not a JSON object. Nothing but a regular file is opened, so a FIFO cannot hang a
/// reader.
pub fn read_meta(dir: &std::path::Path) -> anyhow::Result<Option<serde_json::Value>> {
    let path = dir.join("meta.json");
    let named = |what: String| anyhow::anyhow!("{}: {what}", path.display());
    if path.symlink_metadata().is_err() {
        return Ok(None);
    }
    let kind = match std::fs::metadata(&path) {
        Err(e) => return Err(named(format!("a link to nothing it can read ({e})"))),
        Ok(m) => file_kind(&m.file_type()),
    };
    if kind != "regular file" {
        return Err(named(format!("a {kind}, not a regular file")));
    }
    let bytes = read_capped(&path, MAX_META_BYTES).map_err(|e| named(e.to_string()))?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(named("empty".into()));
    }
    match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(v) if v.is_object() => Ok(Some(v)),
        Ok(_) => Err(named("JSON, but not an object of run metadata".into())),
        Err(e) => Err(named(format!("not JSON ({e})"))),
    }
}

/// What a file is, in words.
fn file_kind(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_file() {
        "regular file"
    } else if t.is_dir() {
        "folder"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else {
        "special file"
    }
}

/// The most bytes of an input file (a config, policy, scenario, topology, baseline or trace)
/// that are read.
pub const MAX_INPUT_BYTES: u64 = 16 << 20;

/// Reads an input file given on the command line as text, refusing what is not a regular file
/// (a FIFO would block the read for ever, a device would never end) and what is larger than
/// [`MAX_INPUT_BYTES`]; the error says which.
pub fn read_input(path: &std::path::Path) -> std::io::Result<String> {
    if let Ok(m) = std::fs::metadata(path) {
        if !m.is_file() {
            let kind = file_kind(&m.file_type());
            return Err(std::io::Error::other(format!(
                "a {kind}, not a regular file"
            )));
        }
    }
    let bytes = read_capped(path, MAX_INPUT_BYTES).map_err(std::io::Error::other)?;
    String::from_utf8(bytes).map_err(|_| std::io::Error::other("not UTF-8 text"))
}

/// Reads a file of a run folder, refusing what is not a regular file (a link to a device, a
/// folder) and what is larger than `cap`: a run folder may come from anywhere.
pub fn read_capped(path: &std::path::Path, cap: u64) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(anyhow::anyhow!("not a regular file"));
    }
    if meta.len() > cap {
        return Err(anyhow::anyhow!(
            "{} bytes is over the {cap}-byte cap of a file read back",
            meta.len()
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path).and_then(|f| f.take(cap + 1).read_to_end(&mut bytes))?;
    if bytes.len() as u64 > cap {
        return Err(anyhow::anyhow!(
            "over the {cap}-byte cap of a file read back"
        ));
    }
    Ok(bytes)
}

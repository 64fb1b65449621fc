//! MUNGE credentials, for a Slurm job with no token: each rank proves to rank 0 that it runs
//! as the job's user in the job (a credential from the node's munged, decodable only by that
//! user, carrying the job id and both ends' nonces), and rank 0 proves the same back, sending
//! the run's secret inside its credential (MUNGE encrypts the payload). munge and unmunge are
//! run by absolute path; the payload goes through standard input, never the command line.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MUNGE: &str = "/usr/bin/munge";
const UNMUNGE: &str = "/usr/bin/unmunge";
/// The longest credential read from a peer.
pub const MAX_CREDENTIAL: usize = 4096;
/// How long munged has to answer.
const WAIT: Duration = Duration::from_secs(5);

/// Whether munge and unmunge are installed and munged answers.
pub fn available() -> bool {
    std::path::Path::new(UNMUNGE).exists()
        && run(MUNGE, &["-n"], b"").is_ok_and(|c| !c.trim().is_empty())
}

/// This process's real user id: the job's user.
pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    #[allow(unsafe_code)]
    unsafe {
        libc::getuid()
    }
}

/// A credential carrying `payload`, decodable only by `uid`.
pub fn encode(payload: &str, uid: u32) -> anyhow::Result<String> {
    let cred = run(MUNGE, &["-u", &uid.to_string()], payload.as_bytes())?;
    let cred = cred.trim().to_string();
    if cred.is_empty() || cred.len() > MAX_CREDENTIAL {
        return Err(anyhow::anyhow!(
            "munge gave a credential of {} bytes",
            cred.len()
        ));
    }
    Ok(cred)
}

/// A credential's user id and payload, if munged decodes it (it refuses a replay, an expired
/// credential, one from a host without the same key, and one restricted to another user).
pub fn decode(cred: &str) -> anyhow::Result<(u32, String)> {
    let out = run(UNMUNGE, &["-N", "-k", "STATUS,UID"], cred.as_bytes())?;
    let (meta, payload) = out
        .split_once("\n\n")
        .ok_or_else(|| anyhow::anyhow!("unmunge gave no payload"))?;
    let field = |key: &str| {
        meta.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim_start_matches(':').trim().parse::<u32>().ok())
    };
    match (field("STATUS"), field("UID")) {
        (Some(0), Some(uid)) => Ok((uid, payload.to_string())),
        _ => Err(anyhow::anyhow!("unmunge refused it: {}", meta.trim())),
    }
}

/// Runs `prog` with `input` on standard input; its standard output, or why not, within
/// [`WAIT`].
fn run(prog: &str, args: &[&str], input: &[u8]) -> anyhow::Result<String> {
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot run {prog}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input)
            .map_err(|e| anyhow::anyhow!("{prog}: {e}"))?;
    }
    let deadline = Instant::now() + WAIT;
    let status = loop {
        match child.try_wait()? {
            Some(s) => break s,
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(anyhow::anyhow!(
                    "{prog} did not answer within {} s",
                    WAIT.as_secs()
                ));
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let mut out = String::new();
    let mut err = String::new();
    if let Some(o) = child.stdout.take() {
        let _ = o.take(64 << 10).read_to_string(&mut out);
    }
    if let Some(e) = child.stderr.take() {
        let _ = e.take(4 << 10).read_to_string(&mut err);
    }
    if !status.success() {
        return Err(anyhow::anyhow!("{prog} failed ({status}): {}", err.trim()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[ignore = "needs munged running: scripts/security-test starts it and runs this"]
    fn a_credential_carries_its_user_and_payload_once() {
        assert!(available(), "munged is not running");
        let cred = encode("morphbench test payload", uid()).unwrap();
        assert_eq!(
            decode(&cred).unwrap(),
            (uid(), "morphbench test payload".to_string())
        );
        assert!(decode(&cred).is_err(), "a replay is refused");
        assert!(decode("MUNGE:garbage:").is_err());
    }
}

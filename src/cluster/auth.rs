//! Who may take part in a run. Every connection between ranks (the rendezvous and control
//! channel, the pair connections of `links` and `pipeline`) opens with a challenge-response
//! proof, both ways, that each end holds the job's secret; after it, every control message
//! carries a MAC keyed for that connection alone (frame.rs). HMAC-SHA-256 from
//! RustCrypto's `hmac` and `sha2`: nothing here is hand-made crypto, only the message layout.
//! The threat model and the token sources are in docs/security.md.
//!
//! The handshake, fixed-size so nothing is allocated from a stranger's bytes:
//! the accepting end sends `MBA1` and its nonce; the connecting end answers with its nonce and
//! HMAC(secret, "rank" | both nonces); the accepting end checks it and answers
//! HMAC(secret, "root" | both nonces), which the connecting end checks. The connection's key is
//! HMAC(secret, "session" | both nonces). With `--insecure` both ends say `MBA0` and skip the
//! proofs, so a secured rank and an insecure one refuse each other by name.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::error::WireError;

type HmacSha256 = Hmac<Sha256>;

/// The environment variable every launcher passes on (srun does by default; `mpirun -x`,
/// torchrun and a Kubernetes Secret by configuration).
pub const TOKEN_ENV: &str = "MORPHBENCH_TOKEN";
/// The shortest token believed: 16 bytes, 128 bits if random.
pub const MIN_TOKEN: usize = 16;
/// The longest token file read.
const MAX_TOKEN: u64 = 4096;

const SECURED: [u8; 4] = *b"MBA1";
const OPEN: [u8; 4] = *b"MBA0";
const MUNGED: [u8; 4] = *b"MBA2";
const NONCE: usize = 32;
/// A MAC's length.
pub const TAG: usize = 32;

/// The job's secret, as a key (SHA-256 of the token, so any length of token gives one key).
#[derive(Clone)]
pub struct Secret([u8; 32]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// A secret from a token's text (surrounding whitespace dropped, as a file's newline).
    pub fn from_token(token: &str) -> anyhow::Result<Secret> {
        let t = token.trim();
        if t.len() < MIN_TOKEN {
            return Err(anyhow::anyhow!(
                "the job's token is {} bytes, under the {MIN_TOKEN} believed: make one with \
                 `head -c 32 /dev/urandom | base64`",
                t.len()
            ));
        }
        Ok(Secret(Sha256::digest(t.as_bytes()).into()))
    }

    fn mac(&self, label: &[u8], theirs: &[u8; NONCE], ours: &[u8; NONCE]) -> [u8; TAG] {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length");
        m.update(label);
        m.update(theirs);
        m.update(ours);
        m.finalize().into_bytes().into()
    }
}

/// A fresh random token (hex, 64 characters) for the ranks a launcher starts itself.
pub fn fresh_token() -> String {
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// How this rank proves itself, and checks the others.
#[derive(Debug, Clone)]
pub enum Trust {
    Secret(Arc<Secret>),
    /// A Slurm job's MUNGE credentials (no token given): rank 0 holds the run's secret, which
    /// every other rank learns from its credential once both have proven themselves.
    Munge(Arc<MungeJob>),
    /// `--insecure`: anyone who reaches the port takes part.
    Insecure,
}

/// What a MUNGE proof binds: the job and its user.
#[derive(Debug)]
pub struct MungeJob {
    pub job: String,
    pub uid: u32,
    /// The run's secret: rank 0's, made fresh; none at another rank until it learns it.
    pub secret: Option<(String, Secret)>,
}

impl Trust {
    pub fn is_insecure(&self) -> bool {
        matches!(self, Trust::Insecure)
    }

    /// "authenticated" or "insecure", for meta.json and the console.
    pub fn describe(&self) -> &'static str {
        match self {
            Trust::Secret(_) | Trust::Munge(_) => "authenticated",
            Trust::Insecure => "insecure",
        }
    }

    /// Rank 0's trust for its rendezvous: under MUNGE, with the run's secret made.
    pub fn for_root(self) -> Trust {
        match self {
            Trust::Munge(m) if m.secret.is_none() => {
                let token = fresh_token();
                let secret = Secret::from_token(&token).expect("a fresh token is long enough");
                Trust::Munge(Arc::new(MungeJob {
                    job: m.job.clone(),
                    uid: m.uid,
                    secret: Some((token, secret)),
                }))
            }
            t => t,
        }
    }

    /// The trust every connection after the rendezvous uses: the run's secret, once known.
    pub fn settled(&self) -> Trust {
        match self {
            Trust::Munge(m) => match &m.secret {
                Some((_, s)) => Trust::Secret(Arc::new(s.clone())),
                None => self.clone(),
            },
            t => t.clone(),
        }
    }

    fn magic(&self) -> [u8; 4] {
        match self {
            Trust::Secret(_) => SECURED,
            Trust::Munge(_) => MUNGED,
            Trust::Insecure => OPEN,
        }
    }
}

/// Whether the other end's magic is ours: a stranger's bytes, or a rank launched to prove
/// itself another way, are refused by name.
fn agree(trust: &Trust, theirs: [u8; 4]) -> Result<(), AuthError> {
    if ![SECURED, MUNGED, OPEN].contains(&theirs) {
        return Err(AuthError::NotOurs);
    }
    if theirs != trust.magic() {
        return Err(AuthError::Mismatch {
            ours: mode(trust.magic()),
            theirs: mode(theirs),
        });
    }
    Ok(())
}

/// How each magic proves itself, for a mismatch's message.
fn mode(magic: [u8; 4]) -> &'static str {
    match magic {
        SECURED => "a token (--token-file or MORPHBENCH_TOKEN)",
        MUNGED => "MUNGE (a Slurm job without a token)",
        _ => "no secret (--insecure)",
    }
}

/// Where the secret may come from: the flags; the environment is read by [`resolve`].
#[derive(Debug, Clone, Default)]
pub struct TrustSource {
    /// `--token-file FILE`.
    pub token_file: Option<PathBuf>,
    /// `--insecure`.
    pub insecure: bool,
}

/// The secret of this run: `--insecure`, else `--token-file`, else `MORPHBENCH_TOKEN`. A
/// world of one rank needs none (no peer ever connects). With no source, the error names them.
pub fn resolve(
    src: &TrustSource,
    world: u32,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Trust> {
    if src.insecure {
        return Ok(Trust::Insecure);
    }
    if let Some(path) = &src.token_file {
        return read_token_file(path).map(|s| Trust::Secret(Arc::new(s)));
    }
    if let Some(t) = env(TOKEN_ENV).filter(|t| !t.trim().is_empty()) {
        return Secret::from_token(&t)
            .map(|s| Trust::Secret(Arc::new(s)))
            .map_err(|e| anyhow::anyhow!("{TOKEN_ENV}: {e}"));
    }
    if world <= 1 {
        return Ok(Trust::Insecure);
    }
    if let Some(job) = env("SLURM_JOB_ID").filter(|j| !j.is_empty() && j.len() <= 64) {
        if super::munge::available() {
            return Ok(Trust::Munge(Arc::new(MungeJob {
                job,
                uid: super::munge::uid(),
                secret: None,
            })));
        }
    }
    Err(anyhow::anyhow!(
        "a run of {world} ranks needs the job's secret, so that no other process can join it: \
         give --token-file FILE (the same file on every rank) or set {TOKEN_ENV} in the \
         launcher's environment (srun passes it on; mpirun needs -x {TOKEN_ENV}; torchrun and \
         a Kubernetes Secret pass it as any variable); --local N makes its own; --insecure runs \
         without one (anyone who reaches the port can join); under Slurm with munged running, \
         MUNGE credentials stand in for a token. See docs/security.md"
    ))
}

fn read_token_file(path: &Path) -> anyhow::Result<Secret> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let name = path.display();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| anyhow::anyhow!("--token-file {name}: {e}"))?;
    let meta = f
        .metadata()
        .map_err(|e| anyhow::anyhow!("--token-file {name}: {e}"))?;
    if !meta.is_file() {
        return Err(anyhow::anyhow!("--token-file {name} is not a regular file"));
    }
    if meta.mode() & 0o002 != 0 {
        return Err(anyhow::anyhow!(
            "--token-file {name} is writable by every user, so anyone could set the job's \
             secret: `chmod o-w {name}` (0400 is best)"
        ));
    }
    if meta.mode() & 0o004 != 0 {
        tracing::warn!("--token-file {name} is readable by every user; 0400 keeps it the job's");
    }
    let mut text = String::new();
    f.take(MAX_TOKEN + 1)
        .read_to_string(&mut text)
        .map_err(|e| anyhow::anyhow!("--token-file {name}: {e}"))?;
    if text.len() as u64 > MAX_TOKEN {
        return Err(anyhow::anyhow!(
            "--token-file {name} is over {MAX_TOKEN} bytes: a token, not a document"
        ));
    }
    Secret::from_token(&text).map_err(|e| anyhow::anyhow!("--token-file {name}: {e}"))
}

/// A connection's key, once proven; `None` on an insecure run.
pub type SessionKey = Option<[u8; TAG]>;

/// Why a handshake failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AuthError {
    #[error("it {0} during the proof of the job's secret")]
    Wire(WireError),
    #[error("it did not prove it holds the job's secret")]
    BadProof,
    #[error(
        "it refused this rank's proof: the two ends hold different secrets (or jobs, or users)"
    )]
    Rejected,
    #[error("it proves itself by {theirs}, this rank by {ours}: launch every rank alike")]
    Mismatch {
        ours: &'static str,
        theirs: &'static str,
    },
    #[error("its MUNGE credential is refused: {0}")]
    Munge(String),
    #[error("it is not a morphbench rank (no proof of the job's secret)")]
    NotOurs,
}

fn fill(stream: &TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), AuthError> {
    super::deadline::read_by(stream, buf, deadline).map_err(AuthError::Wire)
}

fn put(mut stream: &TcpStream, bytes: &[u8], deadline: Instant) -> Result<(), AuthError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(AuthError::Wire(WireError::TimedOut));
    }
    stream
        .set_write_timeout(Some(left))
        .and_then(|()| stream.write_all(bytes))
        .map_err(|e| AuthError::Wire(WireError::from_io(&e)))
}

fn nonce() -> [u8; NONCE] {
    let mut n = [0u8; NONCE];
    rand::rngs::OsRng.fill_bytes(&mut n);
    n
}

fn verify(secret: &Secret, label: &[u8], a: &[u8; NONCE], b: &[u8; NONCE], tag: &[u8]) -> bool {
    let mut m = HmacSha256::new_from_slice(&secret.0).expect("HMAC takes any key length");
    m.update(label);
    m.update(a);
    m.update(b);
    m.verify_slice(tag).is_ok()
}

/// The accepting end (rank 0, a pair's server): challenges the peer, checks its proof, proves
/// itself. Reads nothing but fixed-size or bounded fields by `deadline`.
pub fn accept(
    stream: &TcpStream,
    trust: &Trust,
    deadline: Instant,
) -> Result<SessionKey, AuthError> {
    let ours = nonce();
    put(stream, &[&trust.magic()[..], &ours[..]].concat(), deadline)?;
    let mut head = [0u8; 4];
    fill(stream, &mut head, deadline)?;
    agree(trust, head)?;
    let mut theirs = [0u8; NONCE];
    match trust {
        Trust::Insecure => Ok(None),
        Trust::Secret(secret) => {
            let mut answer = [0u8; NONCE + TAG];
            fill(stream, &mut answer, deadline)?;
            theirs.copy_from_slice(&answer[..NONCE]);
            if !verify(
                secret,
                b"morphbench rank v1",
                &ours,
                &theirs,
                &answer[NONCE..],
            ) {
                return Err(AuthError::BadProof);
            }
            put(
                stream,
                &secret.mac(b"morphbench root v1", &ours, &theirs),
                deadline,
            )?;
            Ok(Some(secret.mac(b"morphbench session v1", &ours, &theirs)))
        }
        Trust::Munge(job) => {
            let Some((token, secret)) = &job.secret else {
                return Err(AuthError::Munge("this rank has no secret to give".into()));
            };
            fill(stream, &mut theirs, deadline)?;
            let cred = read_credential(stream, deadline)?;
            let expected = munge_payload("rank", &job.job, &ours, &theirs);
            check_credential(&cred, job.uid, |p| p == expected)?;
            let payload = format!(
                "{}|{token}",
                munge_payload("root", &job.job, &ours, &theirs)
            );
            let mine = super::munge::encode(&payload, job.uid)
                .map_err(|e| AuthError::Munge(e.to_string()))?;
            put(stream, &credential_frame(&mine), deadline)?;
            Ok(Some(secret.mac(b"morphbench session v1", &ours, &theirs)))
        }
    }
}

/// The connecting end: answers the challenge with its proof and checks the accepting end's.
pub fn prove(
    stream: &TcpStream,
    trust: &Trust,
    deadline: Instant,
) -> Result<SessionKey, AuthError> {
    prove_learning(stream, trust, deadline).map(|(key, _)| key)
}

/// [`prove`], returning too the run's secret where this rank learns it (MUNGE).
pub fn prove_learning(
    stream: &TcpStream,
    trust: &Trust,
    deadline: Instant,
) -> Result<(SessionKey, Option<Secret>), AuthError> {
    let mut hello = [0u8; 4 + NONCE];
    fill(stream, &mut hello, deadline)?;
    let challenge: [u8; NONCE] = hello[4..].try_into().expect("nonce");
    agree(trust, hello[..4].try_into().expect("magic"))?;
    let ours = nonce();
    let answer_closed = |r: Result<(), AuthError>| match r {
        Err(AuthError::Wire(WireError::Closed)) => Err(AuthError::Rejected),
        r => r,
    };
    match trust {
        Trust::Insecure => {
            put(stream, &OPEN, deadline)?;
            Ok((None, None))
        }
        Trust::Secret(secret) => {
            let proof = secret.mac(b"morphbench rank v1", &challenge, &ours);
            put(
                stream,
                &[&SECURED[..], &ours[..], &proof[..]].concat(),
                deadline,
            )?;
            let mut answer = [0u8; TAG];
            answer_closed(fill(stream, &mut answer, deadline))?;
            if !verify(secret, b"morphbench root v1", &challenge, &ours, &answer) {
                return Err(AuthError::BadProof);
            }
            let key = secret.mac(b"morphbench session v1", &challenge, &ours);
            Ok((Some(key), None))
        }
        Trust::Munge(job) => {
            let payload = munge_payload("rank", &job.job, &challenge, &ours);
            let mine = super::munge::encode(&payload, job.uid)
                .map_err(|e| AuthError::Munge(e.to_string()))?;
            let frame = [&MUNGED[..], &ours[..], &credential_frame(&mine)].concat();
            put(stream, &frame, deadline)?;
            let cred = match read_credential(stream, deadline) {
                Err(AuthError::Wire(WireError::Closed)) => return Err(AuthError::Rejected),
                r => r?,
            };
            let prefix = format!("{}|", munge_payload("root", &job.job, &challenge, &ours));
            let mut token = String::new();
            check_credential(&cred, job.uid, |p| match p.strip_prefix(&prefix) {
                Some(t) => {
                    token = t.to_string();
                    true
                }
                None => false,
            })?;
            let secret = Secret::from_token(&token).map_err(|e| AuthError::Munge(e.to_string()))?;
            let key = secret.mac(b"morphbench session v1", &challenge, &ours);
            Ok((Some(key), Some(secret)))
        }
    }
}

/// What a MUNGE credential of `role` carries: the job and both nonces.
fn munge_payload(
    role: &str,
    job: &str,
    accepting: &[u8; NONCE],
    connecting: &[u8; NONCE],
) -> String {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!(
        "morphbench v1|{role}|job {job}|{}|{}",
        hex(accepting),
        hex(connecting)
    )
}

fn credential_frame(cred: &str) -> Vec<u8> {
    let mut f = (cred.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(cred.as_bytes());
    f
}

/// A length-prefixed credential, bounded before it is read.
fn read_credential(stream: &TcpStream, deadline: Instant) -> Result<String, AuthError> {
    let mut len = [0u8; 4];
    fill(stream, &mut len, deadline)?;
    let len = u32::from_be_bytes(len) as usize;
    if len == 0 || len > super::munge::MAX_CREDENTIAL {
        return Err(AuthError::Munge(format!(
            "a credential of {len} bytes (at most {})",
            super::munge::MAX_CREDENTIAL
        )));
    }
    let mut cred = vec![0u8; len];
    fill(stream, &mut cred, deadline)?;
    String::from_utf8(cred).map_err(|_| AuthError::NotOurs)
}

/// Decodes a credential and checks that it is the job's user's and its payload is `wanted`.
fn check_credential(
    cred: &str,
    uid: u32,
    wanted: impl FnOnce(&str) -> bool,
) -> Result<(), AuthError> {
    let (their_uid, payload) =
        super::munge::decode(cred).map_err(|e| AuthError::Munge(e.to_string()))?;
    if their_uid != uid {
        return Err(AuthError::Munge(format!(
            "it is user {their_uid}'s, not the job's user {uid}'s"
        )));
    }
    if !wanted(&payload) {
        return Err(AuthError::Munge(
            "it is for another job or another connection".into(),
        ));
    }
    Ok(())
}

/// A message's tag: HMAC(key, direction | sequence number | SHA-256 of the body). The body's
/// digest is taken once for a message sent to many ranks (a roster of 4,096 is about 1 MB).
pub fn tag(key: &[u8; TAG], direction: u8, seq: u64, digest: &[u8; 32]) -> [u8; TAG] {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    m.update(&[direction]);
    m.update(&seq.to_be_bytes());
    m.update(digest);
    m.finalize().into_bytes().into()
}

/// Whether `got` is the tag of that message (in constant time).
pub fn tag_ok(key: &[u8; TAG], direction: u8, seq: u64, digest: &[u8; 32], got: &[u8]) -> bool {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    m.update(&[direction]);
    m.update(&seq.to_be_bytes());
    m.update(digest);
    m.verify_slice(got).is_ok()
}

pub fn digest(body: &[u8]) -> [u8; 32] {
    Sha256::digest(body).into()
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;

//! Tests of `auth.rs`: the handshake between two ends, and where a token comes from.

use super::*;
use std::net::TcpListener;
use std::time::Duration;

fn secret(t: &str) -> Trust {
    Trust::Secret(Arc::new(Secret::from_token(t).unwrap()))
}

/// The two ends' outcomes of one handshake.
fn handshake(
    server: Trust,
    client: Trust,
) -> (Result<SessionKey, AuthError>, Result<SessionKey, AuthError>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let c = std::thread::spawn(move || {
        let s = TcpStream::connect(addr).unwrap();
        prove(&s, &client, Instant::now() + Duration::from_secs(2))
    });
    let (s, _) = l.accept().unwrap();
    let a = accept(&s, &server, Instant::now() + Duration::from_secs(2));
    drop(s);
    (a, c.join().unwrap())
}

#[test]
fn both_ends_prove_the_secret() {
    let (a, c) = handshake(secret("0123456789abcdef-x"), secret("0123456789abcdef-x"));
    let (a, c) = (a.unwrap(), c.unwrap());
    assert!(a.is_some());
    assert_eq!(a, c, "one session key at both ends");
    let (a, c) = handshake(secret("0123456789abcdef-x"), secret("0123456789abcdef-y"));
    assert_eq!(a.unwrap_err(), AuthError::BadProof);
    assert!(c.is_err());
    let (a, c) = handshake(secret("0123456789abcdef-x"), Trust::Insecure);
    assert!(a.is_err() && c.is_err(), "{a:?} {c:?}");
    let (a, c) = handshake(Trust::Insecure, Trust::Insecure);
    assert_eq!((a.unwrap(), c.unwrap()), (None, None));
}

#[test]
fn tokens_are_sized_and_sourced() {
    assert!(Secret::from_token("short").is_err());
    let none = |_: &str| None;
    let e = resolve(&TrustSource::default(), 4, &none).unwrap_err();
    assert!(
        e.to_string().contains("--token-file")
            && e.to_string().contains(TOKEN_ENV)
            && e.to_string().contains("--insecure")
    );
    assert!(resolve(&TrustSource::default(), 1, &none).is_ok());
    let env = |k: &str| (k == TOKEN_ENV).then(|| "a-token-of-enough-length".to_string());
    assert!(matches!(
        resolve(&TrustSource::default(), 4, &env),
        Ok(Trust::Secret(_))
    ));
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("token");
    std::fs::write(&f, "a-token-of-enough-length\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
    let src = TrustSource {
        token_file: Some(f.clone()),
        insecure: false,
    };
    let err = crate::testing::err_text(resolve(&src, 4, &none));
    assert!(err.contains("writable by every user"));
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o400)).unwrap();
    assert!(matches!(resolve(&src, 4, &none), Ok(Trust::Secret(_))));
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&f, &link).unwrap();
    let src = TrustSource {
        token_file: Some(link),
        insecure: false,
    };
    assert!(
        resolve(&src, 4, &none).is_err(),
        "a symlinked token is refused"
    );
}

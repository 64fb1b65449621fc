//! A result carried as data: what a probe read or a rank did, or why not, in words. It
//! crosses processes (a rank's reply) and lands in JSON (`info --json`), where an error type
//! cannot go; it serializes as Rust's `Result` does (`{"Ok": ...}` or `{"Err": "why"}`).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reported<T> {
    Ok(T),
    /// Why not, as the error said it (its chain of causes included).
    Err(String),
}

impl<T> Reported<T> {
    pub fn failed(why: impl Into<String>) -> Self {
        Reported::Err(why.into())
    }

    pub fn as_result(&self) -> Result<&T, &str> {
        match self {
            Reported::Ok(v) => Ok(v),
            Reported::Err(why) => Err(why),
        }
    }
}

impl<T> From<anyhow::Result<T>> for Reported<T> {
    fn from(r: anyhow::Result<T>) -> Self {
        match r {
            Ok(v) => Reported::Ok(v),
            Err(e) => Reported::Err(format!("{e:#}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_reads_back_as_a_result_does() {
        let ok: Reported<u32> = Ok(3).into();
        let err: Reported<u32> = Err(anyhow::anyhow!("inner")).into();
        let text = serde_json::to_string(&(ok.clone(), err.clone())).unwrap();
        assert_eq!(text, r#"[{"Ok":3},{"Err":"inner"}]"#);
        let back: (Reported<u32>, Reported<u32>) = serde_json::from_str(&text).unwrap();
        assert_eq!(back, (ok.clone(), err.clone()));
        assert_eq!(err.as_result(), Err("inner"));
        assert_eq!(ok.as_result(), Ok(&3));
    }
}

//! Helpers the unit tests share.

/// A test's expected error, as its message: panics where the result is `Ok`.
#[track_caller]
pub(crate) fn err_text<T: std::fmt::Debug, E: std::fmt::Display>(r: Result<T, E>) -> String {
    r.unwrap_err().to_string()
}

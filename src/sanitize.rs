//! Strings that came from another process (a peer's hostname, adapter or device name, an
//! error it reported) are checked or neutralised here before they name a node, reach a CSV
//! cell, a report, a terminal or a command's arguments. One place, so every writer applies
//! the same rule. See docs/security.md.

use std::borrow::Cow;

/// The longest host name RFC 1123 allows (and the longest this tool believes).
pub const MAX_HOSTNAME: usize = 253;

/// Whether `name` is a valid host name (RFC 1123): dot-separated labels of 1 to 63 letters,
/// digits and hyphens, neither starting nor ending with a hyphen, 253 bytes at most. This
/// rejects hostlist brackets, commas, spaces, shell and spreadsheet-formula characters and
/// control codes, so a name that passes is safe as a node name in `scontrol`, a drain list, a
/// CSV cell or a report.
pub fn valid_hostname(name: &str) -> bool {
    if name.is_empty() || name.len() > MAX_HOSTNAME {
        return false;
    }
    name.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    })
}

/// The most characters of one peer string other than a host name (an adapter's name, a
/// reason, an error, a note) that the console shows through [`console`].
pub const CONSOLE_TEXT: usize = 1000;

/// `s` with control characters (terminal escapes, carriage returns, bells) shown as `\u{..}`
/// escapes and cut to `max` characters: for a peer's string on the console or in a log.
pub fn console(s: &str, max: usize) -> Cow<'_, str> {
    if s.chars().count() <= max && !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::new();
    for c in s.chars().take(max) {
        if c.is_control() {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    if s.chars().count() > max {
        out.push('…');
    }
    Cow::Owned(out)
}

/// A CSV cell as spreadsheets read it as text: a cell that starts with `=`, `+`, `-`, `@`, a
/// tab or a carriage return (which Excel, LibreOffice and Google Sheets take for a formula) is
/// prefixed with a single quote `'` (OWASP's advice on CSV injection). A number (`-1.5`,
/// `+3`, `-inf`: anything `f64` parses) is left as it is, so figures stay figures.
pub fn csv_cell(cell: &str) -> Cow<'_, str> {
    let risky = matches!(
        cell.as_bytes().first(),
        Some(b'=' | b'+' | b'-' | b'@' | b'\t' | b'\r')
    );
    if !risky || cell.parse::<f64>().is_ok() {
        return Cow::Borrowed(cell);
    }
    Cow::Owned(format!("'{cell}"))
}

/// `s` as inert Markdown text, for a table cell, a heading, a list item or a link's text:
/// `&`, `<` and `>` become entities (so raw HTML such as `<img src=x onerror=...>` is shown,
/// never parsed); `\`, `|`, backticks, `*`, `_`, `[`, `]` are backslash-escaped (no table
/// column, code span, emphasis or link can start inside it); line breaks and other control
/// characters become spaces, so a cell stays on its row.
pub fn markdown(s: &str) -> Cow<'_, str> {
    escape(s, |c| match c {
        '&' => Some("&amp;"),
        '<' => Some("&lt;"),
        '>' => Some("&gt;"),
        '\\' => Some("\\\\"),
        '|' => Some("\\|"),
        '`' => Some("\\`"),
        '*' => Some("\\*"),
        '_' => Some("\\_"),
        '[' => Some("\\["),
        ']' => Some("\\]"),
        c if c.is_control() => Some(" "),
        _ => None,
    })
}

/// `s` as HTML text or a quoted attribute's value: `&`, `<`, `>`, `"` and `'` become entities.
pub fn html(s: &str) -> Cow<'_, str> {
    escape(s, |c| match c {
        '&' => Some("&amp;"),
        '<' => Some("&lt;"),
        '>' => Some("&gt;"),
        '"' => Some("&quot;"),
        '\'' => Some("&#39;"),
        _ => None,
    })
}

/// `s` with each character `with` names replaced; borrowed when none is.
fn escape(s: &str, with: impl Fn(char) -> Option<&'static str>) -> Cow<'_, str> {
    if !s.chars().any(|c| with(c).is_some()) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match with(c) {
            Some(e) => out.push_str(e),
            None => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names() {
        for ok in ["node00", "gpu-01.cluster.example", "a", "x1", "10-0-0-1"] {
            assert!(valid_hostname(ok), "{ok}");
        }
        for bad in [
            "",
            "gpu[001-512]",
            "a,b",
            "=cmd|' /C calc'!A0",
            "<img src=x>",
            "node\u{1b}[31m",
            "-node",
            "node-",
            "a..b",
            "a b",
            "$(reboot)",
            &"a".repeat(64),
            &["a"; 200].join("."),
        ] {
            assert!(!valid_hostname(bad), "{bad}");
        }
    }

    #[test]
    fn console_strips_control_codes() {
        assert_eq!(console("plain", 80), "plain");
        assert_eq!(console("a\u{1b}[2Jb", 80), "a\\u{1b}[2Jb");
        assert_eq!(console("abcdef", 3), "abc…");
    }

    #[test]
    fn csv_cells_that_start_a_formula_are_text() {
        for (cell, want) in [
            ("=cmd|' /C calc'!A0", "'=cmd|' /C calc'!A0"),
            ("+cmd", "'+cmd"),
            ("-cmd", "'-cmd"),
            ("@SUM(A1)", "'@SUM(A1)"),
            ("\tx", "'\tx"),
            ("\rx", "'\rx"),
            ("-", "'-"),
            ("=1+2", "'=1+2"),
        ] {
            assert_eq!(csv_cell(cell), want, "{cell:?}");
        }
        // Numbers and ordinary strings are written as they are.
        for same in [
            "", "-1.5", "+3", "-7", "-1e-5", "-inf", "0", "12", "node00", "a=b", "gpu",
        ] {
            assert!(matches!(csv_cell(same), Cow::Borrowed(_)), "{same:?}");
        }
    }

    #[test]
    fn markdown_is_inert() {
        assert_eq!(
            markdown("node00 / llvmpipe 64 KiB"),
            "node00 / llvmpipe 64 KiB"
        );
        let img = markdown("<img src=x onerror=alert(1)>");
        assert_eq!(img, "&lt;img src=x onerror=alert(1)&gt;");
        assert_eq!(
            markdown("a|b`c*d_e[f](g)\\h&i"),
            "a\\|b\\`c\\*d\\_e\\[f\\](g)\\\\h&amp;i"
        );
        assert_eq!(markdown("one\ntwo\r\u{1b}[31m"), "one two  \\[31m");
        // Escaped, a cell splits no row: only the escaped bar remains.
        let cell = markdown("| x |\n|---|");
        assert!(
            !cell.contains('\n') && !cell.replace("\\|", "").contains('|'),
            "{cell}"
        );
    }

    #[test]
    fn html_is_inert() {
        assert_eq!(html("plain text 1.5 GB/s"), "plain text 1.5 GB/s");
        assert_eq!(
            html(r#"<img src=x onerror="alert('1')">&"#),
            "&lt;img src=x onerror=&quot;alert(&#39;1&#39;)&quot;&gt;&amp;"
        );
    }
}

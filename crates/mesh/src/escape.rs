//! Escaping text for HTML and SVG (XML) pages.

/// Escapes text for HTML and XML: `&`, `<`, `>` and `"`.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

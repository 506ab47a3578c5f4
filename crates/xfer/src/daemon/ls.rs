//! `ls`: the scans on disks under the roots whose names match a pattern, as a pull in the gather layout
//! would fetch them now (`xfer ls`, and the discovery of `xfer collect`). The disk patterns are confined
//! like a pull's: each is `ROOT/relative/dir` (globs allowed below the root), and every disk directory and
//! every file a scan would be read from must lie inside a root after symbolic links are resolved.

use std::path::PathBuf;

use super::shared::Conn;
use crate::dest::{Roots, Use};
use crate::scan::{scan_source, scan_source_growing, Layout};
use crate::session::{FileSpec, ScanEntry, Session};

/// Answers an `ls` request on `c`.
pub(super) fn ls_session(c: &Conn<'_>, disks: &[String], pattern: Option<&str>) {
    match list(&c.sh.cfg.roots, disks, pattern, c.scope) {
        Ok(scans) => {
            log!(
                c.sh,
                "{}: listed {} scans on {}",
                c.peer,
                scans.len(),
                disks.join(" ")
            );
            c.link.send_session(&Session::Scans { scans });
        }
        Err(e) => c.refuse(e),
    }
}

/// The scans matching `pattern` on `disks` (`ROOT/relative/dir` patterns), sorted by name. Listing is
/// reading: every root named must be readable and, when the client's key has a `scope`, one of its roots;
/// a scan file must lie inside such a root.
pub(crate) fn list(
    roots: &Roots,
    disks: &[String],
    pattern: Option<&str>,
    scope: Option<&[String]>,
) -> Result<Vec<ScanEntry>, String> {
    if disks.is_empty() {
        return Err("ls needs the disks (ROOT/relative/dir, globs allowed)".into());
    }
    if let Some(p) = pattern {
        if p.is_empty() || p.contains(['/', '\\', '\0']) {
            return Err(format!("scan pattern {p:?}: one name pattern, no path"));
        }
    }
    let mut patterns = Vec::new();
    for d in disks {
        let (root, comps) = roots.resolve_for(d, Use::Read, scope)?;
        let mut p = root.path.clone();
        for c in &comps {
            p.push(c);
        }
        patterns.push(p.to_string_lossy().into_owned());
    }
    let found = vlbiflow_scan::expand_disks(&patterns).map_err(|e| e.to_string())?;
    let mut dirs: Vec<PathBuf> = Vec::new();
    for d in found {
        let canon = d.canonicalize().map_err(|e| format!("{}: {e}", d.display()))?;
        if !readable(roots, scope, &canon) {
            return Err(format!(
                "{} leads outside the roots (through a symbolic link)",
                d.display()
            ));
        }
        dirs.push(d);
    }
    let disk_strings: Vec<String> = dirs.iter().map(|d| d.to_string_lossy().into_owned()).collect();
    let mut out = Vec::new();
    for s in vlbiflow_reader::ls::list_scans(&dirs) {
        // a Mark6 scan of another recorder is listed by its file name; a pull names it by the stem
        let name = match s.layout {
            "mark6" if s.complete.is_none() => s
                .name
                .strip_suffix(".vdif")
                .or_else(|| s.name.strip_suffix(".m5b"))
                .unwrap_or(&s.name),
            _ => &s.name,
        };
        if pattern.is_some_and(|p| !wildcard_match(p, name)) {
            continue;
        }
        out.push(entry(roots, scope, name, &disk_strings, s.complete));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Whether `canon` (a resolved path) lies inside a root this client may read.
fn readable(roots: &Roots, scope: Option<&[String]>, canon: &std::path::Path) -> bool {
    roots
        .0
        .iter()
        .filter(|r| Roots::permit(r, Use::Read, scope).is_ok())
        .any(|r| canon.starts_with(&r.path))
}

/// One scan as a gather pull would fetch it now: strictly when complete (or of another recorder), the
/// complete-block prefix while it is recorded.
fn entry(
    roots: &Roots,
    scope: Option<&[String]>,
    name: &str,
    disks: &[String],
    complete: Option<bool>,
) -> ScanEntry {
    let laid_out = if complete == Some(false) {
        scan_source_growing(name, disks)
    } else {
        scan_source(name, disks, Layout::Gather)
    };
    let confined = laid_out.map_err(|e| e.to_string()).and_then(|(set, info)| {
        for p in &set.paths {
            let canon = p.canonicalize().map_err(|e| format!("{}: {e}", p.display()))?;
            if !readable(roots, scope, &canon) {
                return Err(format!(
                    "{} leads outside the roots (through a symbolic link)",
                    p.display()
                ));
            }
        }
        Ok((set, info))
    });
    match confined {
        Ok((set, info)) => ScanEntry {
            name: name.to_string(),
            bytes: set.total_bytes(),
            complete: info.complete,
            streams: set
                .files
                .iter()
                .map(|f| FileSpec {
                    name: f.name.clone(),
                    size: f.size,
                })
                .collect(),
            error: None,
        },
        Err(e) => ScanEntry {
            name: name.to_string(),
            bytes: 0,
            complete,
            streams: Vec::new(),
            error: Some(e),
        },
    }
}

/// Whether `name` matches `pattern`, where `*` stands for any run of characters and `?` for one.
pub fn wildcard_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::wildcard_match;

    #[test]
    fn wildcards() {
        assert!(wildcard_match("*", ""));
        assert!(wildcard_match("exp1_*", "exp1_st_no0001"));
        assert!(!wildcard_match("exp1_*", "exp2_st_no0001"));
        assert!(wildcard_match("exp1_??_no*1", "exp1_st_no0001"));
        assert!(wildcard_match("*no000?", "exp1_st_no0003"));
        assert!(!wildcard_match("*no000?", "exp1_st_no00031"));
        assert!(wildcard_match("a*b*c", "aXbYbZc"));
        assert!(!wildcard_match("a*b*c", "aXbYbZ"));
    }
}

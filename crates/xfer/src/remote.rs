//! Where a daemon and its paths are named on a command line (`DAEMON[:PORT]/ROOT/PATH`), and where a
//! client keeps its state (key, archive): shared by the CLI and anything else that drives the client.

use std::path::PathBuf;

use crate::session::ScanRequest;

/// Default control port.
pub const DEFAULT_PORT: u16 = 46230;

/// The client's state directory: `$XDG_STATE_HOME/vlbiflow/xfer` or `~/.local/state/vlbiflow/xfer`.
pub fn state_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME") {
        return PathBuf::from(x).join("vlbiflow/xfer");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"));
    home.join(".local/state/vlbiflow/xfer")
}

/// The default key file, `state_dir()/xfer.key`.
pub fn default_key_path() -> PathBuf {
    state_dir().join("xfer.key")
}

/// Splits `DAEMON[:PORT]/ROOT/PATH` (IPv6 as `[ADDR]:PORT/...`) into `HOST:PORT` and `ROOT/PATH`; the port
/// defaults to [`DEFAULT_PORT`].
pub fn split(s: &str) -> Result<(String, String), String> {
    let (host, path) = if let Some(rest) = s.strip_prefix('[') {
        let end = rest.find(']').ok_or_else(|| format!("{s:?}: missing ']'"))?;
        let after = &rest[end + 1..];
        let (port, path) = match after.strip_prefix(':') {
            Some(p) => p
                .split_once('/')
                .ok_or_else(|| format!("{s:?}: no /ROOT after the address"))?,
            None => (
                "",
                after
                    .strip_prefix('/')
                    .ok_or_else(|| format!("{s:?}: no /ROOT after the address"))?,
            ),
        };
        let port = if port.is_empty() {
            DEFAULT_PORT.to_string()
        } else {
            port.to_string()
        };
        (format!("[{}]:{port}", &rest[..end]), path.to_string())
    } else {
        let (h, path) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: give the destination as DAEMON[:PORT]/ROOT/DIR"))?;
        let h = if h.contains(':') {
            h.to_string()
        } else {
            format!("{h}:{DEFAULT_PORT}")
        };
        (h, path.to_string())
    };
    if path.is_empty() {
        return Err(format!(
            "{s:?}: no ROOT after the daemon address (DAEMON[:PORT]/ROOT/DIR)"
        ));
    }
    Ok((host, path))
}

/// The daemon and what to fetch from it: `specs` as `DAEMON/ROOT/PATH` sources, or with `scan` = (name,
/// disks, layout) a scan whose disks are `DAEMON/ROOT/DIR` (globs allowed below the root); all on one
/// daemon. Returns the daemon, the sources and the scan request.
pub fn sources(
    specs: &[String],
    scan: Option<(&str, &[String], &str)>,
) -> Result<(String, Vec<String>, Option<ScanRequest>), String> {
    let list = match scan {
        Some(_) if !specs.is_empty() => {
            return Err(format!(
                "with --scan give the scan's disks with --disk DAEMON/ROOT/DIR, not {}",
                specs.join(" ")
            ))
        }
        Some((_, [], _)) => return Err("--scan needs the scan's disks: --disk DAEMON/ROOT/DIR".into()),
        Some((_, disks, _)) => disks,
        None if specs.is_empty() => {
            return Err(
                "give the sources DAEMON[:PORT]/ROOT/PATH (or --scan NAME --disk DAEMON/ROOT/DIR)".into(),
            )
        }
        None => specs,
    };
    let mut server: Option<String> = None;
    let mut paths = Vec::new();
    for s in list {
        let (h, p) = split(s)?;
        if let Some(x) = &server {
            if *x != h {
                return Err(format!("all sources must be on one daemon ({x} and {h})"));
            }
        }
        server = Some(h);
        paths.push(p);
    }
    let server = server.expect("at least one source");
    Ok(match scan {
        Some((name, _, layout)) => (
            server,
            Vec::new(),
            Some(ScanRequest {
                name: name.to_string(),
                disks: paths,
                layout: layout.to_string(),
            }),
        ),
        None => (server, paths, None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations() {
        assert_eq!(
            split("corr/data/x").unwrap(),
            ("corr:46230".into(), "data/x".into())
        );
        assert_eq!(split("corr:99/data").unwrap(), ("corr:99".into(), "data".into()));
        assert_eq!(split("[::1]:7/d/e").unwrap(), ("[::1]:7".into(), "d/e".into()));
        assert_eq!(split("[::1]/d").unwrap(), ("[::1]:46230".into(), "d".into()));
        assert!(split("corr").is_err());
        assert!(split("corr:1/").is_err());
    }

    #[test]
    fn sources_and_scans() {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (h, p, sc) = sources(&v(&["st/data/a", "st/data/b"]), None).unwrap();
        assert_eq!((h.as_str(), p, sc), ("st:46230", v(&["data/a", "data/b"]), None));
        assert!(sources(&v(&["st/data/a", "other/data/b"]), None)
            .unwrap_err()
            .contains("one daemon"));
        let disks = v(&["st:7/data/disks/*"]);
        let (h, p, sc) = sources(&[], Some(("s1", &disks, "gather"))).unwrap();
        assert_eq!((h.as_str(), p.len()), ("st:7", 0));
        assert_eq!(sc.unwrap().disks, v(&["data/disks/*"]));
        assert!(sources(&v(&["st/data/a"]), Some(("s1", &disks, "gather"))).is_err());
        assert!(sources(&[], Some(("s1", &[], "gather"))).is_err());
        assert!(sources(&[], None).is_err());
    }
}

//! The mesh's `tracing` events in a test process, formatted as the CLI's text log and gathered from
//! every thread (the process-wide subscriber, installed once).

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// The captured log's bytes (installs the subscriber on first use).
pub fn log() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let w = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || Capture(w.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        buf
    })
}

/// What was logged so far, as text.
pub fn captured() -> String {
    String::from_utf8_lossy(&log().lock().unwrap()).into_owned()
}

struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

//! The rate-control trace (`VLBIFLOW_XFER_TRACE`).

use std::time::{Duration, Instant};

use vlbiflow_xfer_proto::timing::Bursts;
use vlbiflow_xfer_proto::Sender;

/// A trace of the rate control, one CSV line per control message from the receiver, written when
/// `VLBIFLOW_XFER_TRACE` names a file (for tuning and for reports of a misbehaving path).
pub(super) struct RateTrace {
    out: std::io::BufWriter<std::fs::File>,
    t0: Instant,
}

impl RateTrace {
    pub(super) fn from_env() -> Option<RateTrace> {
        let path = std::env::var_os("VLBIFLOW_XFER_TRACE").filter(|p| !p.is_empty())?;
        let file = match std::fs::File::create(&path) {
            Ok(f) => f,
            Err(e) => {
                eprintln!(
                    "xfer: VLBIFLOW_XFER_TRACE: cannot create {}: {e}",
                    path.to_string_lossy()
                );
                return None;
            }
        };
        let mut out = std::io::BufWriter::new(file);
        use std::io::Write;
        let _ = writeln!(
            out,
            "t_s,phase,cycle,pacing_mbps,btl_bw_mbps,cap_mbps,sample_mbps,cwnd_mb,min_rtt_ms,queue_ms,random_loss,datagrams,retransmits,reported_lost,inflight_mb,late_ms,window_ms,read_wait_ms,bursts,loss_comp"
        );
        Some(RateTrace {
            out,
            t0: Instant::now(),
        })
    }

    pub(super) fn line(&mut self, s: &Sender, read_wait: Duration, bursts: Bursts) {
        use std::io::Write;
        let r = s.rate().state();
        let st = s.stats();
        let mb = |x: f64| x * 8.0 / 1e6;
        let _ = writeln!(
            self.out,
            "{:.4},{},{},{:.1},{:.1},{},{:.1},{},{},{:.2},{:.5},{},{},{},{:.2},{:.1},{:.1},{:.1},{},{:.5}",
            self.t0.elapsed().as_secs_f64(),
            r.phase,
            r.cycle,
            mb(r.pacing),
            mb(r.btl_bw),
            r.cap.map_or(String::new(), |c| format!("{:.1}", mb(c))),
            mb(r.sample),
            r.cwnd.map_or(String::new(), |c| format!("{:.2}", c as f64 / 1e6)),
            r.min_rtt
                .map_or(String::new(), |d| format!("{:.2}", d.as_secs_f64() * 1e3)),
            r.queue.as_secs_f64() * 1e3,
            r.random_loss,
            st.datagrams,
            st.retransmits,
            st.reported_lost,
            s.inflight_bytes() as f64 / 1e6,
            st.late_us as f64 / 1e3,
            st.window_us as f64 / 1e3,
            read_wait.as_secs_f64() * 1e3,
            bursts.name(),
            r.loss_comp,
        );
    }
}

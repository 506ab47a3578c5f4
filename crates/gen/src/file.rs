//! Frames to a file instead of the network: the same headers and payloads, no PSN, written as fast as the
//! file takes them (time stamps still follow the frame rate, so `--duration 10` means ten stamped seconds).

use crate::payload::PayloadPool;
use crate::plan::GenPlan;
use crate::sequencer::FrameSequencer;
use crate::GenSummary;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use vlbiflow_formats::time::VdifTime;

/// Writes the planned frames to `out`; stops early (cleanly, whole frames) when `stop` is set.
/// `progress` is called about once a second with the summary so far.
pub fn write_frames(
    plan: &GenPlan,
    start: VdifTime,
    out: &mut dyn Write,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&GenSummary),
) -> io::Result<GenSummary> {
    let pool = PayloadPool::new(plan);
    let mut seq = FrameSequencer::new(plan, start, 0);
    let mut header = [0u8; 32];
    let began = Instant::now();
    let mut summary = GenSummary::new(plan, 1);
    let mut next_report = 1.0;
    while let Some(slot) = seq.next_header(&mut header) {
        if slot.dropped {
            summary.dropped += 1;
            continue;
        }
        out.write_all(&header)?;
        out.write_all(pool.payload(slot.thread_index, slot.round))?;
        summary.frames += 1;
        if summary.frames % 1024 == 0 {
            let elapsed = began.elapsed().as_secs_f64();
            if elapsed >= next_report {
                summary.finish(plan, elapsed);
                progress(&summary);
                next_report = elapsed.floor() + 1.0;
            }
            if stop.load(Ordering::Relaxed) {
                summary.interrupted = true;
                break;
            }
        }
    }
    out.flush()?;
    summary.finish(plan, began.elapsed().as_secs_f64());
    Ok(summary)
}

//! The kinds of frame a stream or recording carries: the workspace's one enum for it.

use core::fmt;
use core::str::FromStr;

/// Frame format of a stream or a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum FrameKind {
    /// VDIF frames (any EDV, legacy or not).
    Vdif,
    /// Mark5B frames (16-byte header + 10000-byte payload).
    #[cfg_attr(feature = "serde", serde(alias = "mark5b"))]
    M5b,
}

impl FrameKind {
    /// The name used in Mark6 commands, file extensions, JSON and the CLI: `vdif` or `m5b`.
    pub fn name(self) -> &'static str {
        match self {
            FrameKind::Vdif => "vdif",
            FrameKind::M5b => "m5b",
        }
    }

    /// File extension of a Mark6 scatter-gather file (d-plane) or a plain file of this kind.
    pub fn extension(self) -> &'static str {
        self.name()
    }

    /// The Mark6 file header's packet format.
    pub fn packet_format(self) -> crate::mark6::PacketFormat {
        match self {
            FrameKind::Vdif => crate::mark6::PacketFormat::Vdif,
            FrameKind::M5b => crate::mark6::PacketFormat::Mark5b,
        }
    }

    /// The frame length when the format fixes it (Mark5B), else `None`.
    pub fn fixed_frame_len(self) -> Option<usize> {
        match self {
            FrameKind::Vdif => None,
            FrameKind::M5b => Some(crate::mark5b::FRAME_LEN),
        }
    }
}

impl fmt::Display for FrameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A frame kind name that is neither `vdif` nor `m5b`/`mark5b`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown frame format {0:?}: expected vdif or m5b (mark5b)")]
pub struct UnknownFrameKind(pub String);

impl FromStr for FrameKind {
    type Err = UnknownFrameKind;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "vdif" => Ok(FrameKind::Vdif),
            "m5b" | "mark5b" => Ok(FrameKind::M5b),
            _ => Err(UnknownFrameKind(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in [FrameKind::Vdif, FrameKind::M5b] {
            assert_eq!(k.name().parse::<FrameKind>(), Ok(k));
        }
        assert_eq!("Mark5B".parse::<FrameKind>(), Ok(FrameKind::M5b));
        assert!("vdf"
            .parse::<FrameKind>()
            .unwrap_err()
            .to_string()
            .contains("vdf"));
    }
}

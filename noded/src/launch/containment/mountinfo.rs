//! Reading `/proc/self/mountinfo`: where the cgroup hierarchies are mounted.

use std::path::PathBuf;

/// A line of `/proc/self/mountinfo`, the fields used here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Mount {
    /// The directory of the file system mounted here (`/` unless a subtree is bind-mounted).
    pub root: String,
    pub point: PathBuf,
    pub read_only: bool,
    pub fstype: String,
    pub super_options: Vec<String>,
}

/// One `/proc/self/mountinfo` line: `id parent major:minor root point options [optional...] -
/// fstype source super-options`.
pub(super) fn parse_mount(line: &str) -> Option<Mount> {
    let (before, after) = line.split_once(" - ")?;
    let fields: Vec<&str> = before.split(' ').collect();
    let mut after = after.split(' ');
    let fstype = after.next()?.to_string();
    let _source = after.next()?;
    let super_options = after
        .next()
        .unwrap_or("")
        .split(',')
        .map(str::to_string)
        .collect();
    Some(Mount {
        root: unescape(fields.get(3)?),
        point: PathBuf::from(unescape(fields.get(4)?)),
        read_only: fields.get(5)?.split(',').any(|o| o == "ro"),
        fstype,
        super_options,
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
pub(super) fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)))
            .map(|d| d.iter().fold(0u32, |n, b| n * 8 + u32::from(b - b'0')));
        match octal.and_then(|n| u8::try_from(n).ok()) {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

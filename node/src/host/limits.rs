//! The process's open-file limit (`RLIMIT_NOFILE`): a host that accepts `stream.max_connections`
//! client sessions needs a file descriptor for each, and many systems start processes with a
//! soft limit of 1,024. The host raises its soft limit towards what its configuration needs (at
//! most to the hard limit, which only a privileged process can raise); a load tool that opens
//! thousands of connections does the same and refuses to start when the hard limit is too low.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// File descriptors a host keeps besides its client sessions (listeners, mesh sockets, the
/// Location Store connections, logs), with room to spare.
pub const HOST_RESERVED_FILES: u64 = 1_024;

/// The open-file limit before and after [`raise_open_files`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles {
    /// The soft limit before (`None`: unlimited).
    pub before: Option<u64>,
    /// The soft limit now.
    pub now: Option<u64>,
    /// The hard limit (`None`: unlimited).
    pub hard: Option<u64>,
}

impl OpenFiles {
    /// Whether the soft limit now allows `want` open files.
    #[must_use]
    pub fn allows(&self, want: u64) -> bool {
        self.now.is_none_or(|n| n >= want)
    }
}

/// Raise the soft `RLIMIT_NOFILE` to `want` (never lower it; at most to the hard limit).
/// Returns the limits as they are afterwards: check [`OpenFiles::allows`] — a hard limit below
/// `want` leaves the soft limit at the hard limit.
///
/// # Errors
/// The `setrlimit` error when the kernel refuses the change.
pub fn raise_open_files(want: u64) -> std::io::Result<OpenFiles> {
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    let target = match (current, maximum) {
        // Unlimited, or enough already.
        (None, _) => None,
        (Some(c), _) if c >= want => None,
        (Some(_), Some(hard)) => Some(want.min(hard)),
        (Some(_), None) => Some(want),
    };
    if let Some(t) = target.filter(|t| Some(*t) != current) {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(t),
                maximum,
            },
        )?;
    }
    let after = getrlimit(Resource::Nofile);
    Ok(OpenFiles {
        before: current,
        now: after.current,
        hard: after.maximum,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn raising_never_lowers_and_stops_at_the_hard_limit() {
        let start = raise_open_files(0).unwrap();
        assert_eq!(start.before, start.now, "asking for 0 changes nothing");
        // Ask for more than the hard limit allows: the soft limit ends at the hard limit.
        let hard = start.hard.unwrap_or(u64::MAX);
        let wanted = hard.saturating_add(1);
        let after = raise_open_files(wanted).unwrap();
        if let Some(h) = after.hard {
            assert_eq!(after.now, Some(h));
            assert!(!after.allows(wanted));
        }
        assert!(after.allows(start.now.unwrap_or(0)));
        // Asking for less than is set keeps it.
        let again = raise_open_files(1).unwrap();
        assert_eq!(again.now, after.now);
    }
}

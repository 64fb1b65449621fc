//! What the terminal shows: a progress bar on stderr and result lines on stdout.

mod progress;

pub use progress::Progress;

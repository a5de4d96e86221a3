//! The metrics scrape: the job counts are kept event by event (`metrics::ActiveJobs`); the
//! nodes and sessions are counted under the lock (one pass over the nodes), then everything
//! is set and encoded without it.

use super::{lock, Cluster};
use crate::metrics::Format;

impl Cluster {
    /// Every metric, encoded in `format` (see `metrics`). Takes the state lock for one pass
    /// over the nodes.
    pub fn metrics_text(&self, format: Format) -> String {
        let census = {
            let st = lock(&self.state);
            self.metrics
                .census(st.rec.nodes(), st.sessions.live_logins())
        };
        self.metrics.render(&census, format)
    }
}

//! The GPU health loop: a thread that polls the health monitor and reports changes.
//!
//! The thread owns the health monitor ([`GpuHealth`]: NVML, or a fake inventory file's faults),
//! polls it every `node.gpu_health_secs`, and tells the session each change of the set of
//! failing GPUs, which goes to schedd at once in an extra heartbeat (every heartbeat carries
//! the whole set). schedd takes a failing GPU out of service and stops the job on it.
//!
//! When schedd says that an administrator returned a GPU to service (`ResumeGpu`), the thread
//! makes the monitor forget that GPU's past faults, polls at once, and its next news names the
//! GPU as forgotten: schedd ignores faults of a returned GPU until a report taken after the
//! forget says whether it still fails.
//!
//! The monitor is never called on the async runtime: NVML calls block, sometimes for long, and
//! a hung GPU must not hold up the session (heartbeats renew the fence lease).

use crate::gpu::{GpuFault, GpuHealth};
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use ysched_proto as pb;

/// What the health thread tells the session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuNews {
    /// The GPUs failing now, by index (at most one fault each).
    pub faults: Vec<GpuFault>,
    /// GPUs whose past faults were forgotten before `faults` was taken.
    pub forgotten: Vec<u32>,
}

/// The session's side of the health thread: what the last poll found, the forgets not yet
/// reported to schedd, and the channels.
pub struct GpuWatch {
    forget_tx: std_mpsc::Sender<u32>,
    news: mpsc::UnboundedReceiver<GpuNews>,
    /// The failing GPUs as last polled.
    faults: Vec<GpuFault>,
    /// Forgets done since the last heartbeat that said so.
    forgotten: Vec<u32>,
}

impl GpuWatch {
    /// Starts the health thread on `monitor`, polling every `every` (none: never, only
    /// answering forgets: GPU health is not watched, `node.gpu_health_secs = 0`).
    pub fn start(monitor: Option<Box<dyn GpuHealth>>, every: Option<Duration>) -> GpuWatch {
        let (forget_tx, forget_rx) = std_mpsc::channel();
        let (news_tx, news) = mpsc::unbounded_channel();
        let spawned = std::thread::Builder::new()
            .name("gpu-health".into())
            .spawn(move || health_loop(monitor, every, &forget_rx, &news_tx));
        if let Err(e) = spawned {
            // Then forgets are answered by nobody: schedd asks again at the next registration.
            tracing::error!("cannot start the GPU health thread: {e}; GPU health not watched");
        }
        GpuWatch {
            forget_tx,
            news,
            faults: Vec::new(),
            forgotten: Vec::new(),
        }
    }

    /// schedd says an administrator returned GPU `index` to service: the thread forgets its
    /// faults, polls, and reports it as forgotten.
    pub fn forget(&self, index: u32) {
        let _ = self.forget_tx.send(index);
    }

    /// The next news from the thread; never if the thread is gone.
    pub async fn next(&mut self) -> GpuNews {
        match self.news.recv().await {
            Some(news) => news,
            None => std::future::pending().await,
        }
    }

    /// Takes news into what the next heartbeats say; whether it is worth a heartbeat at once
    /// (a change of the set, or a forget to confirm).
    pub fn take(&mut self, news: GpuNews) -> bool {
        let changed = news.faults != self.faults || !news.forgotten.is_empty();
        if news.faults != self.faults {
            for fault in news.faults.iter().filter(|f| !self.faults.contains(f)) {
                tracing::warn!(
                    "GPU {} fails: {}; telling schedd",
                    fault.index,
                    fault.reason
                );
            }
        }
        self.faults = news.faults;
        for index in news.forgotten {
            if !self.forgotten.contains(&index) {
                self.forgotten.push(index);
            }
        }
        changed
    }

    /// Takes the news that came while no session read it (between sessions): the
    /// registration carries the latest set.
    pub fn catch_up(&mut self) {
        while let Ok(news) = self.news.try_recv() {
            self.take(news);
        }
    }

    /// The failing GPUs as a heartbeat or a registration carries them.
    pub fn faults(&self) -> Vec<pb::GpuFault> {
        self.faults
            .iter()
            .map(|f| pb::GpuFault {
                index: f.index,
                reason: f.reason.clone(),
            })
            .collect()
    }

    /// The forgets to confirm in the heartbeat being sent (each said once).
    pub fn take_forgotten(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.forgotten)
    }
}

/// The thread: polls at start and every `every`, and at once after each forget; sends news
/// when the set changes and after each forget. Ends when the session's side is gone.
fn health_loop(
    mut monitor: Option<Box<dyn GpuHealth>>,
    every: Option<Duration>,
    forgets: &std_mpsc::Receiver<u32>,
    news: &mpsc::UnboundedSender<GpuNews>,
) {
    let poll = |monitor: &mut Option<Box<dyn GpuHealth>>| -> Vec<GpuFault> {
        let Some(monitor) = monitor.as_mut() else {
            return Vec::new();
        };
        let mut faults = monitor.poll();
        faults.sort_by_key(|f| f.index);
        faults.dedup_by_key(|f| f.index);
        faults
    };
    let mut last = poll(&mut monitor);
    if !last.is_empty()
        && news
            .send(GpuNews {
                faults: last.clone(),
                forgotten: Vec::new(),
            })
            .is_err()
    {
        return;
    }
    let mut next_poll = every.map(|every| Instant::now() + every);
    loop {
        let received = match next_poll {
            Some(at) => forgets.recv_timeout(at.saturating_duration_since(Instant::now())),
            None => forgets
                .recv()
                .map_err(|_| std_mpsc::RecvTimeoutError::Disconnected),
        };
        let forgotten = match received {
            Ok(index) => {
                // Forgets that came together are answered together.
                let mut forgotten = vec![index];
                forgotten.extend(forgets.try_iter());
                forgotten.sort_unstable();
                forgotten.dedup();
                if let Some(monitor) = monitor.as_mut() {
                    for index in &forgotten {
                        monitor.forget(*index);
                    }
                }
                forgotten
            }
            Err(std_mpsc::RecvTimeoutError::Timeout) => {
                next_poll = every.map(|every| Instant::now() + every);
                Vec::new()
            }
            Err(std_mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let faults = poll(&mut monitor);
        if faults == last && forgotten.is_empty() {
            continue;
        }
        last = faults.clone();
        if news.send(GpuNews { faults, forgotten }).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A monitor whose faults the test sets; events are kept until forgotten.
    #[derive(Clone, Default)]
    struct Scripted(Arc<Mutex<(Vec<GpuFault>, Vec<u32>)>>);

    impl GpuHealth for Scripted {
        fn poll(&mut self) -> Vec<GpuFault> {
            self.0.lock().unwrap().0.clone()
        }
        fn forget(&mut self, index: u32) {
            let mut inner = self.0.lock().unwrap();
            inner.0.retain(|f| f.index != index);
            inner.1.push(index);
        }
    }

    fn fault(index: u32) -> GpuFault {
        GpuFault {
            index,
            reason: format!("XID 79 on {index}"),
        }
    }

    async fn next(watch: &mut GpuWatch) -> GpuNews {
        tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .expect("news from the health thread")
    }

    #[tokio::test]
    async fn changes_are_told_and_forgets_answered_at_once() {
        let scripted = Scripted::default();
        scripted.0.lock().unwrap().0.push(fault(3));
        let every = Duration::from_millis(20);
        let mut watch = GpuWatch::start(Some(Box::new(scripted.clone())), Some(every));
        let news = next(&mut watch).await;
        assert_eq!(news.faults, [fault(3)]);
        assert!(watch.take(news));
        assert_eq!(watch.faults()[0].index, 3);
        // No change: no news (the next one is the forget's).
        watch.forget(3);
        let news = next(&mut watch).await;
        assert_eq!(
            news,
            GpuNews {
                faults: vec![],
                forgotten: vec![3]
            }
        );
        assert_eq!(scripted.0.lock().unwrap().1, [3]);
        assert!(watch.take(news));
        assert_eq!(watch.take_forgotten(), [3]);
        assert!(watch.take_forgotten().is_empty(), "said once");
        scripted.0.lock().unwrap().0.push(fault(1));
        let news = next(&mut watch).await;
        assert_eq!(news.faults, [fault(1)]);
        assert!(news.forgotten.is_empty());
    }

    #[tokio::test]
    async fn without_a_monitor_forgets_are_still_confirmed() {
        let mut watch = GpuWatch::start(None, None);
        watch.forget(5);
        watch.forget(5);
        let news = next(&mut watch).await;
        assert!(news.faults.is_empty());
        assert_eq!(news.forgotten, [5]);
    }
}

//! The goodput progress record, written off the training thread.
//!
//! Global rank 0 writes `goodput.json` beside the checkpoints at every log
//! interval, whenever a checkpoint becomes durable and at the normal end
//! ([`crate::goodput::ProgressRecord::write_atomic`]). That directory is the
//! checkpoints' file system (NFS, Lustre), which can stall for minutes;
//! telemetry never blocks the job it observes, so the training thread only
//! builds the record (a snapshot of the totals) and hands it to a
//! [`RecordWriter`]: a mailbox that holds the latest record not yet written
//! (a newer one replaces it, only the latest matters) and a thread, started
//! at the first record, that writes what the mailbox holds, in order.
//!
//! Only the normal end waits for its record ([`RecordWriter::flush_handle`]), and
//! at most the diagnosis' flush timeout: a file system that does not answer
//! by then is warned about once, and the job ends without the record (the
//! thread is left behind, and writes it if the file system comes back
//! before the process exits). Dropping the writer waits as long at most,
//! and not at all once a wait has run out of time.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::goodput::{PROGRESS_RECORD_FILE, ProgressRecord};

/// The name of the writer thread.
pub(crate) const THREAD_NAME: &str = "lens-goodput-record";

/// Writes one directory's progress records on a thread of its own; see the
/// module documentation.
#[derive(Debug)]
pub(crate) struct RecordWriter {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// How long a [`Flush`] (and the drop) waits at most.
    flush_timeout: Duration,
    /// Whether starting the thread failed and was warned about.
    start_warned: bool,
}

#[derive(Debug)]
struct Shared {
    /// The directory the records go to.
    dir: PathBuf,
    mailbox: Mutex<Mailbox>,
    /// Wakes the thread (a record, the stop) and the waiters (a write done,
    /// the thread's end).
    wake: Condvar,
}

#[derive(Debug, Default)]
struct Mailbox {
    /// The latest record not yet taken by the thread.
    pending: Option<ProgressRecord>,
    /// Records handed in so far: the latest is number `submitted`.
    submitted: u64,
    /// The number of the latest record whose write ended (well or not).
    done: u64,
    /// The writer is dropped: the thread ends once the mailbox is empty.
    stop: bool,
    /// The thread has ended.
    exited: bool,
    /// Whether a failed write was warned about.
    write_warned: bool,
    /// Whether a wait ran out of time (the file system does not answer):
    /// said once, and no later wait happens.
    stalled: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Mailbox> {
        self.mailbox.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The thread's body: writes what the mailbox holds until the writer is
    /// dropped and the mailbox is empty.
    fn run(&self) {
        let mut mailbox = self.lock();
        loop {
            if let Some(record) = mailbox.pending.take() {
                let number = mailbox.submitted;
                drop(mailbox);
                let result = write(&self.dir, &record);
                mailbox = self.lock();
                mailbox.done = number;
                let warn_now = result.is_err() && !std::mem::replace(&mut mailbox.write_warned, true);
                self.wake.notify_all();
                if let (true, Err(error)) = (warn_now, result) {
                    // Not under the lock: a blocked stderr never holds up
                    // the training thread's hand-over.
                    drop(mailbox);
                    warn(&format!("goodput: could not write the progress record (warned once): {error}"));
                    mailbox = self.lock();
                }
            } else if mailbox.stop {
                mailbox.exited = true;
                self.wake.notify_all();
                return;
            } else {
                mailbox = self.wake.wait(mailbox).unwrap_or_else(PoisonError::into_inner);
            }
        }
    }
}

/// Creates `dir` if needed and writes `record` there atomically.
fn write(dir: &Path, record: &ProgressRecord) -> Result<(), String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))
        .and_then(|()| record.write_atomic(dir).map_err(|e| e.to_string()))
}

impl RecordWriter {
    /// A writer of the records of `dir` whose waits last `flush_timeout` at
    /// most. No thread until the first record.
    pub(crate) fn new(dir: PathBuf, flush_timeout: Duration) -> RecordWriter {
        let shared = Shared { dir, mailbox: Mutex::new(Mailbox::default()), wake: Condvar::new() };
        RecordWriter { shared: Arc::new(shared), thread: None, flush_timeout, start_warned: false }
    }

    /// Hands `record` to the thread (replacing one it has not taken yet)
    /// and returns at once: the file system is never waited on here.
    pub(crate) fn submit(&mut self, record: ProgressRecord) {
        {
            let mut mailbox = self.shared.lock();
            mailbox.pending = Some(record);
            mailbox.submitted += 1;
        }
        self.shared.wake.notify_all();
        if self.thread.is_none() {
            self.start();
        }
    }

    /// Starts the thread (it writes what is pending at once). A thread that
    /// cannot be started is warned about once and tried again at the next
    /// record; the pending one stays.
    #[cold]
    fn start(&mut self) {
        let shared = Arc::clone(&self.shared);
        match std::thread::Builder::new().name(THREAD_NAME.to_string()).spawn(move || shared.run()) {
            Ok(thread) => self.thread = Some(thread),
            Err(error) if !std::mem::replace(&mut self.start_warned, true) => warn(&format!(
                "goodput: could not start the thread that writes the progress record (warned once): {error}; \
                 tried again at the next record"
            )),
            Err(_) => {}
        }
    }

    /// A wait for every record handed in so far, taken now: cheap, under the
    /// caller's lock; the wait itself happens outside it.
    pub(crate) fn flush_handle(&self) -> Flush {
        let target = self.shared.lock().submitted;
        Flush { shared: Arc::clone(&self.shared), target, timeout: self.flush_timeout }
    }
}

/// A wait for the records handed in before it was taken
/// ([`RecordWriter::flush_handle`]).
#[derive(Debug)]
pub(crate) struct Flush {
    shared: Arc<Shared>,
    target: u64,
    timeout: Duration,
}

impl Flush {
    /// Waits until the records are written, at most the flush timeout. A
    /// wait that runs out of time is warned about (once: the file system
    /// does not answer, and later waits return at once); `false` then.
    pub(crate) fn wait(&self) -> bool {
        let deadline = Instant::now() + self.timeout;
        let mut mailbox = self.shared.lock();
        while mailbox.done < self.target {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || mailbox.stalled {
                let first = !std::mem::replace(&mut mailbox.stalled, true);
                drop(mailbox);
                if first {
                    warn(&format!(
                        "goodput: the progress record {} was not written within {} ms: its file system does not \
                         answer; the job goes on without waiting for it (warned once)",
                        self.shared.dir.join(PROGRESS_RECORD_FILE).display(),
                        self.timeout.as_millis()
                    ));
                }
                return false;
            }
            mailbox = self.shared.wake.wait_timeout(mailbox, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        true
    }
}

impl Drop for RecordWriter {
    /// Writes what is pending, waiting at most the flush timeout (not at
    /// all once a wait ran out of time); a thread still writing then is
    /// left behind, never joined.
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else { return };
        let deadline = Instant::now() + self.flush_timeout;
        let mut mailbox = self.shared.lock();
        mailbox.stop = true;
        self.shared.wake.notify_all();
        while !mailbox.exited && !mailbox.stalled {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            mailbox = self.shared.wake.wait_timeout(mailbox, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        let exited = mailbox.exited;
        drop(mailbox);
        if exited {
            let _ = thread.join();
        }
    }
}

/// One line on standard error, in one write (the event API's warnings).
fn warn(message: &str) {
    use std::io::Write as _;
    let _ = std::io::stderr().lock().write_all(format!("warning: {message}\n").as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::goodput::GoodputTotals;

    fn record(iteration: u64, normal_end: bool) -> ProgressRecord {
        ProgressRecord {
            run_id: "writer-test".into(),
            iteration,
            checkpoint_iteration: None,
            totals: GoodputTotals::default(),
            written_at: None,
            normal_end,
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lens-record-writer-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn records_are_written_on_the_thread_and_a_flush_sees_the_latest() {
        let dir = temp_dir("latest");
        let mut writer = RecordWriter::new(dir.join("made"), Duration::from_secs(10));
        assert!(writer.flush_handle().wait(), "nothing handed in: nothing to wait for");
        for iteration in 1..=20 {
            writer.submit(record(iteration, iteration == 20));
        }
        assert!(writer.flush_handle().wait());
        let written = ProgressRecord::read(&dir.join("made")).unwrap().unwrap();
        assert_eq!((written.iteration, written.normal_end), (20, true), "the latest record, last");
        drop(writer);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A write that blocks (a FIFO at the temporary path: its open waits for
    /// a reader, as a stalled file system would) holds up neither a
    /// hand-over nor, beyond the flush timeout, a flush or the drop; once the
    /// file system answers, the thread writes the latest record.
    #[test]
    fn a_blocked_write_holds_up_no_hand_over_and_a_flush_only_its_timeout() {
        let dir = temp_dir("blocked");
        let temp = dir.join(format!(".{PROGRESS_RECORD_FILE}.tmp{}", std::process::id()));
        let made = std::process::Command::new("mkfifo").arg(&temp).status().expect("mkfifo");
        assert!(made.success());
        let mut writer = RecordWriter::new(dir.clone(), Duration::from_millis(100));
        let started = Instant::now();
        writer.submit(record(1, false));
        // The thread takes it and blocks in the open.
        let deadline = Instant::now() + Duration::from_secs(10);
        while writer.shared.lock().pending.is_some() {
            assert!(Instant::now() < deadline, "the thread never took the record");
            std::thread::sleep(Duration::from_millis(1));
        }
        for iteration in 2..=5 {
            writer.submit(record(iteration, iteration == 5));
        }
        assert!(started.elapsed() < Duration::from_secs(10), "hand-overs do not wait");
        assert!(!writer.flush_handle().wait(), "the write blocks: the flush runs out of time");
        assert!(writer.shared.lock().stalled, "and says so (once)");
        let again = Instant::now();
        assert!(!writer.flush_handle().wait(), "a later wait returns at once");
        assert!(again.elapsed() < Duration::from_secs(5));
        drop(writer);
        assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());

        // The file system answers: the left-behind thread writes the latest.
        let (sent, received) = std::sync::mpsc::channel();
        let reader = temp.clone();
        std::thread::spawn(move || {
            let _ = sent.send(std::fs::read_to_string(reader).map(|text| text.contains("\"iteration\": 1,")));
        });
        let first = received.recv_timeout(Duration::from_secs(10)).expect("the blocked write goes on");
        assert!(first.unwrap(), "the first record was the one taken");
        let path = dir.join(PROGRESS_RECORD_FILE);
        let deadline = Instant::now() + Duration::from_secs(10);
        let latest = loop {
            let is_file = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file());
            if let Some(record) = is_file.then(|| ProgressRecord::read(&dir).ok().flatten()).flatten()
                && record.iteration == 5
            {
                break record;
            }
            assert!(Instant::now() < deadline, "the latest record was never written");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(latest.normal_end);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

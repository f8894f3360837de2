//! Communication between ranks over TCP: rendezvous, a full mesh of
//! connections, length-prefixed frames, point-to-point messages and the
//! group collectives the training loop needs (all-reduce, all-gather,
//! barrier).
//!
//! # Rendezvous
//!
//! Rank 0 listens on `MASTER_ADDR:MASTER_PORT`. Every other rank connects to
//! it (retrying until the deadline: rank 0 may start later), binds a listener
//! of its own on the address it reached rank 0 from, and says hello (its rank,
//! the world size and its listener's address). Rank 0 checks the world sizes
//! and that no rank appears twice, then sends everyone the table of
//! addresses. Rank `r` then connects to every rank `0 < p < r` and accepts a
//! connection from every rank above it, so each pair of ranks shares one TCP
//! connection.
//!
//! # Frames and failure
//!
//! A frame is a little-endian `u32` length (of what follows), a `u32` tag and
//! the payload. One reader thread per connection turns frames into events on
//! one channel, so a send never waits for the other side to read (no
//! deadlock when two ranks send to each other at once), and a receive waits
//! on the channel with the communication timeout. A connection that ends
//! (end of file, reset: the peer died) is an event too, and the first such
//! event fails whatever this rank is waiting for, whichever peer it waits on.
//! So a dead rank makes every other rank fail within the time it takes the
//! kernel to close its sockets, and a hung rank within the timeout.
//!
//! Collectives go through the group's first rank (gather, combine in rank
//! order, send back): the combination order is fixed, so results are
//! reproducible, and the volumes here are small.

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use lens_training::phases::{Phase, Phases};

/// The largest frame accepted (a corrupt length must not allocate gigabytes).
const MAX_FRAME_BYTES: usize = 1 << 30;

/// Frame tags. The receiver checks that the tag it reads is the one it
/// expects: a mismatch is a protocol error, never silently wrong data.
pub(crate) mod tag {
    /// Rendezvous: a rank introduces itself.
    pub(crate) const HELLO: u32 = 1;
    /// Rendezvous: rank 0's address table.
    pub(crate) const TABLE: u32 = 2;
    /// Pipeline: activations to the next stage.
    pub(crate) const FORWARD: u32 = 10;
    /// Pipeline: gradients to the previous stage.
    pub(crate) const BACKWARD: u32 = 11;
    /// A collective's contribution to the group leader.
    pub(crate) const GATHER: u32 = 20;
    /// A collective's result from the group leader.
    pub(crate) const RESULT: u32 = 21;
    /// A split all-reduce's contribution, sent to every member.
    pub(crate) const REDUCE: u32 = 22;
    /// The sender has passed the final barrier and will close its
    /// connections: their end is not a failure.
    pub(crate) const GOODBYE: u32 = 30;
}

/// Why communication failed. Every variant names the rank(s) involved.
#[derive(Debug)]
pub(crate) enum CommError {
    /// Rendezvous did not complete.
    Rendezvous(String),
    /// A peer's connection ended: it died or closed early.
    PeerLost {
        /// The peer.
        peer: u32,
        /// What the reader saw.
        reason: String,
    },
    /// No message from `peer` within the timeout.
    Timeout {
        /// The peer waited on.
        peer: u32,
        /// The timeout.
        after: Duration,
    },
    /// Writing to a peer failed.
    Send {
        /// The peer.
        peer: u32,
        /// The error.
        error: io::Error,
    },
    /// A frame other than the expected one arrived (a bug, or mismatched binaries).
    Protocol(String),
}

/// The bound on a rank's wait, while a SIGTERM is being handled, for the
/// lifecycle's handler to end the process ([`wait_while_terminating`]: at
/// an iteration boundary, and once its peers vanish), unless the handler's
/// shutdown may take longer: it is bounded by the telemetry's shutdown
/// timeout (5 s by default), and a longer one is waited for, with
/// [`SIGNAL_MARGIN`] more.
const SIGNAL_WAIT: Duration = Duration::from_secs(30);
/// What a rank waits beyond the handler's shutdown timeout (its last
/// flush, the process's exit).
const SIGNAL_MARGIN: Duration = Duration::from_secs(10);

/// `peer` is gone. When a SIGTERM (or SIGINT) is being handled on this
/// rank, its peers died of the same signal (with no handler of their own,
/// at once): the rank waits, bounded, for the lifecycle's handler to end
/// its open spans (truncated) and the process with the signal, instead of
/// reporting a lost peer and ending its spans as if the step had finished.
fn peer_lost(peer: u32, reason: String) -> CommError {
    wait_while_terminating();
    CommError::PeerLost { peer, reason }
}

/// While the lifecycle's handler ends this rank for a SIGTERM (or SIGINT)
/// without `--exit-signal-handler`, waits for it to end the process,
/// bounded by [`SIGNAL_WAIT`] or the handler's shutdown timeout and
/// [`SIGNAL_MARGIN`], whichever is longer: the training loop calls this before each
/// iteration, so that no work starts that the shutdown, running on the
/// handler's thread, would miss (a slow collector holds it up to its
/// timeout). Returns at once otherwise.
pub(crate) fn wait_while_terminating() {
    if !megatron_telemetry::signals::terminating() {
        return;
    }
    let wait = SIGNAL_WAIT.max(megatron_telemetry::signals::shutdown_timeout().saturating_add(SIGNAL_MARGIN));
    let until = Instant::now() + wait;
    while megatron_telemetry::signals::terminating() && Instant::now() < until {
        thread::sleep(Duration::from_millis(50));
    }
}

impl fmt::Display for CommError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommError::Rendezvous(message) => write!(f, "rendezvous failed: {message}"),
            CommError::PeerLost { peer, reason } => {
                write!(f, "lost the connection to rank {peer} ({reason}): that rank died or stopped early")
            }
            CommError::Timeout { peer, after } => write!(
                f,
                "no message from rank {peer} within {} s (--comm-timeout): that rank hangs or is too slow",
                after.as_secs()
            ),
            CommError::Send { peer, error } => write!(f, "could not send to rank {peer}: {error}"),
            CommError::Protocol(message) => write!(f, "protocol error: {message}"),
        }
    }
}

impl std::error::Error for CommError {}

/// Where a rank finds the others.
#[derive(Clone, Debug)]
pub(crate) struct Rendezvous {
    /// `MASTER_ADDR`.
    pub(crate) master_addr: String,
    /// `MASTER_PORT`.
    pub(crate) master_port: u16,
    /// How long to wait for the other ranks to appear.
    pub(crate) deadline: Duration,
}

enum Event {
    Frame { from: u32, tag: u32, payload: Vec<u8> },
    Closed { from: u32, reason: String },
}

/// One rank's connections to all the others.
pub(crate) struct Comm {
    rank: u32,
    world: u32,
    /// Write halves, indexed by peer rank (`None` for this rank).
    peers: Vec<Option<TcpStream>>,
    inbox: Receiver<Event>,
    pending: Vec<VecDeque<(u32, Vec<u8>)>>,
    /// Peers that said goodbye (their connection's end is expected).
    departed: Vec<bool>,
    timeout: Duration,
    /// The rank's phase clock: a blocking receive is a wait (docs/ranks.md).
    phases: Phases,
    /// Frames this rank has sent (the summary's `messages_sent`).
    sent: std::sync::atomic::AtomicU64,
    /// Kept alive so that the channel never reports "disconnected" on a
    /// single-rank job.
    _sender: Sender<Event>,
}

impl Drop for Comm {
    /// Shuts every connection down, so that the peers' readers see the end
    /// of the stream even though they hold a clone of the socket.
    fn drop(&mut self) {
        for stream in self.peers.iter().flatten() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Comm").field("rank", &self.rank).field("world", &self.world).finish_non_exhaustive()
    }
}

fn write_frame(mut stream: &TcpStream, tag: u32, payload: &[u8]) -> io::Result<()> {
    let length = u32::try_from(payload.len() + 4).map_err(|_| io::Error::other("frame too large"))?;
    let mut header = [0_u8; 8];
    header[..4].copy_from_slice(&length.to_le_bytes());
    header[4..].copy_from_slice(&tag.to_le_bytes());
    stream.write_all(&header)?;
    stream.write_all(payload)?;
    Ok(())
}

fn read_frame(mut stream: &TcpStream) -> io::Result<(u32, Vec<u8>)> {
    let mut header = [0_u8; 8];
    stream.read_exact(&mut header)?;
    let length = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let tag = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if !(4..=MAX_FRAME_BYTES).contains(&length) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("bad frame length {length}")));
    }
    let mut payload = vec![0_u8; length - 4];
    stream.read_exact(&mut payload)?;
    Ok((tag, payload))
}

fn read_expected(stream: &TcpStream, expected: u32, what: &str) -> Result<Vec<u8>, CommError> {
    let (tag, payload) =
        read_frame(stream).map_err(|error| CommError::Rendezvous(format!("reading the {what}: {error}")))?;
    if tag != expected {
        return Err(CommError::Rendezvous(format!("expected the {what} (tag {expected}), got tag {tag}")));
    }
    Ok(payload)
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, CommError> {
    (host, port)
        .to_socket_addrs()
        .map_err(|error| CommError::Rendezvous(format!("MASTER_ADDR={host:?}: {error}")))?
        .next()
        .ok_or_else(|| CommError::Rendezvous(format!("MASTER_ADDR={host:?} resolves to no address")))
}

fn accept_until(listener: &TcpListener, deadline: Instant, what: &str) -> Result<TcpStream, CommError> {
    listener.set_nonblocking(true).map_err(|error| CommError::Rendezvous(error.to_string()))?;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).map_err(|error| CommError::Rendezvous(error.to_string()))?;
                // Rendezvous frames must arrive promptly; training frames
                // are read by the reader threads without a timeout.
                stream
                    .set_read_timeout(Some(
                        deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(1)),
                    ))
                    .map_err(|error| CommError::Rendezvous(error.to_string()))?;
                return Ok(stream);
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(CommError::Rendezvous(format!("timed out waiting for {what}")));
                }
                thread::sleep(Duration::from_millis(5));
            }
            Err(error) => return Err(CommError::Rendezvous(format!("accepting {what}: {error}"))),
        }
    }
}

fn connect_until(address: SocketAddr, deadline: Instant, what: &str) -> Result<TcpStream, CommError> {
    loop {
        match TcpStream::connect_timeout(&address, Duration::from_secs(1)) {
            Ok(stream) => {
                stream.set_nodelay(true).map_err(|error| CommError::Rendezvous(error.to_string()))?;
                return Ok(stream);
            }
            Err(error) => {
                if Instant::now() >= deadline {
                    return Err(CommError::Rendezvous(format!("could not connect to {what} at {address}: {error}")));
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn hello(rank: u32, world: u32, listen: &str) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(8 + listen.len());
    bytes.extend_from_slice(&rank.to_le_bytes());
    bytes.extend_from_slice(&world.to_le_bytes());
    bytes.extend_from_slice(listen.as_bytes());
    bytes
}

fn parse_hello(bytes: &[u8]) -> Result<(u32, u32, String), CommError> {
    if bytes.len() < 8 {
        return Err(CommError::Rendezvous("short hello".into()));
    }
    let rank = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let world = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    let listen = String::from_utf8(bytes[8..].to_vec()).map_err(|_| CommError::Rendezvous("bad hello".into()))?;
    Ok((rank, world, listen))
}

impl Comm {
    /// Joins the job: rendezvous and the full mesh. A single rank needs no
    /// network at all.
    pub(crate) fn connect(
        rank: u32,
        world: u32,
        rendezvous: &Rendezvous,
        timeout: Duration,
    ) -> Result<Comm, CommError> {
        let mut streams: Vec<Option<TcpStream>> = (0..world).map(|_| None).collect();
        if world > 1 {
            let deadline = Instant::now() + rendezvous.deadline;
            let master = resolve(&rendezvous.master_addr, rendezvous.master_port)?;
            if rank == 0 {
                Self::lead_rendezvous(world, master, deadline, &mut streams)?;
            } else {
                Self::join_rendezvous(rank, world, master, deadline, &mut streams)?;
            }
        }
        let (sender, inbox) = mpsc::channel();
        let mut peers = Vec::with_capacity(world as usize);
        for (peer, stream) in streams.into_iter().enumerate() {
            let peer = peer as u32;
            match stream {
                Some(stream) => {
                    let setup = |error: io::Error| CommError::Rendezvous(format!("rank {peer}: {error}"));
                    stream.set_read_timeout(None).map_err(setup)?;
                    stream.set_nodelay(true).map_err(setup)?;
                    let reader = stream.try_clone().map_err(setup)?;
                    let events = sender.clone();
                    thread::Builder::new()
                        .name(format!("comm-rank{peer}"))
                        .spawn(move || reader_loop(peer, &reader, &events))
                        .map_err(setup)?;
                    peers.push(Some(stream));
                }
                None => peers.push(None),
            }
        }
        Ok(Comm {
            rank,
            world,
            peers,
            inbox,
            pending: (0..world).map(|_| VecDeque::new()).collect(),
            departed: vec![false; world as usize],
            timeout,
            phases: Phases::disabled(),
            sent: std::sync::atomic::AtomicU64::new(0),
            _sender: sender,
        })
    }

    fn lead_rendezvous(
        world: u32,
        master: SocketAddr,
        deadline: Instant,
        streams: &mut [Option<TcpStream>],
    ) -> Result<(), CommError> {
        let listener = TcpListener::bind(master).map_err(|error| {
            CommError::Rendezvous(format!("rank 0 could not listen on MASTER_ADDR:MASTER_PORT = {master}: {error}"))
        })?;
        let mut table = vec![String::new(); world as usize];
        table[0] = master.to_string();
        for _ in 1..world {
            let stream = accept_until(&listener, deadline, "the other ranks to connect to rank 0")?;
            let (rank, their_world, listen) = parse_hello(&read_expected(&stream, tag::HELLO, "hello")?)?;
            if their_world != world {
                return Err(CommError::Rendezvous(format!(
                    "rank {rank} says WORLD_SIZE={their_world}, rank 0 says {world}"
                )));
            }
            if rank == 0 || rank >= world || streams[rank as usize].is_some() {
                return Err(CommError::Rendezvous(format!("rank {rank} joined twice or is out of range")));
            }
            table[rank as usize] = listen;
            streams[rank as usize] = Some(stream);
        }
        let encoded = table.join("\n");
        for stream in streams.iter().flatten() {
            write_frame(stream, tag::TABLE, encoded.as_bytes())
                .map_err(|error| CommError::Rendezvous(format!("sending the address table: {error}")))?;
        }
        Ok(())
    }

    fn join_rendezvous(
        rank: u32,
        world: u32,
        master: SocketAddr,
        deadline: Instant,
        streams: &mut [Option<TcpStream>],
    ) -> Result<(), CommError> {
        let to_master = connect_until(master, deadline, "rank 0 (MASTER_ADDR:MASTER_PORT)")?;
        let own_ip: IpAddr = to_master.local_addr().map_err(|error| CommError::Rendezvous(error.to_string()))?.ip();
        let listener = TcpListener::bind((own_ip, 0))
            .map_err(|error| CommError::Rendezvous(format!("rank {rank} could not listen on {own_ip}: {error}")))?;
        let listen = listener.local_addr().map_err(|error| CommError::Rendezvous(error.to_string()))?;
        to_master
            .set_read_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(1))))
            .map_err(|error| CommError::Rendezvous(error.to_string()))?;
        write_frame(&to_master, tag::HELLO, &hello(rank, world, &listen.to_string()))
            .map_err(|error| CommError::Rendezvous(format!("saying hello to rank 0: {error}")))?;
        let table = String::from_utf8(read_expected(&to_master, tag::TABLE, "address table")?)
            .map_err(|_| CommError::Rendezvous("bad address table".into()))?;
        let table: Vec<&str> = table.split('\n').collect();
        if table.len() != world as usize {
            return Err(CommError::Rendezvous(format!("address table has {} entries, expected {world}", table.len())));
        }
        streams[0] = Some(to_master);
        for peer in 1..rank {
            let address: SocketAddr = table[peer as usize]
                .parse()
                .map_err(|_| CommError::Rendezvous(format!("bad address for rank {peer}: {}", table[peer as usize])))?;
            let stream = connect_until(address, deadline, &format!("rank {peer}"))?;
            write_frame(&stream, tag::HELLO, &hello(rank, world, ""))
                .map_err(|error| CommError::Rendezvous(format!("saying hello to rank {peer}: {error}")))?;
            streams[peer as usize] = Some(stream);
        }
        for _ in rank + 1..world {
            let stream = accept_until(&listener, deadline, "the higher ranks to connect")?;
            let (peer, _, _) = parse_hello(&read_expected(&stream, tag::HELLO, "hello")?)?;
            if peer <= rank || peer >= world || streams[peer as usize].is_some() {
                return Err(CommError::Rendezvous(format!("unexpected hello from rank {peer}")));
            }
            streams[peer as usize] = Some(stream);
        }
        Ok(())
    }

    /// This rank.
    pub(crate) fn rank(&self) -> u32 {
        self.rank
    }

    /// Marks every blocking receive on `phases` (`dp_wait` unless the caller
    /// entered another wait, checkpoint or eval).
    pub(crate) fn set_phases(&mut self, phases: Phases) {
        self.phases = phases;
    }

    /// Frames sent so far, rendezvous excluded.
    pub(crate) fn messages_sent(&self) -> u64 {
        self.sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sends `payload` to `peer` (never waits for the peer to read).
    pub(crate) fn send(&self, peer: u32, tag: u32, payload: &[u8]) -> Result<(), CommError> {
        let stream = self.peers[peer as usize]
            .as_ref()
            .ok_or_else(|| CommError::Protocol(format!("rank {} sending to itself", self.rank)))?;
        self.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        write_frame(stream, tag, payload).map_err(|error| match error.kind() {
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => peer_lost(peer, error.to_string()),
            _ => CommError::Send { peer, error },
        })
    }

    /// Receives the next frame from `peer`, which must carry `tag`.
    pub(crate) fn recv(&mut self, peer: u32, tag: u32) -> Result<Vec<u8>, CommError> {
        let _wait = self.phases.enter_wait(Phase::DpWait);
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some((got, payload)) = self.pending[peer as usize].pop_front() {
                if got != tag {
                    return Err(CommError::Protocol(format!(
                        "rank {} expected tag {tag} from rank {peer}, got tag {got}",
                        self.rank
                    )));
                }
                return Ok(payload);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.inbox.recv_timeout(left) {
                Ok(Event::Frame { from, tag: tag::GOODBYE, .. }) => self.departed[from as usize] = true,
                Ok(Event::Frame { from, tag, payload }) => self.pending[from as usize].push_back((tag, payload)),
                Ok(Event::Closed { from, .. }) if self.departed[from as usize] && from != peer => {}
                Ok(Event::Closed { from, reason }) => return Err(peer_lost(from, reason)),
                Err(RecvTimeoutError::Timeout) => return Err(CommError::Timeout { peer, after: self.timeout }),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(peer_lost(peer, "all connections closed".into()));
                }
            }
        }
    }

    /// Sums `data` element-wise over `group` (sorted ranks including this
    /// one); every member ends with the same result.
    pub(crate) fn all_reduce<T: Element>(&mut self, group: &[u32], data: &mut [T]) -> Result<(), CommError> {
        if group.len() <= 1 {
            return Ok(());
        }
        let leader = group[0];
        if self.rank == leader {
            for &peer in &group[1..] {
                let bytes = self.recv(peer, tag::GATHER)?;
                let theirs = T::decode(&bytes);
                if theirs.len() != data.len() {
                    return Err(CommError::Protocol(format!(
                        "all-reduce: rank {peer} sent {} values, expected {}",
                        theirs.len(),
                        data.len()
                    )));
                }
                for (mine, theirs) in data.iter_mut().zip(theirs) {
                    *mine = mine.add(theirs);
                }
            }
            let bytes = T::encode(data);
            for &peer in &group[1..] {
                self.send(peer, tag::RESULT, &bytes)?;
            }
        } else {
            self.send(leader, tag::GATHER, &T::encode(data))?;
            let result = T::decode(&self.recv(leader, tag::RESULT)?);
            if result.len() != data.len() {
                return Err(CommError::Protocol("all-reduce result of the wrong length".into()));
            }
            data.copy_from_slice(&result);
        }
        Ok(())
    }

    /// Starts an all-reduce of `data` over `group` (sorted ranks including
    /// this one), as a gradient reduction is launched before it is waited
    /// for: sends this rank's values to every other member (never waits).
    /// [`Comm::all_reduce_finish`] completes it.
    pub(crate) fn all_reduce_start<T: Element>(&self, group: &[u32], data: &[T]) -> Result<(), CommError> {
        if group.len() <= 1 {
            return Ok(());
        }
        let bytes = T::encode(data);
        for &peer in group.iter().filter(|&&peer| peer != self.rank) {
            self.send(peer, tag::REDUCE, &bytes)?;
        }
        Ok(())
    }

    /// Completes [`Comm::all_reduce_start`]: receives every other member's
    /// values and sums all of them in group order, so that every member
    /// ends with the same bits.
    pub(crate) fn all_reduce_finish<T: Element>(&mut self, group: &[u32], data: &mut [T]) -> Result<(), CommError> {
        if group.len() <= 1 {
            return Ok(());
        }
        let mine = data.to_vec();
        for (position, &member) in group.iter().enumerate() {
            let theirs = if member == self.rank {
                mine.clone()
            } else {
                let theirs = T::decode(&self.recv(member, tag::REDUCE)?);
                if theirs.len() != data.len() {
                    return Err(CommError::Protocol(format!(
                        "all-reduce: rank {member} sent {} values, expected {}",
                        theirs.len(),
                        data.len()
                    )));
                }
                theirs
            };
            if position == 0 {
                data.copy_from_slice(&theirs);
            } else {
                for (sum, value) in data.iter_mut().zip(theirs) {
                    *sum = sum.add(value);
                }
            }
        }
        Ok(())
    }

    /// Concatenates every member's `local` in group order.
    pub(crate) fn all_gather(&mut self, group: &[u32], local: &[f32]) -> Result<Vec<f32>, CommError> {
        if group.len() <= 1 {
            return Ok(local.to_vec());
        }
        let leader = group[0];
        if self.rank == leader {
            let mut all = local.to_vec();
            for &peer in &group[1..] {
                all.extend(f32::decode(&self.recv(peer, tag::GATHER)?));
            }
            let bytes = f32::encode(&all);
            for &peer in &group[1..] {
                self.send(peer, tag::RESULT, &bytes)?;
            }
            Ok(all)
        } else {
            self.send(leader, tag::GATHER, &f32::encode(local))?;
            Ok(f32::decode(&self.recv(leader, tag::RESULT)?))
        }
    }

    /// Leaves the job after a final barrier: tells every peer that the end
    /// of this rank's connections is expected, then closes them.
    pub(crate) fn finish(self) {
        for (peer, stream) in self.peers.iter().enumerate() {
            if stream.is_some() {
                let _ = self.send(peer as u32, tag::GOODBYE, &[]);
            }
        }
    }

    /// Waits until every member of `group` has reached this call.
    pub(crate) fn barrier(&mut self, group: &[u32]) -> Result<(), CommError> {
        self.all_reduce::<f64>(group, &mut [])
    }
}

fn reader_loop(peer: u32, stream: &TcpStream, events: &Sender<Event>) {
    loop {
        match read_frame(stream) {
            Ok((tag, payload)) => {
                if events.send(Event::Frame { from: peer, tag, payload }).is_err() {
                    return;
                }
            }
            Err(error) => {
                let reason = if error.kind() == io::ErrorKind::UnexpectedEof {
                    "connection closed".to_string()
                } else {
                    error.to_string()
                };
                let _ = events.send(Event::Closed { from: peer, reason });
                return;
            }
        }
    }
}

/// A number that travels in collectives (little-endian).
pub(crate) trait Element: Copy {
    /// `self + other`.
    fn add(self, other: Self) -> Self;
    /// Little-endian bytes of `values`.
    fn encode(values: &[Self]) -> Vec<u8>;
    /// Values from little-endian bytes (a trailing partial value is ignored).
    fn decode(bytes: &[u8]) -> Vec<Self>;
}

impl Element for f32 {
    fn add(self, other: f32) -> f32 {
        self + other
    }
    fn encode(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }
    fn decode(bytes: &[u8]) -> Vec<f32> {
        bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }
}

impl Element for f64 {
    fn add(self, other: f64) -> f64 {
        self + other
    }
    fn encode(values: &[f64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }
    fn decode(bytes: &[u8]) -> Vec<f64> {
        bytes.chunks_exact(8).map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    fn mesh(world: u32) -> Vec<Comm> {
        let rendezvous =
            Rendezvous { master_addr: "127.0.0.1".into(), master_port: free_port(), deadline: Duration::from_secs(10) };
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let rendezvous = rendezvous.clone();
                thread::spawn(move || Comm::connect(rank, world, &rendezvous, Duration::from_secs(5)).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn three_ranks_all_reduce_gather_and_exchange_point_to_point() {
        let comms = mesh(3);
        let handles: Vec<_> = comms
            .into_iter()
            .map(|mut comm| {
                thread::spawn(move || {
                    let rank = comm.rank();
                    let mut data = [rank as f32, 1.0];
                    comm.all_reduce(&[0, 1, 2], &mut data).unwrap();
                    // Launched, then completed: every rank sums in rank order.
                    let values = |r: u32| [0.1 * (r as f32 + 1.0), 1e8 * (r as f32 - 1.0) + 0.5];
                    let mut split = values(rank);
                    comm.all_reduce_start(&[0, 1, 2], &split).unwrap();
                    comm.all_reduce_finish(&[0, 1, 2], &mut split).unwrap();
                    let (a, b, c) = (values(0), values(1), values(2));
                    assert_eq!(split, [a[0] + b[0] + c[0], a[1] + b[1] + c[1]], "rank {rank}");
                    let gathered = comm.all_gather(&[0, 1, 2], &[rank as f32 * 10.0]).unwrap();
                    if rank == 0 {
                        comm.send(2, tag::FORWARD, b"hi").unwrap();
                    }
                    let message = if rank == 2 { comm.recv(0, tag::FORWARD).unwrap() } else { Vec::new() };
                    comm.barrier(&[0, 1, 2]).unwrap();
                    // Kept open until every rank is done: a rank that closes
                    // its connections early is a lost peer to the others.
                    (data, gathered, message, comm)
                })
            })
            .collect();
        let mut open = Vec::new();
        for (rank, handle) in handles.into_iter().enumerate() {
            let (data, gathered, message, comm) = handle.join().unwrap();
            assert_eq!(data, [3.0, 3.0]);
            assert_eq!(gathered, vec![0.0, 10.0, 20.0]);
            assert_eq!(message.is_empty(), rank != 2);
            open.push(comm);
        }
    }

    #[test]
    fn a_peer_that_goes_away_fails_the_wait_promptly() {
        let mut comms = mesh(2);
        let gone = comms.pop().unwrap();
        drop(gone);
        let mut comm = comms.pop().unwrap();
        let started = Instant::now();
        let error = comm.recv(1, tag::FORWARD).unwrap_err();
        assert!(matches!(error, CommError::PeerLost { peer: 1, .. }), "{error}");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(error.to_string().contains("rank 1"));
    }
}

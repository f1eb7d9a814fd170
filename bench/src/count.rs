//! Counting proxies: TCP relays between the measured processes and
//! Postgres or RabbitMQ that read the protocol frames passing through and
//! count what a hop costs on the wire, without touching Baton's code.
//!
//! Postgres (protocol 3): statements are Execute and simple Query messages
//! (BEGIN and COMMIT included); round trips are the client's writes that
//! end in a Sync or a Query (tokio-postgres sends pipelined requests in one
//! write, so a pipeline counts once); commits are `COMMIT` command tags plus
//! transactions that commit implicitly (a statement outside BEGIN).
//! RabbitMQ (AMQP 0-9-1): `basic.publish` frames from the client.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxies counted so far.
#[derive(Debug, Default)]
pub struct Counts {
    pub statements: AtomicU64,
    pub round_trips: AtomicU64,
    pub commits: AtomicU64,
    pub publishes: AtomicU64,
}

/// A reading of [`Counts`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Snapshot {
    pub statements: u64,
    pub round_trips: u64,
    pub commits: u64,
    pub publishes: u64,
}

impl Counts {
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            statements: self.statements.load(Ordering::Relaxed),
            round_trips: self.round_trips.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
            publishes: self.publishes.load(Ordering::Relaxed),
        }
    }
}

impl std::ops::Sub for Snapshot {
    type Output = Snapshot;
    fn sub(self, o: Snapshot) -> Snapshot {
        Snapshot {
            statements: self.statements - o.statements,
            round_trips: self.round_trips - o.round_trips,
            commits: self.commits - o.commits,
            publishes: self.publishes - o.publishes,
        }
    }
}

#[derive(Clone, Copy)]
enum Protocol {
    Postgres,
    Amqp,
}

/// A proxy listening on 127.0.0.1 (port 0) in front of `upstream`.
pub struct Proxy {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn postgres(upstream: SocketAddr, counts: Arc<Counts>) -> anyhow::Result<Proxy> {
    listen(upstream, counts, Protocol::Postgres).await
}

pub async fn amqp(upstream: SocketAddr, counts: Arc<Counts>) -> anyhow::Result<Proxy> {
    listen(upstream, counts, Protocol::Amqp).await
}

async fn listen(upstream: SocketAddr, counts: Arc<Counts>, protocol: Protocol) -> anyhow::Result<Proxy> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        let mut relays = tokio::task::JoinSet::new();
        while let Ok((client, _)) = listener.accept().await {
            let counts = counts.clone();
            relays.spawn(async move {
                if let Ok(server) = TcpStream::connect(upstream).await {
                    relay(client, server, counts, protocol).await;
                }
            });
        }
    });
    Ok(Proxy { addr, task })
}

async fn relay(client: TcpStream, server: TcpStream, counts: Arc<Counts>, protocol: Protocol) {
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up_counts = counts.clone();
    let up = async move {
        let mut reader = match protocol {
            Protocol::Postgres => Frames::postgres_client(),
            Protocol::Amqp => Frames::amqp_client(),
        };
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = cr.read(&mut buf).await {
            reader.feed(&buf[..n], &up_counts);
            if sw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = sw.shutdown().await;
    };
    let down = async move {
        let mut reader = Frames::postgres_server();
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = sr.read(&mut buf).await {
            if matches!(protocol, Protocol::Postgres) {
                reader.feed(&buf[..n], &counts);
            }
            if cw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = cw.shutdown().await;
    };
    tokio::join!(up, down);
}

#[derive(Clone, Copy, PartialEq)]
enum Side {
    PostgresClient,
    PostgresServer,
    AmqpClient,
}

/// Reassembles one direction's frames across reads and counts them.
struct Frames {
    side: Side,
    pending: Vec<u8>,
    /// Postgres client: the next message has no type byte (startup, SSL request).
    untyped: bool,
    /// AMQP client: the 8-byte protocol header is still to come.
    header: bool,
    /// Postgres server: inside an explicit transaction, and statements since the last ReadyForQuery.
    in_tx: bool,
    completed: u32,
}

impl Frames {
    fn postgres_client() -> Self {
        Self { side: Side::PostgresClient, pending: vec![], untyped: true, header: false, in_tx: false, completed: 0 }
    }
    fn postgres_server() -> Self {
        Self { side: Side::PostgresServer, pending: vec![], untyped: false, header: false, in_tx: false, completed: 0 }
    }
    fn amqp_client() -> Self {
        Self { side: Side::AmqpClient, pending: vec![], untyped: false, header: true, in_tx: false, completed: 0 }
    }

    fn feed(&mut self, data: &[u8], counts: &Counts) {
        self.pending.extend_from_slice(data);
        let mut at = 0;
        let mut waits = false;
        while let Some(len) = self.next_len(&self.pending[at..]) {
            let frame = self.pending[at..at + len].to_vec();
            waits |= self.count(&frame, counts);
            at += len;
        }
        self.pending.drain(..at);
        if waits {
            counts.round_trips.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The length of the complete frame at the start of `buf`, if it is all there.
    fn next_len(&self, buf: &[u8]) -> Option<usize> {
        let len = match self.side {
            Side::AmqpClient if self.header => 8,
            Side::AmqpClient => 8 + u32::from_be_bytes(buf.get(3..7)?.try_into().ok()?) as usize,
            Side::PostgresClient if self.untyped => u32::from_be_bytes(buf.get(0..4)?.try_into().ok()?) as usize,
            _ => 1 + u32::from_be_bytes(buf.get(1..5)?.try_into().ok()?) as usize,
        };
        (buf.len() >= len).then_some(len)
    }

    /// Counts one frame; true when the client now waits on the server.
    fn count(&mut self, frame: &[u8], counts: &Counts) -> bool {
        match self.side {
            Side::AmqpClient if self.header => self.header = false,
            Side::AmqpClient => {
                // A method frame (type 1) of class 60 (basic), method 40 (publish).
                if frame[0] == 1 && frame.get(7..11) == Some(&[0, 60, 0, 40]) {
                    counts.publishes.fetch_add(1, Ordering::Relaxed);
                }
            }
            Side::PostgresClient if self.untyped => {
                // An SSL or GSS request is followed by the real startup message.
                let code = frame.get(4..8).map(|c| u32::from_be_bytes(c.try_into().unwrap_or_default()));
                self.untyped = matches!(code, Some(80877103 | 80877104));
            }
            Side::PostgresClient => match frame[0] {
                b'E' | b'Q' => {
                    counts.statements.fetch_add(1, Ordering::Relaxed);
                    return frame[0] == b'Q';
                }
                b'S' => return true,
                _ => {}
            },
            Side::PostgresServer => self.server_message(frame, counts),
        }
        false
    }

    fn server_message(&mut self, frame: &[u8], counts: &Counts) {
        match frame[0] {
            b'C' => {
                self.completed += 1;
                if frame[5..].starts_with(b"COMMIT\0") {
                    counts.commits.fetch_add(1, Ordering::Relaxed);
                }
            }
            b'Z' => {
                let status = frame.get(5).copied().unwrap_or(b'I');
                // Statements that completed outside BEGIN … COMMIT committed on their own.
                if status == b'I' && !self.in_tx && self.completed > 0 {
                    counts.commits.fetch_add(1, Ordering::Relaxed);
                }
                self.in_tx = status != b'I';
                self.completed = 0;
            }
            _ => {}
        }
    }
}

/// `scheme://user@host:port/path` with its `host:port` replaced by `addr`.
pub fn through(url: &str, addr: SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (authority, path) = rest.split_once('/').map(|(a, p)| (a, format!("/{p}"))).unwrap_or((rest, String::new()));
    let user = authority.rsplit_once('@').map(|(u, _)| format!("{u}@")).unwrap_or_default();
    format!("{scheme}://{user}{addr}{path}")
}

/// The `host:port` a URL points at (with the scheme's default port).
pub async fn upstream(url: &str, default_port: u16) -> anyhow::Result<SocketAddr> {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let authority = rest.split('/').next().unwrap_or_default();
    let host = authority.rsplit_once('@').map(|(_, h)| h).unwrap_or(authority);
    let host = if host.contains(':') { host.to_string() } else { format!("{host}:{default_port}") };
    let found = tokio::net::lookup_host(host.as_str()).await?.next();
    found.ok_or_else(|| anyhow::anyhow!("{host} does not resolve"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_pointed_at_the_proxy_keeping_its_user_and_path() {
        let addr: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        assert_eq!(
            through("postgres://postgres@127.0.0.1:5432/baton_bench", addr),
            "postgres://postgres@127.0.0.1:4000/baton_bench"
        );
        assert_eq!(through("amqp://guest:guest@localhost:5672/%2f", addr), "amqp://guest:guest@127.0.0.1:4000/%2f");
    }

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn postgres_messages_split_across_reads_are_counted_once() {
        let counts = Counts::default();
        let mut client = Frames::postgres_client();
        let startup = [&9u32.to_be_bytes()[..], &[0, 3, 0, 0, 0]].concat();
        let stream = [
            startup,
            message(b'P', b"x"),
            message(b'E', b"\0\0\0\0\0"),
            message(b'S', b""),
            message(b'Q', b"COMMIT\0"),
        ]
        .concat();
        client.feed(&stream[..7], &counts);
        client.feed(&stream[7..20], &counts);
        client.feed(&stream[20..], &counts);
        assert_eq!(counts.snapshot(), Snapshot { statements: 2, round_trips: 1, commits: 0, publishes: 0 });
    }

    #[test]
    fn explicit_and_implicit_commits_are_counted_and_rollbacks_are_not() {
        let counts = Counts::default();
        let mut server = Frames::postgres_server();
        let script = [
            message(b'C', b"BEGIN\0"),
            message(b'Z', b"T"),
            message(b'C', b"INSERT 0 1\0"),
            message(b'Z', b"T"),
            message(b'C', b"COMMIT\0"),
            message(b'Z', b"I"),
            message(b'C', b"SELECT 1\0"),
            message(b'Z', b"I"),
            message(b'C', b"BEGIN\0"),
            message(b'Z', b"T"),
            message(b'C', b"ROLLBACK\0"),
            message(b'Z', b"I"),
        ]
        .concat();
        server.feed(&script, &counts);
        assert_eq!(counts.snapshot().commits, 2);
    }

    #[test]
    fn amqp_publishes_are_counted_from_method_frames() {
        let counts = Counts::default();
        let mut client = Frames::amqp_client();
        let publish = [&[1u8, 0, 1][..], &8u32.to_be_bytes(), &[0, 60, 0, 40, 0, 0, 0, 0], &[0xCE]].concat();
        let ack = [&[1u8, 0, 1][..], &8u32.to_be_bytes(), &[0, 60, 0, 80, 0, 0, 0, 0], &[0xCE]].concat();
        let stream = [b"AMQP\x00\x00\x09\x01".to_vec(), publish.clone(), ack, publish].concat();
        client.feed(&stream, &counts);
        assert_eq!(counts.snapshot().publishes, 2);
    }
}

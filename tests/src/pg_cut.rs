//! A commit whose answer is lost: a TCP proxy in front of PostgreSQL that,
//! once armed, lets the next `COMMIT` through, waits until the server has
//! answered it (so the transaction is committed), and then cuts that
//! connection without passing the answer on. The client sees its connection
//! close during the commit, as when a primary dies after its synchronous
//! standby had the commit: the outcome is unknown to the client, yet the
//! transaction is in.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// The proxy; it runs until dropped with the test's runtime.
pub struct CommitCutter {
    pub port: u16,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicUsize>,
}

impl CommitCutter {
    /// Proxies to `upstream` (`host:port`).
    pub async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let port = listener.local_addr().expect("its address").port();
        let (armed, cuts) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let (armed_in, cuts_in) = (armed.clone(), cuts.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else { continue };
                tokio::spawn(proxy(client, server, armed_in.clone(), cuts_in.clone()));
            }
        });
        Self { port, armed, cuts }
    }

    /// The next `COMMIT` any connection sends is answered by the server and
    /// its connection cut.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// How many commits were cut.
    pub fn cuts(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }

    /// `url` with its host and port replaced by the proxy's, and without
    /// TLS (the proxy reads the protocol's messages).
    pub fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").expect("a postgres:// url");
        let (authority, path) = rest.split_once('/').expect("a database in the url");
        let user = authority.rsplit_once('@').map(|(user, _)| format!("{user}@")).unwrap_or_default();
        let joiner = if path.contains('?') { '&' } else { '?' };
        format!("{scheme}://{user}127.0.0.1:{}/{path}{joiner}sslmode=disable", self.port)
    }
}

async fn proxy(client: TcpStream, server: TcpStream, armed: Arc<AtomicBool>, cuts: Arc<AtomicUsize>) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    // Set when the client's COMMIT is on its way: the server's next bytes
    // (its answer) are read and dropped, and that ends the connection.
    let cutting = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(Notify::new());
    let (cutting_out, answered_out) = (cutting.clone(), answered.clone());
    let back = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from_server.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if cutting_out.load(Ordering::SeqCst) {
                answered_out.notify_one();
                break;
            }
            if to_client.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    });
    // The client's side is read message by message: the start-up messages
    // (an SSL or GSS request first, perhaps) have no type byte, the rest do.
    let mut started = false;
    loop {
        let message = match read_message(&mut from_client, started).await {
            Some(message) => message,
            None => break,
        };
        let is_request = !started && message.len() == 8 && matches!(&message[4..8], [4, 210, 22, 47 | 48]);
        started |= !is_request;
        let commit =
            message.first() == Some(&b'Q') && message.get(5..11).is_some_and(|q| q.eq_ignore_ascii_case(b"COMMIT"));
        if commit && armed.swap(false, Ordering::SeqCst) {
            cutting.store(true, Ordering::SeqCst);
            if to_server.write_all(&message).await.is_ok() {
                answered.notified().await;
            }
            cuts.fetch_add(1, Ordering::SeqCst);
            break;
        }
        if to_server.write_all(&message).await.is_err() {
            break;
        }
    }
    back.abort();
}

/// One protocol message, whole (`typed`: a type byte, then a length that
/// counts itself; before start-up only the length).
async fn read_message(from: &mut (impl AsyncRead + Unpin), typed: bool) -> Option<Vec<u8>> {
    let head = if typed { 5 } else { 4 };
    let mut message = vec![0u8; head];
    from.read_exact(&mut message).await.ok()?;
    let len = u32::from_be_bytes(message[head - 4..head].try_into().ok()?) as usize;
    let rest = len.checked_sub(4)?;
    message.resize(head + rest, 0);
    from.read_exact(&mut message[head..]).await.ok()?;
    Some(message)
}

//! E11 counted independently of the store's own counter: a TCP proxy between the store and the
//! server counts the statements the client sends on the wire — each statement of a
//! simple-protocol `Query` (`Q`; cairn sends `BEGIN` and the space lock as one) and every
//! extended-protocol `Execute` (`E`) — and the messages that carry them (the round trips), and
//! the bare `Sync`s (`S` with nothing before it: sqlx's ping of a pooled connection).

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cairn_conformance::random_space;
use cairn_core::{EpochDiagnostics, EpochStore, Event};
use cairn_postgres::testkit::{harness, test_server_url};
use cairn_postgres::{PgOptions, PgStore};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgSslMode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Protocol codes of the untyped messages a client may send before its startup message.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;

/// What the proxy saw: statements, and the `Q`/`E` messages carrying them.
#[derive(Default)]
struct Wire {
    statements: AtomicU64,
    messages: AtomicU64,
    pings: AtomicU64,
}

/// The statements of a simple-protocol query string: its `;`-separated parts that hold more
/// than whitespace (cairn's own SQL holds no `;` inside literals).
fn statements_in(query: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(query.strip_suffix(&[0]).unwrap_or(query)).into_owned();
    text.split(';').filter(|s| !s.trim().is_empty()).count() as u64
}

/// Forwards one client's messages to the server, counting `Q` and `E`.
async fn pump_client(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    count: Arc<Wire>,
) -> std::io::Result<()> {
    // Untyped messages (length, then body) until the startup message.
    loop {
        let len = from.read_u32().await?;
        let mut body = vec![0u8; len.saturating_sub(4) as usize];
        from.read_exact(&mut body).await?;
        to.write_u32(len).await?;
        to.write_all(&body).await?;
        let code = body
            .get(..4)
            .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        if code != SSL_REQUEST && code != GSSENC_REQUEST {
            break;
        }
    }
    // Typed messages: type byte, length (counting itself), body.
    let mut since_sync = false;
    loop {
        let kind = from.read_u8().await?;
        let len = from.read_u32().await?;
        let mut body = vec![0u8; len.saturating_sub(4) as usize];
        from.read_exact(&mut body).await?;
        if kind == b'Q' || kind == b'E' {
            count.messages.fetch_add(1, Ordering::SeqCst);
            let n = if kind == b'Q' {
                statements_in(&body)
            } else {
                1
            };
            count.statements.fetch_add(n, Ordering::SeqCst);
        }
        if kind == b'S' {
            if !since_sync {
                count.pings.fetch_add(1, Ordering::SeqCst);
            }
            since_sync = false;
        } else {
            since_sync = true;
        }
        to.write_u8(kind).await?;
        to.write_u32(len).await?;
        to.write_all(&body).await?;
    }
}

/// Starts the proxy in front of `upstream`; returns its port and the statement count.
async fn counting_proxy(upstream: (String, u16)) -> (u16, Arc<Wire>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(Wire::default());
    let counter = count.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect((upstream.0.as_str(), upstream.1)).await else {
                continue;
            };
            let (client_read, client_write) = client.into_split();
            let (mut server_read, server_write) = server.into_split();
            tokio::spawn(pump_client(client_read, server_write, counter.clone()));
            tokio::spawn(async move {
                let mut client_write = client_write;
                let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
            });
        }
    });
    (port, count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e11_a_single_event_append_sends_five_statements_on_the_wire() {
    let h = harness().await;
    let server = PgConnectOptions::from_str(&test_server_url().await.unwrap()).unwrap();
    let (port, on_wire) = counting_proxy((server.get_host().to_owned(), server.get_port())).await;
    // The store reaches the server only through the proxy, in plain text so it can be read.
    let via_proxy = server
        .clone()
        .host("127.0.0.1")
        .port(port)
        .ssl_mode(PgSslMode::Disable);
    let pool = PgPoolOptions::new().connect_lazy_with(via_proxy);
    let store = PgStore::open_with(
        PgOptions::from_pool(&pool)
            .schema(h.schema())
            .max_connections(1),
    )
    .await
    .unwrap();
    let space = random_space("wire");
    // The first append also sets up the pooled connection (session settings): not measured.
    store
        .append(&space, vec![Event::new("wire", b"0".to_vec())])
        .await
        .unwrap();
    let pings_before = on_wire.pings.load(Ordering::SeqCst);
    for i in 1..=3u8 {
        let (wire_before, trips_before, own_before) = (
            on_wire.statements.load(Ordering::SeqCst),
            on_wire.messages.load(Ordering::SeqCst),
            store.statements_executed(),
        );
        store
            .append(&space, vec![Event::new("wire", vec![i])])
            .await
            .unwrap();
        assert_eq!(
            on_wire.statements.load(Ordering::SeqCst) - wire_before,
            5,
            "append {i}: statements"
        );
        // BEGIN and the space lock travel together: four round trips.
        assert_eq!(
            on_wire.messages.load(Ordering::SeqCst) - trips_before,
            4,
            "append {i}: round trips"
        );
        assert_eq!(store.statements_executed() - own_before, 5, "append {i}");
    }
    assert_eq!(store.cached_heads(&space).await.unwrap().len(), 1);
    // sqlx's default pings a connection every time it is taken out of the pool: 4 bare
    // `Sync`s around these 3 appends and the read (measured with the check window set to 0).
    // cairn's pool skips that ping for a connection used moments ago (`IDLE_BEFORE_CHECK`);
    // 0 or 1 were measured with it (none of them an acquire's).
    let pings = on_wire.pings.load(Ordering::SeqCst) - pings_before;
    assert!(
        pings < 4,
        "{pings} pings around 3 appends and a read on a hot connection"
    );
    store.close().await;
}

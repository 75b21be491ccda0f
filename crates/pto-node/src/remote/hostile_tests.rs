//! Real hostile clients against a real server on loopback (issue "Trust the core", item 1):
//! random bytes, a partial HTTP/2 preface, a slow drip, a silent peer, 500 connections, a
//! valid session sending oversized and malformed records, wrong tokens, and each limit of
//! `ServeLimits`. Each time, the misbehaving peer (or call) is refused and every other client
//! goes on.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use pto_chip::ChipSpec;
use tonic::Code;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

use super::proto::node_worker_client::NodeWorkerClient;
use super::proto::{
    CreateBufferRequest, FreeBufferRequest, OpenRequest, ReadRequest, SubmitRequest, WriteChunk,
};
use super::{PROTOCOL_VERSION, ServeLimits, ServeOptions, Server, serve};
use crate::EndpointMode;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A node callable that does nothing (the records around it are what is tested).
fn nothing(
    _: &mut crate::Orchestrator<'_>,
    _: &pto_types::TaskArgs,
    _: &pto_types::CallConfig,
) -> Result<(), crate::OrchError> {
    Ok(())
}
crate::register_node!("hostile_tests.nothing", nothing);

fn server(limits: ServeLimits, token: Option<&str>) -> Server {
    serve(ServeOptions {
        listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        chips: 1,
        mode: EndpointMode::InProcess,
        chip_spec: ChipSpec {
            clusters: 1,
            device_memory_bytes: 1 << 30,
            ..ChipSpec::default()
        },
        heap_ring_size: 1 << 20,
        token: token.map(String::from),
        limits,
        ..ServeOptions::default()
    })
    .unwrap()
}

fn quick_limits() -> ServeLimits {
    ServeLimits {
        handshake_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(600),
        ..ServeLimits::default()
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn client(s: &Server) -> NodeWorkerClient<Channel> {
    let channel = Channel::from_shared(format!("http://{}", s.local_addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    NodeWorkerClient::new(channel)
}

/// Opens a session; returns its id and the event stream (the session lives while it is held).
async fn open(
    c: &mut NodeWorkerClient<Channel>,
) -> Result<(u64, tonic::Streaming<super::proto::SessionEvent>), tonic::Status> {
    let mut events = c
        .open(OpenRequest {
            protocol_version: PROTOCOL_VERSION,
            client: "hostile test".into(),
        })
        .await?
        .into_inner();
    let first = events.message().await?.expect("a ready event");
    let Some(super::proto::session_event::Event::Ready(ready)) = first.event else {
        panic!("the first event is Ready");
    };
    Ok((ready.session, events))
}

/// A whole buffer round trip through a session: what "every other client goes on" checks.
async fn buffer_round_trip(c: &mut NodeWorkerClient<Channel>, session: u64) {
    let h = c
        .create_buffer(CreateBufferRequest {
            session,
            nbytes: 64,
        })
        .await
        .unwrap()
        .into_inner();
    let data: Vec<u8> = (0..64).collect();
    let chunk = WriteChunk {
        session,
        buffer_id: h.buffer_id,
        offset: 0,
        data: data.clone(),
    };
    c.write_buffer(tokio_stream::iter([chunk])).await.unwrap();
    let mut chunks = c
        .read_buffer(ReadRequest {
            session,
            buffer_id: h.buffer_id,
            offset: 0,
            len: 64,
        })
        .await
        .unwrap()
        .into_inner();
    let got = chunks.message().await.unwrap().unwrap();
    assert_eq!(got.data, data);
    c.free_buffer(FreeBufferRequest {
        session,
        buffer_id: h.buffer_id,
    })
    .await
    .unwrap();
}

/// Reads from a raw connection until the server closes it; returns how long that took.
fn until_closed(mut tcp: TcpStream, within: Duration) -> Duration {
    let started = Instant::now();
    tcp.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match tcp.read(&mut buf) {
            Ok(0) => return started.elapsed(),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return started.elapsed(),
            Err(e) => panic!("the server kept the connection open ({e}) for {within:?}"),
        }
    }
}

/// Waits until `f` holds, for at most `within`.
fn eventually(within: Duration, f: impl Fn() -> bool) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

#[test]
fn random_bytes_close_their_connection_and_others_go_on() {
    pto_testkit::with_timeout(60, || {
        let s = server(quick_limits(), None);
        let mut tcp = TcpStream::connect(s.local_addr()).unwrap();
        let mut r = 0x9e37_79b9_7f4a_7c15u64;
        let junk: Vec<u8> = (0..4096)
            .map(|_| {
                r ^= r << 13;
                r ^= r >> 7;
                r ^= r << 17;
                r as u8
            })
            .collect();
        let _ = tcp.write_all(&junk);
        until_closed(tcp, Duration::from_secs(5));
        rt().block_on(async {
            let mut c = client(&s).await;
            let (session, _events) = open(&mut c).await.unwrap();
            buffer_round_trip(&mut c, session).await;
        });
    });
}

#[test]
fn a_partial_preface_and_a_slow_drip_are_cut_at_the_handshake_timeout() {
    pto_testkit::with_timeout(60, || {
        let s = server(quick_limits(), None);
        let mut partial = TcpStream::connect(s.local_addr()).unwrap();
        partial.write_all(&PREFACE[..16]).unwrap();
        let took = until_closed(partial, Duration::from_secs(5));
        assert!(took < Duration::from_secs(3), "{took:?}");
        // One byte every 50 ms: the preface alone would take 1.2 s, past the 300 ms limit.
        let mut drip = TcpStream::connect(s.local_addr()).unwrap();
        let reader = drip.try_clone().unwrap();
        let dripping = std::thread::spawn(move || {
            let mut sent = 0;
            for &b in PREFACE {
                if drip.write_all(&[b]).is_err() {
                    break;
                }
                sent += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            sent
        });
        let took = until_closed(reader, Duration::from_secs(5));
        assert!(took < Duration::from_secs(3), "{took:?}");
        assert!(dripping.join().unwrap() < PREFACE.len());
        assert!(eventually(Duration::from_secs(2), || s.connections() == 0));
    });
}

#[test]
fn a_peer_that_goes_silent_after_the_handshake_is_cut() {
    pto_testkit::with_timeout(60, || {
        let s = server(quick_limits(), None);
        let mut tcp = TcpStream::connect(s.local_addr()).unwrap();
        // The preface and an empty SETTINGS frame, then nothing (no ACK of the server's pings).
        tcp.write_all(PREFACE).unwrap();
        tcp.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).unwrap();
        let took = until_closed(tcp, Duration::from_secs(6));
        assert!(took < Duration::from_secs(4), "{took:?}");
    });
}

#[test]
fn five_hundred_connections_do_not_lock_out_a_client() {
    pto_testkit::with_timeout(90, || {
        let limits = ServeLimits {
            max_connections: 64,
            handshake_timeout: Duration::from_millis(500),
            ..ServeLimits::default()
        };
        let s = server(limits, None);
        let idle: Vec<TcpStream> = (0..500)
            .map(|_| TcpStream::connect(s.local_addr()).unwrap())
            .collect();
        assert!(eventually(Duration::from_secs(2), || s.connections() <= 64));
        let started = Instant::now();
        rt().block_on(async {
            let mut c = client(&s).await;
            let (session, _events) = open(&mut c).await.unwrap();
            buffer_round_trip(&mut c, session).await;
        });
        assert!(started.elapsed() < Duration::from_secs(10));
        // The silent ones are gone after the handshake timeout; only the client's remains
        // (until its channel is dropped).
        assert!(eventually(Duration::from_secs(3), || s.connections() <= 1));
        drop(idle);
    });
}

#[test]
fn oversized_and_malformed_records_fail_their_call_only() {
    pto_testkit::with_timeout(60, || {
        let s = server(ServeLimits::default(), None);
        rt().block_on(async {
            let mut c = client(&s).await;
            let (session, _events) = open(&mut c).await.unwrap();
            let submit = |call_config: Vec<u8>, task_args: Vec<u8>| SubmitRequest {
                session,
                seq: 1,
                run_id: 1,
                task_id: 1,
                callable_name: "hostile_tests.nothing".into(),
                label: String::new(),
                call_config,
                task_args,
            };
            // Over the 4 MiB message limit: refused by tonic before any decoding.
            let e = c
                .submit(submit(vec![0; 5 << 20], Vec::new()))
                .await
                .unwrap_err();
            assert_eq!(e.code(), Code::OutOfRange, "{e}");
            assert!(e.message().contains("message length too large"), "{e}");
            // A garbage CallConfig record and a garbage args blob: failed completions that
            // name what was wrong.
            let done = c
                .submit(submit(vec![0xAB; 100], Vec::new()))
                .await
                .unwrap()
                .into_inner();
            assert_ne!(done.error_code, 0);
            assert!(done.message.contains("CallConfig"), "{}", done.message);
            let config = pto_types::wire::call_config_record::encode_call_config(
                &pto_types::CallConfig::default(),
            )
            .unwrap()
            .to_vec();
            let done = c
                .submit(submit(config, vec![0xFF; 37]))
                .await
                .unwrap()
                .into_inner();
            assert_ne!(done.error_code, 0);
            assert!(done.message.contains("task arguments"), "{}", done.message);
            // A WriteBuffer chunk over the limit fails that call; the session goes on.
            let h = c
                .create_buffer(CreateBufferRequest {
                    session,
                    nbytes: 8 << 20,
                })
                .await
                .unwrap()
                .into_inner();
            let big = WriteChunk {
                session,
                buffer_id: h.buffer_id,
                offset: 0,
                data: vec![1; 5 << 20],
            };
            let e = c.write_buffer(tokio_stream::iter([big])).await.unwrap_err();
            assert_eq!(e.code(), Code::OutOfRange, "{e}");
            buffer_round_trip(&mut c, session).await;
        });
    });
}

#[test]
fn a_wrong_token_is_refused_before_any_session_starts() {
    pto_testkit::with_timeout(60, || {
        let s = server(ServeLimits::default(), Some("s3cret"));
        rt().block_on(async {
            let channel = Channel::from_shared(format!("http://{}", s.local_addr()))
                .unwrap()
                .connect()
                .await
                .unwrap();
            let bad: MetadataValue<_> = "Bearer guess".parse().unwrap();
            let mut c =
                NodeWorkerClient::with_interceptor(channel, move |mut req: tonic::Request<()>| {
                    req.metadata_mut().insert("authorization", bad.clone());
                    Ok(req)
                });
            for _ in 0..50 {
                let e = c
                    .open(OpenRequest {
                        protocol_version: PROTOCOL_VERSION,
                        client: "guesser".into(),
                    })
                    .await
                    .unwrap_err();
                assert_eq!(e.code(), Code::Unauthenticated);
            }
        });
        assert_eq!(s.sessions(), 0);
    });
}

#[test]
fn sessions_over_the_limit_are_refused_until_one_closes() {
    pto_testkit::with_timeout(90, || {
        let limits = ServeLimits {
            max_sessions: 2,
            ..ServeLimits::default()
        };
        let s = server(limits, None);
        rt().block_on(async {
            let mut c = client(&s).await;
            let (_a, events_a) = open(&mut c).await.unwrap();
            let (b, _events_b) = open(&mut c).await.unwrap();
            let e = open(&mut c).await.unwrap_err();
            assert_eq!(e.code(), Code::ResourceExhausted);
            assert!(e.message().contains("max_sessions"), "{e}");
            buffer_round_trip(&mut c, b).await;
            drop(events_a);
            let until = Instant::now() + Duration::from_secs(10);
            loop {
                match open(&mut c).await {
                    Ok(_) => break,
                    Err(e) if Instant::now() < until => {
                        assert_eq!(e.code(), Code::ResourceExhausted);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(e) => panic!("the closed session's place was never freed: {e}"),
                }
            }
        });
    });
}

#[test]
fn calls_and_buffer_bytes_over_a_sessions_limits_are_refused() {
    pto_testkit::with_timeout(60, || {
        let limits = ServeLimits {
            max_calls_per_session: 1,
            max_buffer_bytes_per_session: 32 << 20,
            ..ServeLimits::default()
        };
        let s = server(limits, None);
        rt().block_on(async {
            let mut c = client(&s).await;
            let (session, _events) = open(&mut c).await.unwrap();
            let h = c
                .create_buffer(CreateBufferRequest {
                    session,
                    nbytes: 24 << 20,
                })
                .await
                .unwrap()
                .into_inner();
            let e = c
                .create_buffer(CreateBufferRequest {
                    session,
                    nbytes: 16 << 20,
                })
                .await
                .unwrap_err();
            assert_eq!(e.code(), Code::ResourceExhausted);
            assert!(e.message().contains("max_buffer_bytes_per_session"), "{e}");
            // A read of 24 MiB that is not consumed holds the session's one call slot.
            let held = c
                .read_buffer(ReadRequest {
                    session,
                    buffer_id: h.buffer_id,
                    offset: 0,
                    len: 24 << 20,
                })
                .await
                .unwrap()
                .into_inner();
            let e = c
                .create_buffer(CreateBufferRequest {
                    session,
                    nbytes: 64,
                })
                .await
                .unwrap_err();
            assert_eq!(e.code(), Code::ResourceExhausted);
            assert!(e.message().contains("max_calls_per_session"), "{e}");
            drop(held);
            c.free_buffer(FreeBufferRequest {
                session,
                buffer_id: h.buffer_id,
            })
            .await
            .unwrap();
            let until = Instant::now() + Duration::from_secs(10);
            loop {
                match c
                    .create_buffer(CreateBufferRequest {
                        session,
                        nbytes: 24 << 20,
                    })
                    .await
                {
                    Ok(_) => break,
                    Err(e) if Instant::now() < until => {
                        assert_eq!(e.code(), Code::ResourceExhausted, "{e}");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(e) => panic!("the slot and the bytes were never released: {e}"),
                }
            }
        });
    });
}

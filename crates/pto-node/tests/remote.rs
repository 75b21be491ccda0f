//! Remote L3 over gRPC (NODE_RUNTIME.md §6.2, issue 16), against servers started in this test
//! process on loopback ports (`pto_node::remote::serve`; their sessions' chips are children of
//! this binary). Real `pto serve` processes, killed and stopped, are driven by the pto-cli tests.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use pto_node::remote::{RemoteWorker, ServeLimits, ServeOptions, Server, TlsIdentity, serve};
use pto_node::{BuildError, Callable, EndpointMode, InitError, SubmitError, Worker};
use pto_types::{CallConfig, DType, Resource, RuntimeEnv, TaskArgs, Tensor};

use crate::common::*;

const N: usize = 256;

pub(crate) fn server(token: Option<&str>, tls: Option<TlsIdentity>) -> Server {
    serve(ServeOptions {
        listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        chips: 2,
        sub_workers: 0,
        mode: EndpointMode::ChildProcess,
        chip_spec: small_chip(1 << 30),
        heap_ring_size: 1 << 20,
        token: token.map(String::from),
        tls,
        limits: ServeLimits::default(),
    })
    .unwrap()
}

pub(crate) fn at(s: &Server) -> String {
    format!("http://{}", s.local_addr())
}

/// A local L3 child like the server's session Worker (2 small chips).
fn local_l3() -> Worker {
    pto_kernels::link();
    let w = Worker::builder(3)
        .chips(2)
        .chip_spec(0, small_chip(1 << 30))
        .chip_spec(1, small_chip(1 << 30))
        .heap_ring_size(1 << 20)
        .build()
        .unwrap();
    w.register(Callable::chip("elementwise_add")).unwrap();
    w
}

/// The config an L4 task carries: a per-ring sizing, flowing down to the L3 function's chips.
fn l4_config() -> CallConfig {
    CallConfig::with_runtime_env(
        RuntimeEnv::default()
            .with_task_window([64, 32, 16, 16])
            .with_heap(2 << 20),
    )
}

/// A remote worker 0 and a local L3 child 1 run the same node callable (`l3_pipeline`, tests
/// of l4.rs) with the same config: results and every chip's resolved sizing — values and
/// sources — are identical (RING_CONFIG.md row 58).
#[test]
fn remote_and_local_l3_resolve_the_same_sizing() {
    with_timeout(90, || {
        let server = server(None, None);
        let l4 = Worker::builder(4)
            .remote_worker(&at(&server))
            .build()
            .unwrap();
        assert_eq!(l4.add_worker(local_l3()).unwrap(), 1);
        let h = l4.register(Callable::node("l3_pipeline")).unwrap();
        l4.init().unwrap();
        assert_eq!(
            l4.chip_name(0).unwrap(),
            format!("remote[0] ({})", server.local_addr())
        );
        // Remote worker 0: a, b, out0, out1 live in its session.
        let remote = |v: f32| {
            let b = l4.create_remote_buffer(0, N * 4).unwrap();
            b.write_from(0, &vec![v; N]).unwrap();
            let t = b.tensor(&[N as u32], DType::F32).unwrap();
            (b, t)
        };
        let (ra, rb, ro0, ro1) = (remote(1.5), remote(2.0), remote(0.0), remote(0.0));
        let (_la, la) = buf(&l4, N, 1.5);
        let (_lb, lb) = buf(&l4, N, 2.0);
        let (lo0_buf, lo0) = buf(&l4, N, 0.0);
        let (_lo1, lo1) = buf(&l4, N, 0.0);
        let (tr, tl) = (
            [ra.1.clone(), rb.1.clone(), ro0.1.clone(), ro1.1.clone()],
            [la, lb, lo0, lo1],
        );
        let report = l4
            .run(
                move |orch, _, cfg| {
                    for (w, t) in [(0, &tr), (1, &tl)] {
                        let args = TaskArgs::new()
                            .input(&t[0])
                            .input(&t[1])
                            .output_existing(&t[2])
                            .output_existing(&t[3])
                            .label(&format!("l3_{w}"));
                        orch.submit_next_level(&h, args, cfg, w)?;
                    }
                    Ok(())
                },
                TaskArgs::new(),
                l4_config(),
            )
            .unwrap();
        assert_eq!(ro0.0.read_vec::<f32>(0, N).unwrap(), vec![3.5; N]);
        assert_eq!(ro1.0.read_vec::<f32>(0, N).unwrap(), vec![3.5; N]);
        assert_eq!(lo0_buf.read_vec::<f32>(0, N).unwrap(), vec![3.5; N]);
        let inner = |w: usize| {
            report.task(&format!("l3_{w}")).unwrap().members[0]
                .inner
                .clone()
                .expect("the inner run's report")
        };
        let (remote_run, local_run) = (inner(0), inner(1));
        for label in ["add_small", "add_per_ring"] {
            let r = remote_run
                .task(label)
                .unwrap()
                .chip_report()
                .unwrap()
                .sizing;
            let l = local_run.task(label).unwrap().chip_report().unwrap().sizing;
            assert_eq!(r, l, "{label}: remote and local chips resolved differently");
            for res in Resource::ALL {
                assert_eq!(r.sources(res), l.sources(res), "{label} {res:?}");
            }
            assert_eq!(r.values(Resource::TaskWindow), [64, 32, 16, 16], "{label}");
        }
        assert_eq!(server.sessions(), 1);
        l4.close();
        // Closing the L4 closes the session (and its Worker) on the server.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while server.sessions() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(server.sessions(), 0);
    });
}

/// A host buffer of this process aimed at a remote worker, a remote buffer aimed at another
/// worker, and a remote buffer in a sub task fail at submit, naming the tensor and the worker.
#[test]
fn buffers_that_a_worker_cannot_reach_fail_at_submit() {
    with_timeout(60, || {
        let (s0, s1) = (server(None, None), server(None, None));
        let l4 = Worker::builder(4)
            .remote_worker(&at(&s0))
            .remote_worker(&at(&s1))
            .sub_workers(1)
            .build()
            .unwrap();
        let h = l4.register(Callable::node("l3_pipeline")).unwrap();
        let sum = l4.register(Callable::sub("sum_outputs")).unwrap();
        l4.init().unwrap();
        let (_host, host) = buf(&l4, N, 1.0);
        let r0 = l4.create_remote_buffer(0, N * 4).unwrap();
        let t0 = r0.tensor(&[N as u32], DType::F32).unwrap();
        let errors = std::sync::Mutex::new(Vec::new());
        let _ = l4.run(
            |orch, _, cfg| {
                let mut errs = errors.lock().unwrap();
                let four = |t: &Tensor| {
                    TaskArgs::new()
                        .input(t)
                        .input(t)
                        .output_existing(t)
                        .output_existing(t)
                };
                errs.push(orch.submit_next_level(&h, four(&host), cfg, 0).unwrap_err());
                errs.push(orch.submit_next_level(&h, four(&t0), cfg, 1).unwrap_err());
                errs.push(
                    orch.submit_sub(&sum, TaskArgs::new().input(&t0))
                        .unwrap_err(),
                );
                Ok(())
            },
            TaskArgs::new(),
            CallConfig::default(),
        );
        let errs = errors.into_inner().unwrap();
        let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        assert!(matches!(
            errs[0],
            SubmitError::BufferNotReachable { index: 0, .. }
        ));
        assert!(
            text[0].contains("a host buffer of this process is not reachable from remote worker 0")
                && text[0].contains("create_remote_buffer"),
            "{}",
            text[0]
        );
        assert!(
            text[1].contains("cannot be used by a task for worker 1"),
            "{}",
            text[1]
        );
        assert!(
            text[2].contains("cannot be used by a sub task"),
            "{}",
            text[2]
        );
        l4.close();
    });
}

/// A server with a token refuses a client without it (at `init`, saying so) and one with a
/// wrong token; the right token opens the session. Remote buffers move bytes in chunks.
#[test]
fn token_is_required_and_buffers_stream_in_chunks() {
    with_timeout(60, || {
        let s = server(Some("s3cret-token"), None);
        let no_token = Worker::builder(4).remote_worker(&at(&s)).build().unwrap();
        no_token.register(Callable::node("l3_pipeline")).unwrap();
        let e = no_token.init().unwrap_err();
        assert!(matches!(e, InitError::ChildFailed { .. }));
        assert!(e.to_string().contains("requires a token (no token)"), "{e}");
        let wrong = Worker::builder(4)
            .remote(RemoteWorker::new(&at(&s)).token("guess"))
            .build()
            .unwrap();
        let e = wrong.init().unwrap_err().to_string();
        assert!(e.contains("wrong token") && !e.contains("s3cret"), "{e}");
        assert_eq!(s.sessions(), 0);

        let l4 = Worker::builder(4)
            .remote(RemoteWorker::new(&at(&s)).token("s3cret-token"))
            .build()
            .unwrap();
        l4.init().unwrap();
        // 3 MiB + 12 bytes: several 1 MiB chunks and a tail, both ways.
        let n = (3 << 20) / 4 + 3;
        let data: Vec<u32> = (0..n as u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let b = l4.create_remote_buffer(0, n * 4).unwrap();
        b.write_from(0, &data).unwrap();
        assert_eq!(b.read_vec::<u32>(0, n).unwrap(), data);
        assert_eq!(b.read_vec::<u32>(n - 2, 2).unwrap(), data[n - 2..]);
        assert!(b.read_vec::<u32>(n - 1, 2).is_err());
        l4.close();
    });
}

/// TLS: a server with a certificate for `localhost` serves a client that trusts it; a client
/// that does not fails at `init`.
#[test]
fn tls_with_a_trusted_certificate() {
    with_timeout(60, || {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let identity = TlsIdentity {
            cert_pem: cert.cert.pem().into_bytes(),
            key_pem: cert.signing_key.serialize_pem().into_bytes(),
        };
        let s = server(None, Some(identity.clone()));
        let address = format!("https://localhost:{}", s.local_addr().port());
        let trusted = Worker::builder(4)
            .remote(RemoteWorker::new(&address).ca_certificate(&identity.cert_pem))
            .build()
            .unwrap();
        trusted.init().unwrap();
        let b = trusted.create_remote_buffer(0, 64).unwrap();
        b.write_from(0, &[7u8; 64]).unwrap();
        assert_eq!(b.read_vec::<u8>(0, 64).unwrap(), vec![7u8; 64]);
        trusted.close();
        let untrusted = Worker::builder(4).remote_worker(&address).build().unwrap();
        assert!(untrusted.init().is_err());
    });
}

/// A server that goes away between runs leaves its worker unavailable: the next submit to it
/// fails at once, naming the worker and `WORKER_LOST`'s cause; nothing hangs.
#[test]
fn a_lost_remote_worker_is_unavailable_to_later_submits() {
    with_timeout(60, || {
        let s = server(None, None);
        let l4 = Worker::builder(4).remote_worker(&at(&s)).build().unwrap();
        let h = l4.register(Callable::node("l3_pipeline")).unwrap();
        l4.init().unwrap();
        s.shutdown();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let err = loop {
            let r = l4.run(
                |orch, _, cfg| {
                    orch.submit_next_level(&h, TaskArgs::new(), cfg, 0)?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            );
            match r {
                Err(e) if e.to_string().contains("unavailable") => break e.to_string(),
                _ if std::time::Instant::now() > deadline => panic!("still available: {r:?}"),
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        assert!(err.contains("remote[0]") && err.contains("lost"), "{err}");
        l4.close();
    });
}

#[test]
fn remote_workers_are_checked_when_the_worker_is_built() {
    let e: BuildError = Worker::builder(3)
        .chips(1)
        .remote_worker("http://127.0.0.1:7070")
        .build()
        .unwrap_err();
    assert_eq!(e.option, "remote_worker");
    assert!(e.reason.contains("only a level-4 Worker"), "{}", e.reason);
    let e = Worker::builder(4)
        .remote_worker("ftp://127.0.0.1:1")
        .build()
        .unwrap_err();
    assert!(e.reason.contains("http:// or https://"), "{}", e.reason);
    let e = Worker::builder(4)
        .remote(RemoteWorker::new("127.0.0.1:1").ca_certificate(b"x"))
        .build()
        .unwrap_err();
    assert!(
        e.reason.contains("needs an https:// address"),
        "{}",
        e.reason
    );
    // Nothing listens there: init fails naming the address, and never hangs.
    let w = Worker::builder(4)
        .remote(RemoteWorker::new("127.0.0.1:1").open_timeout(Duration::from_secs(2)))
        .build()
        .unwrap();
    let e = w.init().unwrap_err().to_string();
    assert!(
        e.contains("127.0.0.1:1") && e.contains("cannot connect"),
        "{e}"
    );
}

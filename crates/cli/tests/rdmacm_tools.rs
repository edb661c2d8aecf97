//! `softrdma rping` and `softrdma ucmatose` against themselves over loopback (one device per
//! 127.0.x.y): both sides exit 0, the pings verify, the output is the real tools'. (Against
//! the real rping and ucmatose on Linux rxe: scripts/lab/rping.sh and ucmatose.sh.)

use std::process::{Command, Stdio};
use std::time::Duration;

fn softrdma(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_softrdma"));
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

#[test]
fn rping_client_and_server_verify_and_exit_0() {
    let server = softrdma(&["rping", "-s", "-a", "127.0.61.2", "-S", "100", "-v"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let client = softrdma(&[
        "rping",
        "-c",
        "-a",
        "127.0.61.2",
        "-I",
        "127.0.61.1",
        "-C",
        "5",
        "-S",
        "100",
        "-V",
        "-v",
    ])
    .output()
    .unwrap();
    let server = server.wait_with_output().unwrap();
    let (c, s) = (
        String::from_utf8_lossy(&client.stdout),
        String::from_utf8_lossy(&server.stdout),
    );
    assert!(
        client.status.success(),
        "{c}{}",
        String::from_utf8_lossy(&client.stderr)
    );
    assert!(
        server.status.success(),
        "{s}{}",
        String::from_utf8_lossy(&server.stderr)
    );
    assert_eq!(
        c.lines()
            .filter(|l| l.starts_with("ping data: rdma-ping-"))
            .count(),
        5
    );
    assert!(
        s.starts_with("server ping data: rdma-ping-0: ABCDEFGHIJ"),
        "{s}"
    );
}

#[test]
fn rping_to_a_port_nobody_listens_on_is_rejected() {
    let server = softrdma(&["rping", "-s", "-a", "127.0.61.4", "-p", "7000"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let client = softrdma(&[
        "rping",
        "-c",
        "-a",
        "127.0.61.4",
        "-I",
        "127.0.61.3",
        "-p",
        "7001",
        "-C",
        "1",
    ])
    .output()
    .unwrap();
    let mut server = server;
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(client.status.code(), Some(1));
    let err = String::from_utf8_lossy(&client.stderr);
    assert!(
        err.contains("cma event RDMA_CM_EVENT_REJECTED, error 8"),
        "{err}"
    );
}

#[test]
fn ucmatose_client_and_server_exchange_and_exit_0() {
    let server = softrdma(&["ucmatose", "-b", "127.0.61.6", "-c", "3", "-C", "4"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let client = softrdma(&[
        "ucmatose",
        "-s",
        "127.0.61.6",
        "-b",
        "127.0.61.5",
        "-c",
        "3",
        "-C",
        "4",
    ])
    .output()
    .unwrap();
    let server = server.wait_with_output().unwrap();
    let (c, s) = (
        String::from_utf8_lossy(&client.stdout),
        String::from_utf8_lossy(&server.stdout),
    );
    assert!(
        client.status.success() && c.ends_with("return status 0\n"),
        "{c}"
    );
    assert!(
        server.status.success() && s.ends_with("return status 0\n"),
        "{s}"
    );
    assert_eq!(
        s.lines().collect::<Vec<_>>(),
        [
            "cmatose: starting server",
            "initiating data transfers",
            "completing sends",
            "receiving data transfers",
            "data transfers complete",
            "cmatose: disconnecting",
            "disconnected",
            "return status 0"
        ]
    );
}

#[test]
fn udaddy_client_and_server_exchange_datagrams_and_exit_0() {
    let server = softrdma(&["udaddy", "-b", "127.0.61.8", "-c", "2", "-C", "5"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let client = softrdma(&[
        "udaddy",
        "-s",
        "127.0.61.8",
        "-b",
        "127.0.61.7",
        "-c",
        "2",
        "-C",
        "5",
    ])
    .output()
    .unwrap();
    let server = server.wait_with_output().unwrap();
    let (c, s) = (
        String::from_utf8_lossy(&client.stdout),
        String::from_utf8_lossy(&server.stdout),
    );
    assert!(
        client.status.success() && c.ends_with("test complete\nreturn status 0\n"),
        "{c}"
    );
    assert!(server.status.success(), "{s}");
    assert!(
        s.contains("sending replies\ndata transfers complete\n"),
        "{s}"
    );
}

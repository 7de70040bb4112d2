//! Running a client on node 0 and an echo on node 1 of a virtual cluster, the
//! shape of the ping-pong and the LogP measurement.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{anyhow, Context, Result};
use mcd::{Endpoint, EndpointConfig};

use mcd_vcluster::Cluster;

/// Runs `client` on node 0 (pinned to CPU 0) and `echo` on node 1 (CPU 1) of
/// `cluster`, each in a thread of its own inside its node's namespace, with an
/// endpoint (its configuration adjusted by `configure`) and a UDP socket on
/// rail 0; the echo's socket is bound to `udp_port`, and the client is given
/// its address. The caller's thread is left unpinned (processes it starts
/// later inherit its CPU set). If the client fails, `stop` is set so that the
/// echo can return.
pub fn run_client_and_echo<R: Send>(
    cluster: &Cluster,
    udp_port: u16,
    configure: impl Fn(&mut EndpointConfig) + Sync,
    client: impl FnOnce(&mut Endpoint, UdpSocket, SocketAddr) -> Result<R> + Send,
    echo: impl FnOnce(&mut Endpoint, &UdpSocket, &AtomicBool) -> Result<()> + Send,
) -> Result<R> {
    anyhow::ensure!(cluster.nodes() >= 2, "a client and an echo need two nodes");
    let cpus = mcd::host::online_cpus();
    let echo_addr = SocketAddr::from((cluster.ip(1, 0), udp_port));
    let stop = AtomicBool::new(false);
    let open = |node: usize| -> Result<(mcd::host::NetnsGuard, Endpoint)> {
        let _ = mcd::host::pin_current_thread(node % cpus);
        let ns = cluster.enter(node)?;
        let mut config = cluster.endpoint_config();
        configure(&mut config);
        Ok((ns, Endpoint::open(config)?))
    };
    std::thread::scope(|scope| {
        let echo_side = scope.spawn(|| -> Result<()> {
            let (_ns, mut ep) = open(1)?;
            let sock = UdpSocket::bind(echo_addr).with_context(|| format!("binding the UDP echo socket {echo_addr}"))?;
            echo(&mut ep, &sock, &stop)
        });
        let client_side = scope.spawn(|| -> Result<R> {
            let (_ns, mut ep) = open(0)?;
            let sock = UdpSocket::bind((cluster.ip(0, 0), 0)).context("binding the client's UDP socket")?;
            let result = client(&mut ep, sock, echo_addr);
            if result.is_err() {
                stop.store(true, Ordering::Relaxed);
            }
            result
        });
        let result = client_side.join().map_err(|_| anyhow!("client thread panicked"))?;
        let echoed = echo_side.join().map_err(|_| anyhow!("echo thread panicked"))?;
        let result = result?;
        echoed?;
        Ok(result)
    })
}

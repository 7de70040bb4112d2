//! The commands the virtual cluster runs (`ip`, `nft`), and what it reads
//! back from them: their JSON output (`ip -j`, `nft -j`) read with serde,
//! never their text.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// Runs `program args`; its standard output, or an error with its standard error.
pub(crate) fn sh(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program).args(args).stdin(Stdio::null()).output().with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!("`{program} {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// [`sh`] with `input` on its standard input.
pub(crate) fn sh_input(program: &str, args: &[&str], input: &str) -> Result<String> {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {program}"))?;
    child.stdin.take().expect("piped").write_all(input.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("`{program} {}` failed: {}\ninput:\n{input}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// [`sh`] in the network namespace `ns`.
pub(crate) fn in_ns(ns: &str, args: &[&str]) -> Result<String> {
    let mut full = vec!["netns", "exec", ns];
    full.extend_from_slice(args);
    sh("ip", &full)
}

/// A link as `ip -j link show` lists it.
#[derive(Deserialize)]
struct Link {
    /// Its name, without the `@peer` the text form adds to a veth.
    ifname: String,
}

/// A network namespace as `ip -j netns list` lists it.
#[derive(Deserialize)]
struct Netns {
    name: String,
}

/// A link as `ip -j addr show` lists it. `ip` may list links that have
/// none of the asked addresses as empty objects: every field is optional.
#[derive(Deserialize)]
struct Addresses {
    #[serde(default)]
    ifname: Option<String>,
    #[serde(default)]
    addr_info: Vec<serde_json::Value>,
}

/// `ip ARGS` (ARGS starting with `-j`) read as a list of `T`. An empty
/// output (older `ip` prints nothing for an empty list) is an empty list.
fn ip_json<T: DeserializeOwned>(args: &[&str]) -> Result<Vec<T>> {
    let out = sh("ip", args)?;
    parse_list(&out).with_context(|| format!("reading the output of `ip {}`", args.join(" ")))
}

fn parse_list<T: DeserializeOwned>(out: &str) -> serde_json::Result<Vec<T>> {
    if out.trim().is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_str(out)
}

/// The names of the root namespace's links.
pub(crate) fn links() -> Result<Vec<String>> {
    Ok(ip_json::<Link>(&["-j", "link", "show"])?.into_iter().map(|l| l.ifname).collect())
}

/// The names of the network namespaces.
pub(crate) fn namespaces() -> Result<Vec<String>> {
    Ok(ip_json::<Netns>(&["-j", "netns", "list"])?.into_iter().map(|n| n.name).collect())
}

/// The links of the root namespace with an address matching `prefix`
/// (`ip addr show to PREFIX`, e.g. `10.77.255.254/16`).
pub fn links_holding(prefix: &str) -> Result<Vec<String>> {
    Ok(holding(ip_json(&["-j", "addr", "show", "to", prefix])?))
}

/// The names of the links that have an address in `list`.
fn holding(list: Vec<Addresses>) -> Vec<String> {
    list.into_iter().filter(|a| !a.addr_info.is_empty()).filter_map(|a| a.ifname).collect()
}

/// `nft -j list ...`: a list of objects, each one of table, chain, rule, ….
#[derive(Deserialize)]
struct NftListing {
    nftables: Vec<NftObject>,
}

/// One object of a listing; only rules matter here.
#[derive(Deserialize)]
struct NftObject {
    #[serde(default)]
    rule: Option<NftRule>,
}

#[derive(Deserialize)]
struct NftRule {
    expr: Vec<NftExpr>,
}

/// One expression of a rule; only counters matter here.
#[derive(Deserialize)]
struct NftExpr {
    #[serde(default)]
    counter: Option<NftCounter>,
}

#[derive(Deserialize)]
struct NftCounter {
    packets: u64,
}

/// The packets counted by every counter of an `nft -j list` listing.
pub(crate) fn nft_counter_packets(listing: &str) -> Result<u64> {
    let listing: NftListing = serde_json::from_str(listing).context("reading the output of `nft -j list`")?;
    Ok(listing.nftables.iter().filter_map(|o| o.rule.as_ref()).flat_map(|r| &r.expr).filter_map(|e| e.counter.as_ref()).map(|c| c.packets).sum())
}

/// The processes in the namespaces of cluster `name`'s nodes (`ip netns pids`).
pub(crate) fn pids_in_namespaces(name: &str) -> Vec<i32> {
    let prefix = format!("mcd-{name}-");
    let mut pids = Vec::new();
    for ns in namespaces().unwrap_or_default() {
        if !ns.strip_prefix(&prefix).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
            continue;
        }
        let Ok(out) = Command::new("ip").args(["netns", "pids", &ns]).output() else { continue };
        pids.extend(String::from_utf8_lossy(&out.stdout).split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
    }
    pids.retain(|&p| p > 1 && p != std::process::id() as i32);
    pids
}

/// Ends `pids`: SIGTERM, then SIGKILL to those still running after `grace`.
pub(crate) fn end_processes(pids: &[i32], grace: Duration) {
    for &pid in pids {
        let _ = mcd::host::signal_end(pid, false); // gone already: fine
    }
    let deadline = Instant::now() + grace;
    while pids.iter().any(|&p| mcd::host::process_exists(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    for &pid in pids.iter().filter(|&&p| mcd::host::process_exists(p)) {
        let _ = mcd::host::signal_end(pid, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nft_counters_are_summed_over_every_rule() {
        // As nft 1.0.6 lists a table of two chains, each dropping with a counter.
        let listing = r#"{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
            {"table": {"family": "netdev", "name": "mcdloss", "handle": 1}},
            {"chain": {"family": "netdev", "table": "mcdloss", "name": "in0", "handle": 1, "type": "filter", "hook": "ingress", "prio": 0}},
            {"rule": {"family": "netdev", "table": "mcdloss", "chain": "in0", "handle": 2, "expr": [
                {"match": {"op": "==", "left": {"meta": {"key": "random"}}, "right": 0}},
                {"counter": {"packets": 12, "bytes": 720}}, {"drop": null}]}},
            {"rule": {"family": "netdev", "table": "mcdloss", "chain": "in1", "handle": 3, "expr": [
                {"counter": {"packets": 3, "bytes": 1}}, {"drop": null}]}}]}"#;
        assert_eq!(nft_counter_packets(listing).unwrap(), 15);
        assert!(nft_counter_packets("table netdev mcdloss { }").is_err(), "text is not read as no counters");
    }

    #[test]
    fn ip_lists_are_read_and_an_empty_output_is_an_empty_list() {
        let links: Vec<Link> =
            parse_list(r#"[{"ifindex":1,"ifname":"lo","flags":["UP"]},{"ifindex":7,"ifname":"mcdab0n1","link_netnsid":0}]"#).unwrap();
        assert_eq!(links.iter().map(|l| l.ifname.as_str()).collect::<Vec<_>>(), ["lo", "mcdab0n1"]);
        let none: Vec<Netns> = parse_list("").unwrap();
        assert!(none.is_empty());
        let spaces: Vec<Netns> = parse_list("[]\n").unwrap();
        assert!(spaces.is_empty());
        // Links without the asked address may come as empty objects.
        let holders =
            parse_list(r#"[{},{"ifname":"lo","addr_info":[]},{"ifname":"mcdabb0","addr_info":[{"family":"inet","local":"10.77.255.254"}]}]"#);
        assert_eq!(holding(holders.unwrap()), ["mcdabb0"]);
    }
}

//! Node numbering: the node list.
//!
//! As in the paper, a node number names a NIC address; here a node is a
//! (MAC, port) pair, so several processes on one host are several nodes. Node
//! `i` is line `i` of the node list (comments and blank lines do not count).
//!
//! ```text
//! # MAC on rail 0   [MAC on rail 1 ...]   [port]
//! 02:00:00:00:00:01  02:00:00:01:00:01     0
//! 02:00:00:00:00:02  02:00:00:01:00:02     0
//! 02:00:00:00:00:02  02:00:00:01:00:02     1   # a second process on host 2
//! ```
//!
//! A line holds one MAC per rail, then optionally the port (0 when left out).
//! The list comes from a file or from the environment ([`NodeList::from_env`]).

use std::collections::BTreeMap;
use std::path::Path;

use crate::wire::MacAddr;
pub use crate::wire::{NodeId, Port};
use crate::Error;

/// Environment variable holding the node list inline (lines separated by `;` or newlines).
pub const ENV_NODES: &str = "MCD_NODES";
/// Environment variable naming a node-list file.
pub const ENV_NODE_FILE: &str = "MCD_NODE_FILE";
/// The most nodes a job can have (node numbers are 16 bits on the wire).
pub const MAX_NODES: usize = u16::MAX as usize + 1;

/// The addresses of one node: its MAC on each rail, and its port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAddr {
    /// MAC address per rail (rail 0 first).
    pub macs: Vec<MacAddr>,
    /// The port the node's process holds (the same on every rail).
    pub port: Port,
}

/// The ordered list of a job's nodes.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NodeList {
    nodes: Vec<NodeAddr>,
}

impl NodeList {
    /// A node list from addresses in node order, checked as [`parse`](Self::parse)
    /// checks a file: at least one node and at most [`MAX_NODES`], every node
    /// with a MAC, no (rail-0 MAC, port) twice. An error names the offending
    /// node as `line` (node number + 1).
    pub fn new(nodes: Vec<NodeAddr>) -> Result<NodeList, Error> {
        NodeList::checked(nodes, "given to NodeList::new", |node| node + 1)
    }

    /// `nodes` as a list, if valid; `line_of(node)` is the node's line in `origin`.
    fn checked(nodes: Vec<NodeAddr>, origin: &str, line_of: impl Fn(NodeId) -> usize) -> Result<NodeList, Error> {
        let bad = |line: usize, reason: String| Error::NodeListLine { origin: origin.to_string(), line, reason };
        if nodes.is_empty() {
            return Err(bad(0, "the list names no node".into()));
        }
        if nodes.len() > MAX_NODES {
            return Err(bad(0, format!("{} nodes; at most {MAX_NODES}", nodes.len())));
        }
        let mut seen = BTreeMap::new();
        for (id, node) in nodes.iter().enumerate() {
            let Some(&mac) = node.macs.first() else {
                return Err(bad(line_of(id), "no MAC address (expected `MAC [MAC ...] [port]`)".into()));
            };
            if let Some(first) = seen.insert((mac, node.port), id) {
                return Err(bad(line_of(id), format!("{mac} port {} is already node {first}", node.port)));
            }
        }
        Ok(NodeList { nodes })
    }

    /// Parses node-list text; `origin` names it in errors (a path, or the variable).
    pub fn parse(text: &str, origin: &str) -> Result<NodeList, Error> {
        let (mut nodes, mut lines) = (Vec::new(), Vec::new());
        for (index, raw) in text.split(['\n', ';']).enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = |reason: String| Error::NodeListLine { origin: origin.to_string(), line: index + 1, reason };
            let mut macs = Vec::new();
            let mut port = None;
            for token in line.split_whitespace() {
                if port.is_some() {
                    return Err(bad(format!("unexpected `{token}` after the port")));
                }
                if let Ok(mac) = token.parse::<MacAddr>() {
                    macs.push(mac);
                } else if let Ok(p) = token.parse::<u16>() {
                    let p = Port::try_from(p).map_err(|_| bad(format!("port {p} is out of range 0..=255")))?;
                    port = Some(p);
                } else {
                    return Err(bad(format!("`{token}` is neither a MAC address nor a port number")));
                }
            }
            nodes.push(NodeAddr { macs, port: port.unwrap_or(0) });
            lines.push(index + 1);
        }
        NodeList::checked(nodes, origin, |node| lines[node])
    }

    /// Reads and parses a node-list file.
    pub fn from_file(path: &Path) -> Result<NodeList, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io { what: format!("reading node list {}", path.display()), source })?;
        NodeList::parse(&text, &path.display().to_string())
    }

    /// The node list from the environment: `MCD_NODES` (inline) or
    /// `MCD_NODE_FILE` (a path). `Ok(None)` when neither is set.
    pub fn from_env() -> Result<Option<NodeList>, Error> {
        if let Ok(text) = std::env::var(ENV_NODES) {
            return NodeList::parse(&text, ENV_NODES).map(Some);
        }
        if let Ok(path) = std::env::var(ENV_NODE_FILE) {
            return NodeList::from_file(Path::new(&path)).map(Some);
        }
        Ok(None)
    }

    /// Renders the list in the file format [`NodeList::parse`] reads.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            for mac in &node.macs {
                out.push_str(&mac.to_string());
                out.push(' ');
            }
            out.push_str(&node.port.to_string());
            out.push('\n');
        }
        out
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when the list is empty (only the default list is).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The addresses of node `id`.
    pub fn get(&self, id: NodeId) -> Option<&NodeAddr> {
        self.nodes.get(id)
    }

    /// All nodes in order.
    pub fn iter(&self) -> impl Iterator<Item = &NodeAddr> {
        self.nodes.iter()
    }

    /// The node with `mac` on rail 0 and port `port`.
    pub fn find(&self, mac: MacAddr, port: Port) -> Option<NodeId> {
        self.nodes.iter().position(|n| n.macs.first() == Some(&mac) && n.port == port)
    }

    /// The number of rails every node has an address on.
    pub fn rails(&self) -> usize {
        self.nodes.iter().map(|n| n.macs.len()).min().unwrap_or(0)
    }

    /// The nodes grouped by host: nodes with one rail-0 MAC share a NIC, so
    /// a host (on the virtual cluster, a namespace). Hosts are ordered by
    /// their first node, and each host's nodes by number, so every node
    /// computes the same grouping; the first node of each is its leader.
    pub fn hosts(&self) -> Vec<Vec<NodeId>> {
        let mut hosts: Vec<(MacAddr, Vec<NodeId>)> = Vec::new();
        for (id, node) in self.nodes.iter().enumerate() {
            let mac = node.macs.first().copied().unwrap_or_default();
            match hosts.iter_mut().find(|(m, _)| *m == mac) {
                Some((_, members)) => members.push(id),
                None => hosts.push((mac, vec![id])),
            }
        }
        hosts.into_iter().map(|(_, members)| members).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_macs_rails_ports_and_comments() {
        let list =
            NodeList::parse("# cluster\n02:00:00:00:00:01 02:00:00:01:00:01\n\n02:00:00:00:00:02 02:00:00:01:00:02 7 # host 2\n", "test").unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list.rails(), 2);
        assert_eq!(list.get(0).unwrap().port, 0);
        assert_eq!(list.get(1).unwrap().port, 7);
        assert_eq!(list.find("02:00:00:00:00:02".parse().unwrap(), 7), Some(1));
        assert_eq!(list.find("02:00:00:00:00:02".parse().unwrap(), 0), None);
    }

    #[test]
    fn inline_form_and_text_round_trip() {
        let list = NodeList::parse("02:00:00:00:00:01 1; 02:00:00:00:00:01 2", "MCD_NODES").unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(NodeList::parse(&list.to_text(), "again").unwrap(), list);
    }

    #[test]
    fn bad_lines_name_their_line_number() {
        let cases = [
            ("02:00:00:00:00:01\nnot-a-mac\n", 2, "neither"),
            ("02:00:00:00:00:01 300\n", 1, "out of range"),
            ("02:00:00:00:00:01 1 2\n", 1, "after the port"),
            ("# c\n\n3\n", 3, "no MAC"),
            ("02:00:00:00:00:01\n02:00:00:00:00:01 0\n", 2, "already node 0"),
        ];
        for (text, line, needle) in cases {
            let err = NodeList::parse(text, "nodes.txt").unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, Error::NodeListLine { line: l, .. } if l == line), "{text:?}: {msg}");
            assert!(msg.contains(needle) && msg.contains("nodes.txt"), "{msg}");
        }
        assert!(matches!(NodeList::parse("# nothing\n", "x"), Err(Error::NodeListLine { line: 0, reason, .. }) if reason.contains("no node")));
    }

    #[test]
    fn new_checks_what_parse_checks() {
        let node = |last: u8, port: Port| NodeAddr { macs: vec![MacAddr([2, 0, 0, 0, 0, last])], port };
        let list = NodeList::new(vec![node(1, 0), node(1, 1), node(2, 0)]).unwrap();
        assert_eq!(list.find(MacAddr([2, 0, 0, 0, 0, 1]), 1), Some(1));
        let reason = |nodes| match NodeList::new(nodes) {
            Err(Error::NodeListLine { line, reason, .. }) => (line, reason),
            other => panic!("{other:?}"),
        };
        let (line, why) = reason(vec![node(1, 0), NodeAddr { macs: vec![], port: 3 }]);
        assert!(line == 2 && why.contains("no MAC"), "{line}: {why}");
        let (line, why) = reason(vec![node(1, 0), node(2, 0), node(1, 0)]);
        assert!(line == 3 && why.contains("already node 0"), "{line}: {why}");
        assert!(reason(vec![]).1.contains("no node"));
        // Node numbers are 16 bits on the wire: one node more must not wrap to node 0.
        let too_many = (0..=MAX_NODES).map(|i| NodeAddr { macs: vec![MacAddr([2, 0, 0, (i >> 16) as u8, (i >> 8) as u8, i as u8])], port: 0 });
        let (line, why) = reason(too_many.collect());
        assert!(line == 0 && why.contains("at most 65536"), "{why}");
        assert_eq!(NodeList::default().find(MacAddr([2, 0, 0, 0, 0, 1]), 0), None);
    }

    #[test]
    fn nodes_sharing_a_mac_are_one_host_led_by_the_lowest_node() {
        let list = NodeList::parse("02:00:00:00:00:01 0\n02:00:00:00:00:02 0\n02:00:00:00:00:01 1\n02:00:00:00:00:03\n02:00:00:00:00:02 1\n", "test")
            .unwrap();
        assert_eq!(list.hosts(), vec![vec![0, 2], vec![1, 4], vec![3]]);
    }
}

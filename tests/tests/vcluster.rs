//! The virtual cluster tool itself: idempotent `up`, repair, shape checks,
//! `run` across nodes, and `down` leaving nothing behind. Needs root.

use std::process::Command;
use std::time::Duration;

use mcd_vcluster::{Cluster, ClusterSpec, LossPoint, UpOutcome};

#[test]
fn up_is_idempotent_repairs_refuses_other_shapes_and_down_leaves_nothing() {
    let name = "vct";
    Cluster::down_by_name(name).unwrap();
    let spec = ClusterSpec::new(name, 3).rails(2).loss(10.0, LossPoint::Port);
    let (cluster, outcome) = Cluster::up(spec.clone()).unwrap();
    assert_eq!(outcome, UpOutcome::Created);
    assert_eq!(Cluster::up(spec.clone()).unwrap().1, UpOutcome::AlreadyUp);

    // Break a piece: up puts it back.
    let status = Command::new("ip").args(["link", "del", &format!("mcd{name}1n2")]).status().unwrap();
    assert!(status.success());
    assert!(matches!(Cluster::up(spec.clone()).unwrap().1, UpOutcome::Repaired(n) if n > 0));
    let eth1 = Command::new("ip").args(["netns", "exec", &cluster.namespace(2), "ip", "link", "show", "eth1"]).output().unwrap();
    assert!(eth1.status.success(), "eth1 of node 2 is back");

    let err = Cluster::up(ClusterSpec::new(name, 4)).unwrap_err().to_string();
    assert!(err.contains("3 node(s)") && err.contains("down"), "{err}");

    // run: every node, its own rank and the node list, exit codes collected.
    let script = "test -r \"$MCD_NODE_FILE\" && echo \"$MCD_RANK/$MCD_SIZE $MCD_IFACES\" && exit $MCD_RANK";
    let outcomes = cluster.run(&["sh".into(), "-c".into(), script.into()], Duration::from_secs(20)).unwrap();
    for o in &outcomes {
        assert_eq!(o.stdout.trim(), format!("{}/3 eth0,eth1", o.node));
        assert_eq!(o.code, Some(o.node as i32));
    }
    let slow = cluster.run(&["sleep".into(), "5".into()], Duration::from_millis(300)).unwrap();
    assert!(slow.iter().all(|o| o.timed_out && !o.success()), "the timeout kills what still runs");

    cluster.down().unwrap();
    assert_eq!(Cluster::leftovers(name).unwrap(), Vec::<String>::new());
    let tables = Command::new("nft").args(["list", "tables"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&tables.stdout).contains(&format!("mcd_{name}")), "the bridge loss table is gone");
    assert!(Cluster::attach(name).unwrap_err().to_string().contains("up"), "no state left either");
}

#[test]
fn an_outsider_sits_on_the_switch_outside_the_node_list_and_goes_with_the_cluster() {
    let name = "aout";
    Cluster::down_by_name(name).unwrap();
    let (cluster, _) = Cluster::up(ClusterSpec::new(name, 2)).unwrap();
    let outsider = cluster.plug_outsider(0).unwrap();
    assert_eq!(outsider.namespace, cluster.namespace(2), "numbered after the nodes");
    assert!(!cluster.node_list().iter().any(|n| n.macs.contains(&outsider.macs[0])), "in no node list");
    // On the nodes' switch: its link is a port of the bridge.
    let ports = Command::new("ip").args(["-o", "link", "show", "master", &format!("mcd{name}b0")]).output().unwrap();
    let ports = String::from_utf8_lossy(&ports.stdout);
    assert!(ports.contains(&format!("mcd{name}0n2")), "not a port of the switch: {ports}");
    assert!(cluster.plug_outsider(mcd_vcluster::MAX_OUTSIDERS).is_err());
    cluster.down().unwrap();
    assert_eq!(Cluster::leftovers(name).unwrap(), Vec::<String>::new());
}

#[test]
fn run_gives_every_job_a_fresh_key_file_of_its_own_and_removes_it() {
    // Issue 27: the virtual cluster is a launcher, so it provisions a secret
    // for every job it starts (`mcd-vcluster run` is `Cluster::run`).
    let c = mcd_integration_tests::cluster(ClusterSpec::new("vkey", 2));
    let show = "echo \"$MCD_KEY_FILE\"; stat -c %a \"$MCD_KEY_FILE\"; cat \"$MCD_KEY_FILE\"";
    let job = |what: &str| {
        let outcomes = c.run(&["sh".to_string(), "-c".to_string(), show.to_string()], Duration::from_secs(20)).unwrap();
        for o in &outcomes {
            assert!(o.code == Some(0), "{what}, node {}: {}{}", o.node, o.stdout, o.stderr);
        }
        let lines: Vec<Vec<String>> = outcomes.iter().map(|o| o.stdout.lines().map(str::to_string).collect()).collect();
        assert_eq!(lines[0], lines[1], "{what}: both nodes of the job get the same key file");
        assert_eq!(lines[0].len(), 3, "{what}: path, mode, key: {:?}", lines[0]);
        assert_eq!(lines[0][1], "600", "{what}: the key file's mode");
        assert_eq!(lines[0][2].trim().len(), 32, "{what}: 32 hex digits");
        (lines[0][0].clone(), lines[0][2].clone())
    };
    let (first_path, first_key) = job("job 1");
    let (second_path, second_key) = job("job 2");
    assert_ne!(first_key, second_key, "each job gets a secret of its own");
    assert!(!std::path::Path::new(&first_path).exists() && !std::path::Path::new(&second_path).exists(), "removed after the job");
    let cluster_key = std::fs::read_to_string(c.key_file()).unwrap();
    assert!(first_key != cluster_key.trim() && second_key != cluster_key.trim(), "not the cluster's own key file");
}

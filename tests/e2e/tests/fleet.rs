//! The local fleet differs the way real fleets differ, and Flotilla copes: every cluster has its
//! own CAs, service and pod ranges, nodes and region, one member runs an older Kubernetes minor,
//! the apiservers allow what real ones allow. On that fleet the splitter divides by capacity into
//! unequal shares, and what the hub's own Kubernetes made — the root CA bundle, the `default`
//! ServiceAccount, token Secrets, a Service's allocated addresses and node ports — stays on the hub.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use flotilla_api::Placement;
use flotilla_e2e::fleet::Fleet;
use flotilla_e2e::{
    ClusterInfo, Environment, Seen, TestNamespace, client_from, parse_version, wait_for,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret, Service, ServiceAccount};
use kube::api::{ApiResource, DynamicObject, ListParams, PostParams};
use kube::config::Kubeconfig;
use kube::core::GroupVersionKind;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// An IPv4 CIDR: its network address and prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Cidr {
    network: u32,
    bits: u32,
}

impl Cidr {
    fn parse(s: &str) -> Result<Self> {
        let (ip, bits) = s
            .split_once('/')
            .ok_or_else(|| anyhow!("{s:?} is not a CIDR"))?;
        let ip: std::net::Ipv4Addr = ip.parse().with_context(|| format!("CIDR {s:?}"))?;
        let bits: u32 = bits.parse().with_context(|| format!("CIDR {s:?}"))?;
        ensure!(bits <= 32, "CIDR {s:?}");
        Ok(Self {
            network: u32::from(ip) & Self::mask(bits),
            bits,
        })
    }

    fn mask(bits: u32) -> u32 {
        u32::MAX.checked_shl(32 - bits).unwrap_or(0)
    }

    fn contains(&self, ip: &str) -> bool {
        ip.parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| u32::from(ip) & Self::mask(self.bits) == self.network)
    }

    fn overlaps(&self, other: &Self) -> bool {
        let bits = self.bits.min(other.bits);
        self.network & Self::mask(bits) == other.network & Self::mask(bits)
    }
}

/// The service CIDRs of a cluster, from its ServiceCIDR objects (the apiserver writes
/// `kubernetes` from `--service-cluster-ip-range`).
async fn service_cidrs(client: &Client) -> Result<Vec<Cidr>> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("networking.k8s.io", "v1", "ServiceCIDR"),
        "servicecidrs",
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let mut out = Vec::new();
    for o in api.list(&ListParams::default()).await?.items {
        for c in o.data["spec"]["cidrs"].as_array().into_iter().flatten() {
            out.push(Cidr::parse(c.as_str().unwrap_or_default())?);
        }
    }
    ensure!(!out.is_empty(), "no ServiceCIDR found");
    Ok(out)
}

/// Waits until the cluster's `kube-root-ca.crt` in `ns` exists; returns its `ca.crt`.
async fn root_ca_bundle(cluster: &ClusterInfo, ns: &str) -> Result<String> {
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client().await?, ns);
    wait_for(
        &format!("kube-root-ca.crt in {ns} of {}", cluster.name),
        Duration::from_secs(60),
        || async {
            Ok(
                match cms
                    .get_opt("kube-root-ca.crt")
                    .await?
                    .and_then(|c| c.data)
                    .and_then(|d| d.get("ca.crt").cloned())
                {
                    Some(pem) => Seen::Done(pem),
                    None => Seen::not_yet("not published yet"),
                },
            )
        },
    )
    .await
}

/// Runs `openssl` with `args` in `dir`.
async fn openssl(dir: &std::path::Path, args: &[&str]) -> Result<()> {
    let out = tokio::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .await
        .context("running openssl")?;
    ensure!(
        out.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A client for `target` that presents a client certificate for user `user`, signed by the
/// client CA of `signer` (the CA its controller-manager signs approved CSRs with).
async fn client_with_certificate_of(
    target: &ClusterInfo,
    signer: &ClusterInfo,
    user: &str,
) -> Result<Client> {
    use base64::Engine as _;
    let ca_dir = signer.run_dir_files()?;
    let dir = flotilla_e2e::scratch_dir().join(format!("cert-{}-{}", signer.name, user));
    std::fs::create_dir_all(&dir)?;
    let ca_crt = ca_dir.join("client-ca.crt").to_string_lossy().into_owned();
    let ca_key = ca_dir.join("client-ca.key").to_string_lossy().into_owned();
    openssl(
        &dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN={user}"),
            "-keyout",
            "client.key",
            "-out",
            "client.csr",
        ],
    )
    .await?;
    // Extensions make it an X.509 v3 certificate (rustls refuses v1).
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n")?;
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-extfile",
            "client.ext",
            "-in",
            "client.csr",
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-CAserial",
            "client.srl",
            "-days",
            "1",
            "-out",
            "client.crt",
        ],
    )
    .await?;
    let b64 = |f: &str| -> Result<String> {
        Ok(base64::engine::general_purpose::STANDARD.encode(std::fs::read(dir.join(f))?))
    };
    let mut kubeconfig: Kubeconfig = target.read_kubeconfig()?;
    for auth in &mut kubeconfig.auth_infos {
        if let Some(info) = auth.auth_info.as_mut() {
            info.token = None;
            info.client_certificate_data = Some(b64("client.crt")?);
            info.client_key_data = Some(b64("client.key")?.into());
        }
    }
    client_from(kubeconfig).await
}

/// The answer of `target` to a list of namespaces with the given client: `Ok` or the HTTP code.
async fn namespaces_answer(client: Client) -> Result<std::result::Result<(), u16>> {
    match Api::<Namespace>::all(client)
        .list(&ListParams::default().limit(1))
        .await
    {
        Ok(_) => Ok(Ok(())),
        Err(kube::Error::Api(s)) => Ok(Err(s.code)),
        Err(e) => bail!("expected an HTTP answer, got {e}"),
    }
}

#[tokio::test]
async fn every_cluster_has_its_own_cas_ranges_nodes_and_version() -> Result<()> {
    let env = Environment::get();
    let members = env.require_members(3)?;
    let clusters: Vec<&ClusterInfo> = env.all_clusters().collect();
    let ns = TestNamespace::create("fleet", &clusters).await?;

    // Serving CAs: each cluster's kube-root-ca.crt is its own CA, and no two are the same.
    let mut bundles: BTreeMap<String, String> = BTreeMap::new();
    for c in &clusters {
        let bundle = root_ca_bundle(c, ns.name()).await?;
        ensure!(
            bundle.trim() == c.serving_ca()?.trim(),
            "kube-root-ca.crt of {} is not the CA its kubeconfig trusts",
            c.name
        );
        if let Some((other, _)) = bundles.iter().find(|(_, b)| **b == bundle) {
            bail!("{} and {other} publish the same kube-root-ca.crt", c.name);
        }
        bundles.insert(c.name.clone(), bundle);
    }
    // ... and one cluster's CA does not verify another's apiserver.
    let (hub, member) = (&env.hub, &members[0]);
    let mut foreign = member.read_kubeconfig()?;
    for cluster in &mut foreign.clusters {
        if let Some(c) = cluster.cluster.as_mut() {
            use base64::Engine as _;
            c.certificate_authority_data =
                Some(base64::engine::general_purpose::STANDARD.encode(hub.serving_ca()?));
        }
    }
    match Api::<Namespace>::all(client_from(foreign).await?)
        .list(&ListParams::default().limit(1))
        .await
    {
        Err(kube::Error::Api(s)) => bail!(
            "{} answered ({}) over TLS verified with the hub's CA",
            member.name,
            s.code
        ),
        Err(_) => {}
        Ok(_) => bail!("{}'s apiserver was verified with the hub's CA", member.name),
    }

    // Client CAs: a certificate signed by one cluster's client CA is authenticated there (403:
    // known, but without rights) and unknown (401) everywhere else.
    for (signer, others) in [
        (hub, vec![&members[0], &members[1]]),
        (&members[0], vec![hub, &members[1]]),
    ] {
        let own = namespaces_answer(client_with_certificate_of(signer, signer, "e2e-probe").await?)
            .await?;
        ensure!(
            own == Err(403),
            "a certificate from {}'s client CA in {}: expected 403 (authenticated, no rights), got {own:?}",
            signer.name,
            signer.name
        );
        for other in others {
            let answer =
                namespaces_answer(client_with_certificate_of(other, signer, "e2e-probe").await?)
                    .await?;
            ensure!(
                answer == Err(401),
                "a certificate from {}'s client CA in {}: expected 401, got {answer:?}",
                signer.name,
                other.name
            );
        }
    }

    // Service CIDRs: one per cluster, none overlapping; the kubernetes Service's address is in
    // its own cluster's range.
    let mut ranges: Vec<(String, Cidr)> = Vec::new();
    for c in &clusters {
        let client = c.client().await?;
        let cidrs = service_cidrs(&client).await?;
        let ip = Api::<Service>::namespaced(client, "default")
            .get("kubernetes")
            .await?
            .spec
            .and_then(|s| s.cluster_ip)
            .unwrap_or_default();
        ensure!(
            cidrs.iter().any(|r| r.contains(&ip)),
            "the kubernetes Service of {} has {ip}, outside its service CIDRs {cidrs:?}",
            c.name
        );
        for r in cidrs {
            if let Some((other, _)) = ranges.iter().find(|(_, o)| o.overlaps(&r)) {
                bail!("the service CIDRs of {} and {other} overlap", c.name);
            }
            ranges.push((c.name.clone(), r));
        }
    }

    // Nodes: members differ in count and allocatable; each node has a region and a zone and a
    // pod CIDR (from the member's node-ipam controller) inside its member's own range.
    let mut capacity: BTreeMap<String, (usize, i64)> = BTreeMap::new();
    let mut regions: BTreeSet<String> = BTreeSet::new();
    let mut pod_ranges: Vec<(String, Cidr)> = Vec::new();
    for m in members.iter().take(3) {
        let nodes: Api<Node> = Api::all(m.client().await?);
        let list = wait_for(
            &format!("every node of {} to have a pod CIDR", m.name),
            Duration::from_secs(60),
            || async {
                let list = nodes.list(&ListParams::default()).await?.items;
                Ok(
                    if !list.is_empty()
                        && list
                            .iter()
                            .all(|n| n.spec.as_ref().and_then(|s| s.pod_cidr.as_ref()).is_some())
                    {
                        Seen::Done(list)
                    } else {
                        Seen::not_yet(format!("{} nodes, not all with spec.podCIDR", list.len()))
                    },
                )
            },
        )
        .await?;
        let mut pods = 0;
        for n in &list {
            let l = n.labels();
            let region = l.get("topology.kubernetes.io/region");
            ensure!(
                region.is_some() && l.contains_key("topology.kubernetes.io/zone"),
                "node {} has no region or zone label: {l:?}",
                n.name_any()
            );
            regions.extend(region.cloned());
            pods += n
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .and_then(|a| a.get("pods"))
                .and_then(|q| q.0.parse::<i64>().ok())
                .unwrap_or(0);
            let cidr = Cidr::parse(
                n.spec
                    .as_ref()
                    .and_then(|s| s.pod_cidr.as_deref())
                    .unwrap_or_default(),
            )?;
            if let Some((other, _)) = pod_ranges
                .iter()
                .find(|(owner, o)| *owner != m.name && o.overlaps(&cidr))
            {
                bail!("pod CIDRs of {} and {other} overlap", m.name);
            }
            if let Some((other, _)) = ranges.iter().find(|(_, o)| o.overlaps(&cidr)) {
                bail!(
                    "a pod CIDR of {} overlaps the service CIDR of {other}",
                    m.name
                );
            }
            pod_ranges.push((m.name.clone(), cidr));
        }
        capacity.insert(m.name.clone(), (list.len(), pods));
    }
    let distinct: BTreeSet<_> = capacity.values().map(|(_, p)| *p).collect();
    ensure!(
        distinct.len() == capacity.len(),
        "members must differ in allocatable pods (so capacity division is not even): {capacity:?}"
    );
    let counts: BTreeSet<_> = capacity.values().map(|(n, _)| *n).collect();
    ensure!(
        counts.len() > 1,
        "members must differ in node count: {capacity:?}"
    );
    ensure!(regions.len() > 1, "members must span regions: {regions:?}");

    // Versions: exactly one of the standard members runs an older minor than the hub.
    let hub_version = hub.version().await?;
    let mut older = Vec::new();
    for m in members.iter().take(3) {
        let v = m.version().await?;
        if v != hub_version {
            ensure!(
                parse_version(&v)? < parse_version(&hub_version)?,
                "{} runs {v}, newer than the hub's {hub_version}",
                m.name
            );
            older.push(format!("{}={v}", m.name));
        }
    }
    ensure!(
        older.len() == 1,
        "exactly one of the three members runs an older Kubernetes than the hub ({hub_version}): {older:?}"
    );

    // The apiservers allow privileged containers, as kubeadm and managed clusters do.
    for c in &clusters {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "privileged", "namespace": ns.name()},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                     "securityContext": {"privileged": true}}]}});
        match flotilla_e2e::api::create(&c.client().await?, &pod, true).await? {
            Ok(_) => {}
            Err(e) => bail!("a privileged pod is refused by {}: {e}", c.name),
        }
    }
    Ok(())
}

/// Allocatable pods of each test Cluster, as registration reports them.
async fn cluster_capacity(fleet: &Fleet) -> Result<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for (name, _) in &fleet.members {
        let pods = fleet
            .clusters
            .get(name)
            .await?
            .status
            .and_then(|s| s.allocatable.get("pods").cloned())
            .and_then(|q| q.0.parse::<u64>().ok())
            .ok_or_else(|| anyhow!("Cluster {name} reports no allocatable pods"))?;
        out.insert(name.clone(), pods);
    }
    Ok(out)
}

/// Places Deployment `web` of `replicas` in the fleet's namespace, divided by capacity among
/// `clusters` (`None`: every member), and waits until each member runs its share, Available.
/// Returns the shares by member.
async fn divide_by_capacity(
    fleet: &Fleet,
    clusters: Option<&[&String]>,
    replicas: u64,
) -> Result<BTreeMap<String, u64>> {
    let ns = fleet.ns.name();
    let affinity = clusters.map(|c| json!({"clusterNames": c}));
    let placement: Placement = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
        "metadata": {"name": "by-capacity"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                 "clusterAffinity": affinity,
                 "replicaScheduling": {"type": "Divided", "division": "Capacity"}},
    }))?;
    Api::<Placement>::namespaced(fleet.hub.clone(), ns)
        .create(&PostParams::default(), &placement)
        .await?;
    // Probes and volumes of kinds whose schema grew after v1.34: what the hub's apiserver fills
    // in for them must not keep the Deployment from the older member.
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                  "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
                                  "livenessProbe": {"grpc": {"port": 9090}},
                                  "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"},
                                                   {"name": "info", "mountPath": "/etc/info"}]}],
                                  "volumes": [{"name": "scratch", "emptyDir": {}},
                                              {"name": "info", "downwardAPI": {"items": [
                                                  {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}}}
    }))?;
    Api::<Deployment>::namespaced(fleet.hub.clone(), ns)
        .create(&PostParams::default(), &deployment)
        .await?;
    wait_for(
        "the Deployment divided by capacity and Available in every member",
        Duration::from_secs(120),
        || async {
            let mut shares = BTreeMap::new();
            for (cluster, client) in &fleet.members {
                let d = Api::<Deployment>::namespaced(client.clone(), ns)
                    .get_opt("web")
                    .await?;
                let (want, available) = d
                    .map(|d| {
                        (
                            d.spec.replicas.unwrap_or(0),
                            d.status.and_then(|s| s.available_replicas).unwrap_or(0),
                        )
                    })
                    .unwrap_or_default();
                if want != available {
                    return Ok(Seen::not_yet(format!(
                        "{cluster}: {available}/{want} available"
                    )));
                }
                shares.insert(cluster.clone(), u64::try_from(want).unwrap_or(0));
            }
            Ok(if shares.values().sum::<u64>() == replicas {
                Seen::Done(shares)
            } else {
                Seen::not_yet(format!("shares {shares:?}"))
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))
}

/// What each member's capacity counts for in a division: no more than the others' together.
fn bounded(capacity: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let total: u64 = capacity.values().sum();
    capacity
        .iter()
        .map(|(c, n)| (c.clone(), (*n).min(total - n)))
        .collect()
}

#[tokio::test]
async fn capacity_division_over_unequal_members_gives_unequal_shares() -> Result<()> {
    let fleet = Fleet::builder("capacity").start().await?;
    let capacity = bounded(&cluster_capacity(&fleet).await?);
    let total_capacity: u64 = capacity.values().sum();
    let replicas = 12_u64;
    let shares = divide_by_capacity(&fleet, None, replicas).await?;
    // Each share is the member's quota rounded down or up (largest remainder).
    for (cluster, share) in &shares {
        let quota = replicas as f64 * capacity[cluster] as f64 / total_capacity as f64;
        ensure!(
            (*share as f64 - quota).abs() < 1.0,
            "{cluster} has {share} of {replicas} replicas, its capacity {} of {total_capacity} gives a quota of {quota:.2}: {shares:?}",
            capacity[cluster]
        );
    }
    let distinct: BTreeSet<_> = shares.values().collect();
    ensure!(
        distinct.len() > 1,
        "unequal members must get unequal shares: capacity {capacity:?}, shares {shares:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_member_that_reports_most_of_the_capacity_takes_no_more_than_half() -> Result<()> {
    // What a member reports of its capacity (a pull agent writes it; a push member's nodes say
    // it) is not proof: one that claims, or has, more than the others together would otherwise
    // take most of a workload, and a lying one would run none of it.
    let fleet = Fleet::builder("capacity-claim").start().await?;
    let capacity = cluster_capacity(&fleet).await?;
    let biggest = capacity
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(c, _)| c)
        .context("members")?;
    let smallest = capacity
        .iter()
        .min_by_key(|(_, n)| **n)
        .map(|(c, _)| c)
        .context("members")?;
    ensure!(
        capacity[biggest] > capacity[smallest],
        "the environment's members differ in capacity: {capacity:?}"
    );
    let replicas = 12_u64;
    let shares = divide_by_capacity(&fleet, Some(&[biggest, smallest]), replicas).await?;
    ensure!(
        shares[biggest] == replicas / 2 && shares[smallest] == replicas / 2,
        "{biggest} reports {} pods, {smallest} {}: each takes half, not {shares:?}",
        capacity[biggest],
        capacity[smallest]
    );
    Ok(())
}

#[tokio::test]
async fn what_the_hubs_kubernetes_made_stays_on_the_hub() -> Result<()> {
    let env = Environment::get();
    let fleet = Fleet::builder("hub-made").start().await?;
    let ns = fleet.ns.name();
    let hub = &fleet.hub;

    // What the hub's controller-manager makes in every namespace, and a legacy token Secret that
    // its token controller fills.
    root_ca_bundle(&env.hub, ns).await?;
    let sas: Api<ServiceAccount> = Api::namespaced(hub.clone(), ns);
    wait_for(
        "the default ServiceAccount on the hub",
        Duration::from_secs(60),
        || async {
            Ok(match sas.get_opt("default").await? {
                Some(_) => Seen::Done(()),
                None => Seen::not_yet("none yet"),
            })
        },
    )
    .await?;
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), ns);
    let token: Secret = serde_json::from_value(json!({
        "metadata": {"name": "legacy-token", "annotations": {"kubernetes.io/service-account.name": "default"}},
        "type": "kubernetes.io/service-account-token"
    }))?;
    secrets.create(&PostParams::default(), &token).await?;
    wait_for(
        "the hub's token controller to fill legacy-token",
        Duration::from_secs(60),
        || async {
            let s = secrets.get("legacy-token").await?;
            Ok(
                if s.data.as_ref().is_some_and(|d| d.contains_key("token")) {
                    Seen::Done(())
                } else {
                    Seen::not_yet("no token yet")
                },
            )
        },
    )
    .await?;

    // A user's ConfigMap, and a NodePort Service with one allocated and one chosen node port.
    let chosen = 30000 + (i32::from_str_radix(&flotilla_e2e::random_suffix()[..2], 36)? % 2700);
    let objects = [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": ns},
               "data": {"a": "b"}}),
        // A workload whose template refers to the hub-made objects: they must not follow it.
        // (Three replicas, so that the Placement's even division gives every member one.)
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "uses-hub-ca", "namespace": ns},
               "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "uses-hub-ca"}},
                        "template": {"metadata": {"labels": {"app": "uses-hub-ca"}}, "spec": {
                            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                            "volumes": [
                                {"name": "ca", "projected": {"sources": [{"configMap": {"name": "kube-root-ca.crt"}}]}},
                                {"name": "token", "secret": {"secretName": "legacy-token", "optional": true}}]}}}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": ns},
               "spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": [
                   {"name": "http", "port": 80, "targetPort": 8080},
                   {"name": "admin", "port": 81, "nodePort": chosen}]}}),
    ];
    for o in &objects {
        flotilla_e2e::api::apply(hub, o, false).await??;
    }
    // What a hub controller would make for the user's ConfigMap (its controller owner).
    let settings_uid = Api::<ConfigMap>::namespaced(hub.clone(), ns)
        .get("settings")
        .await?
        .uid()
        .unwrap_or_default();
    flotilla_e2e::api::apply(
        hub,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "controlled", "namespace": ns, "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "settings",
                     "uid": settings_uid, "controller": true}]},
                "data": {"made": "for settings"}}),
        false,
    )
    .await??;
    let hub_service = Api::<Service>::namespaced(hub.clone(), ns)
        .get("web")
        .await?;
    let hub_spec = hub_service.spec.clone().unwrap_or_default();
    let hub_ip = hub_spec.cluster_ip.clone().unwrap_or_default();
    let allocated = hub_spec
        .ports
        .iter()
        .flatten()
        .find(|p| p.port == 80)
        .and_then(|p| p.node_port)
        .ok_or_else(|| anyhow!("the hub allocated no node port: {hub_spec:?}"))?;

    // Everything in the namespace, duplicated.
    let placement: Placement = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
        "metadata": {"name": "everything"}, "spec": {}
    }))?;
    Api::<Placement>::namespaced(hub.clone(), ns)
        .create(&PostParams::default(), &placement)
        .await?;

    // A fleet registers the environment's members in order.
    for ((cluster, client), info) in fleet.members.iter().zip(&env.members) {
        let services: Api<Service> = Api::namespaced(client.clone(), ns);
        let service = wait_for(
            &format!("Service web, ConfigMap settings and Deployment uses-hub-ca in {cluster}"),
            Duration::from_secs(90),
            || async {
                let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
                    .get_opt("settings")
                    .await?;
                let d = Api::<Deployment>::namespaced(client.clone(), ns)
                    .get_opt("uses-hub-ca")
                    .await?;
                Ok(match (services.get_opt("web").await?, cm, d) {
                    (Some(s), Some(_), Some(_)) => Seen::Done(s),
                    (s, c, d) => Seen::not_yet(format!(
                        "service: {}, configmap: {}, deployment: {}",
                        s.is_some(),
                        c.is_some(),
                        d.is_some()
                    )),
                })
            },
        )
        .await
        .map_err(|e| e.context(fleet.splitter.log()))?;
        let spec = service.spec.unwrap_or_default();
        let ip = spec.cluster_ip.clone().unwrap_or_default();
        let ranges = service_cidrs(client).await?;
        ensure!(
            ip != hub_ip && ranges.iter().any(|r| r.contains(&ip)),
            "Service web in {cluster} has cluster IP {ip} (the hub's is {hub_ip}); it must come from the member's own range {ranges:?}"
        );
        let port = |n: i32| {
            spec.ports
                .iter()
                .flatten()
                .find(|p| p.port == n)
                .and_then(|p| p.node_port)
        };
        ensure!(
            port(81) == Some(chosen),
            "the node port the user chose ({chosen}) reaches {cluster}: {:?}",
            spec.ports
        );
        ensure!(
            port(80).is_some(),
            "{cluster} allocated a node port for port 80"
        );

        // The Works of the namespace on this member: none for what Kubernetes made, and the
        // Service's without the hub's address or allocated node port.
        let ours = flotilla_e2e::api::works_from(hub, cluster, ns).await?;
        let sources: BTreeSet<String> = ours
            .iter()
            .flat_map(|w| w.spec.manifests.iter())
            .map(|m| {
                format!(
                    "{}/{}",
                    m.types
                        .as_ref()
                        .map(|t| t.kind.as_str())
                        .unwrap_or_default(),
                    m.metadata.name.as_deref().unwrap_or_default()
                )
            })
            .collect();
        for never in [
            "ConfigMap/kube-root-ca.crt",
            "ServiceAccount/default",
            "Secret/legacy-token",
            "ConfigMap/controlled",
        ] {
            ensure!(
                !sources.contains(never),
                "{never} of the hub was placed on {cluster}: Works for {sources:?}"
            );
        }
        ensure!(
            sources.contains("ConfigMap/settings")
                && sources.contains("Service/web")
                && sources.contains("Deployment/uses-hub-ca"),
            "the user's objects are placed on {cluster}: Works for {sources:?}"
        );
        let manifest = ours
            .iter()
            .flat_map(|w| w.spec.manifests.iter())
            .find(|m| {
                m.types.as_ref().is_some_and(|t| t.kind == "Service")
                    && m.metadata.name.as_deref() == Some("web")
            })
            .map(serde_json::to_value)
            .transpose()?
            .unwrap_or_default();
        ensure!(
            manifest["spec"].get("clusterIP").is_none()
                && manifest["spec"].get("clusterIPs").is_none(),
            "the Work of Service web on {cluster} carries the hub's address: {}",
            manifest["spec"]
        );
        let manifest_ports = manifest["spec"]["ports"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        ensure!(
            manifest_ports
                .iter()
                .all(|p| p["nodePort"].as_i64() != Some(i64::from(allocated))),
            "the Work of Service web on {cluster} carries the node port the hub allocated ({allocated}): {manifest_ports:?}"
        );

        // The member's own CA bundle is untouched.
        let bundle = root_ca_bundle(info, ns).await?;
        ensure!(
            bundle.trim() == info.serving_ca()?.trim(),
            "kube-root-ca.crt of {cluster} ({}) is no longer the member's own CA",
            info.name
        );
    }
    Ok(())
}

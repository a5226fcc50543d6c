//! The load of `hack/bench.sh splitter`: how long a Deployment takes to be Available when it is
//! applied to the hub and divided over the members, against the same Deployment applied straight
//! into one member, alternating, in the same run.
//!
//! Usage: bench_place <hub-kubeconfig> <member-kubeconfig> <namespace> <replicas> <runs>
//! The namespace must exist on the hub with a Placement that divides Deployments; it is created
//! in the member. Prints one line per path: `<path> <median> <min> <max>` (seconds).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::json;

async fn client(path: &str) -> Result<Client> {
    let kubeconfig = Kubeconfig::read_from(path).with_context(|| format!("reading {path}"))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

fn deployment(name: &str, replicas: i32) -> Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}}
    }))?)
}

/// Seconds from creating `name` until it reports `replicas` available and `Available=True`.
async fn time_to_available(api: &Api<Deployment>, name: &str, replicas: i32) -> Result<f64> {
    let started = Instant::now();
    api.create(&PostParams::default(), &deployment(name, replicas)?)
        .await?;
    loop {
        let status = api.get(name).await?.status.unwrap_or_default();
        let available = status.conditions.iter().flatten().any(|c| {
            c.type_.as_deref() == Some("Available") && c.status.as_deref() == Some("True")
        });
        if available && status.available_replicas == Some(replicas) {
            return Ok(started.elapsed().as_secs_f64());
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!("{name} was not Available within 300 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn summary(mut xs: Vec<f64>) -> (f64, f64, f64) {
    xs.sort_by(f64::total_cmp);
    (xs[xs.len() / 2], xs[0], xs[xs.len() - 1])
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, hub, member, namespace, replicas, runs] = args.as_slice() else {
        bail!(
            "usage: bench_place <hub-kubeconfig> <member-kubeconfig> <namespace> <replicas> <runs>"
        );
    };
    let replicas: i32 = replicas.parse()?;
    let runs: usize = runs.parse()?;
    let hub = client(hub).await?;
    let member = client(member).await?;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}}))?;
    match Api::<Namespace>::all(member.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let direct: Api<Deployment> = Api::namespaced(member, namespace);
    let placed: Api<Deployment> = Api::namespaced(hub, namespace);
    let (mut d, mut h) = (Vec::new(), Vec::new());
    for i in 0..runs {
        // Alternating, so both paths see the same machine.
        d.push(time_to_available(&direct, &format!("direct-{i}"), replicas).await?);
        h.push(time_to_available(&placed, &format!("placed-{i}"), replicas).await?);
        direct
            .delete(&format!("direct-{i}"), &DeleteParams::default())
            .await?;
        placed
            .delete(&format!("placed-{i}"), &DeleteParams::default())
            .await?;
    }
    for (path, xs) in [("direct", d), ("hub", h)] {
        let (median, min, max) = summary(xs);
        println!("{path} {median:.2} {min:.2} {max:.2}");
    }
    Ok(())
}

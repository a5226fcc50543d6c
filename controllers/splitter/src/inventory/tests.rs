use std::collections::BTreeMap;

use flotilla_api::reasons;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::coverage::{left_out, summary};

fn meta(ns: &str, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        namespace: Some(ns.into()),
        name: Some(name.into()),
        uid: Some(format!("uid-{ns}-{name}")),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

fn item(ns: &str, name: &str, labels: &[(&str, &str)]) -> Item {
    (
        ns.into(),
        name.into(),
        Entry::of(&meta(ns, name, labels), None),
    )
}

/// A state that listed `items`.
fn listed(items: Vec<Item>) -> KindState {
    let mut state = KindState::default();
    assert!(state.apply(watcher::Event::Init).is_empty());
    for i in items {
        assert!(state.apply(watcher::Event::InitApply(i)).is_empty());
    }
    assert!(
        state.apply(watcher::Event::InitDone).is_empty(),
        "the first list starts no pass: the passes that follow the start read it"
    );
    state
}

#[test]
fn a_change_of_what_the_report_reads_names_its_namespace_and_nothing_else_does() {
    let mut state = listed(vec![item("shop", "a", &[("app", "web")])]);
    // The same metadata again (a status or data change): nothing to report anew.
    assert!(
        state
            .apply(watcher::Event::Apply(item("shop", "a", &[("app", "web")])))
            .is_empty()
    );
    // Relabelled: whether a Placement selects it may have changed.
    assert_eq!(
        state.apply(watcher::Event::Apply(item("shop", "a", &[("app", "api")]))),
        vec!["shop".to_string()]
    );
    assert_eq!(
        state.apply(watcher::Event::Apply(item("bank", "a", &[]))),
        vec!["bank".to_string()]
    );
    // Being deleted counts as gone; its deletion then changes nothing more.
    let mut deleting = meta("bank", "a", &[]);
    deleting.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    assert_eq!(
        state.apply(watcher::Event::Apply((
            "bank".into(),
            "a".into(),
            Entry::of(&deleting, None)
        ))),
        vec!["bank".to_string()]
    );
    assert!(
        state
            .apply(watcher::Event::Delete(item("bank", "a", &[])))
            .is_empty()
    );
    assert_eq!(
        state.apply(watcher::Event::Delete(item("shop", "a", &[]))),
        vec!["shop".to_string()]
    );
    assert!(state.objects.is_empty(), "{:?}", state.objects);
}

#[test]
fn a_relist_names_only_the_namespaces_that_differ() {
    let mut state = listed(vec![
        item("shop", "a", &[]),
        item("bank", "b", &[]),
        item("school", "c", &[]),
    ]);
    state.apply(watcher::Event::Init);
    // Until the relist completes, the report reads what the last one had.
    state.apply(watcher::Event::InitApply(item("shop", "a", &[])));
    state.apply(watcher::Event::InitApply(item("bank", "b", &[("x", "y")])));
    state.apply(watcher::Event::InitApply(item("zoo", "z", &[])));
    assert!(state.objects.contains_key("school"));
    assert_eq!(
        state.apply(watcher::Event::InitDone),
        vec!["bank".to_string(), "school".to_string(), "zoo".to_string()]
    );
    assert!(!state.objects.contains_key("school"));
}

fn config_maps() -> ApiResource {
    resource("", "v1", "ConfigMap", "configmaps")
}

fn secrets() -> ApiResource {
    resource("", "v1", "Secret", "secrets")
}

fn inventory(kinds: Vec<(ApiResource, KindState)>) -> Inventory {
    Inventory {
        kinds: kinds
            .into_iter()
            .map(|(ar, s)| (ar, Arc::new(Mutex::new(s))))
            .collect(),
        namespace: None,
    }
}

#[test]
fn a_kind_not_listed_yet_or_refused_is_unreadable_never_empty() {
    let mut refused = KindState::default();
    refused.failed(&watcher::Error::InitialListFailed(kube::Error::Api(
        kube::core::Status::failure("secrets is forbidden", "Forbidden")
            .with_code(403)
            .boxed(),
    )));
    let inventory = inventory(vec![
        (config_maps(), KindState::default()),
        (secrets(), refused),
    ]);
    let (rest, unreadable) = inventory.rest_of_namespace("shop", &[]);
    assert!(rest.is_empty());
    assert_eq!(unreadable.len(), 2, "{unreadable:?}");
    assert!(!unreadable[0].forbidden);
    assert!(
        unreadable[0].message.contains("watch configmaps")
            && unreadable[0].message.contains("not listed them yet"),
        "{}",
        unreadable[0].message
    );
    assert!(unreadable[1].forbidden);
    assert!(
        unreadable[1].message.contains("may not watch secrets"),
        "{}",
        unreadable[1].message
    );
    // One that failed after it listed keeps what it had.
    let mut state = listed(vec![item("shop", "a", &[])]);
    state.failed(&watcher::Error::NoResourceVersion);
    let (rest, unreadable) = inventory_of(state).rest_of_namespace("shop", &[]);
    assert!(unreadable.is_empty());
    assert_eq!(rest[0].objects.len(), 1);
}

fn inventory_of(config_maps_state: KindState) -> Inventory {
    inventory(vec![(config_maps(), config_maps_state)])
}

#[test]
fn the_report_reads_a_namespace_of_the_kinds_the_pass_did_not_list() {
    let mut helm = meta("shop", "sh.helm.release.v1.web.v1", &[("owner", "helm")]);
    helm.labels = None;
    let mut owned = meta("shop", "owned", &[]);
    owned.owner_references = Some(vec![OwnerReference {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: "web".into(),
        uid: "d".into(),
        controller: Some(true),
        ..Default::default()
    }]);
    let mut secret_state = listed(Vec::new());
    for (m, t) in [
        (&helm, "helm.sh/release.v1"),
        (&meta("shop", "token", &[]), "Opaque"),
        (&meta("bank", "token", &[]), "Opaque"),
    ] {
        secret_state.apply(watcher::Event::Apply((
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
            Entry::of(m, Some(t)),
        )));
    }
    let inventory = inventory(vec![
        (
            config_maps(),
            listed(vec![
                item("shop", "settings", &[("app", "web")]),
                ("shop".into(), "owned".into(), Entry::of(&owned, None)),
                item("bank", "settings", &[]),
            ]),
        ),
        (secrets(), secret_state),
    ]);
    // The pass listed the ConfigMaps (a Placement selects them): only the Secrets are added.
    let configmaps = Listed {
        resource: config_maps(),
        objects: Vec::new(),
    };
    let (rest, unreadable) = inventory.rest_of_namespace("shop", std::slice::from_ref(&configmaps));
    assert!(unreadable.is_empty());
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].resource, secrets());
    let names: Vec<String> = rest[0].objects.iter().map(|o| o.name_any()).collect();
    assert_eq!(names, ["sh.helm.release.v1.web.v1", "token"]);

    // What the report makes of them: the Helm record stays on the hub (by its type), the
    // other Secret is not selected; an object with a controller owner is the hub's own.
    let (rest, _) = inventory.rest_of_namespace("shop", &[]);
    let listed: Vec<&Listed> = rest.iter().collect();
    let out = left_out(&listed, &[], &BTreeMap::new(), &[]);
    assert_eq!(
        summary(&out),
        [
            ("ConfigMap", "owned", reasons::MADE_BY_THE_HUB),
            ("ConfigMap", "settings", reasons::NOT_SELECTED),
            (
                "Secret",
                "sh.helm.release.v1.web.v1",
                reasons::MADE_BY_THE_HUB
            ),
            ("Secret", "token", reasons::NOT_SELECTED),
        ]
    );
    assert!(
        out.iter()
            .all(|l| l.uid.as_deref().is_some_and(|u| u.starts_with("uid-shop-"))),
        "each keeps its UID, for its Event"
    );
}

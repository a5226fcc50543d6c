//! `flotilla-negotiator lcd A.yaml B.yaml …`: the CRD the negotiator would publish for the
//! member CRDs in those files, for review in CI before publishing.
//!
//! Each file holds one member's CRDs (multi-document files allowed); CRDs are paired by name. For
//! every CRD that all inputs have, every version all of them serve is negotiated as the
//! negotiator does ([`flotilla_schema::lcd_of_parsed`]) and published as it would be
//! ([`crate::publish::plan`]): the most stable version stores, and a version whose fields differ
//! from the storage version's is left out (the hub converts with None only). Prints the published CRDs as YAML on stdout and, as YAML comments after each, what
//! every input loses in it (the narrowings, with their paths) and what the inputs disagree on.
//! Exit code: 0 when a CRD was negotiated, 2 when none could be (no CRD or version in common, a
//! schema that cannot be read or has no common denominator).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use flotilla_schema::{Limits, Schema, compare_parsed, lcd_of_parsed};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

use crate::compat::read_crds;
use crate::publish::{self, NegotiatedVersion};
use crate::schemas::crd_spec;

/// Flags of `lcd`.
#[derive(clap::Args, Debug, Clone)]
pub struct LcdArgs {
    /// The CRD files of the members, one file per member (at least two).
    #[arg(required = true, num_args = 2..)]
    pub inputs: Vec<PathBuf>,
}

/// One negotiated CRD: what would be published, and what each input gives up for it.
#[derive(Debug)]
pub struct Negotiated {
    pub crd: Value,
    /// Comment lines: per input and version, the narrowings; the disagreements left out.
    pub notes: Vec<String>,
}

/// Runs `lcd`: the published CRDs on stdout, errors on stderr; the exit code.
pub fn run(args: &LcdArgs) -> ExitCode {
    match negotiate(&args.inputs) {
        Ok(negotiated) => {
            for n in &negotiated {
                match serde_saphyr::to_string(&n.crd) {
                    Ok(yaml) => print!("---\n{yaml}"),
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::from(2);
                    }
                }
                for note in &n.notes {
                    println!("# {note}");
                }
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

/// The CRDs the negotiator would publish for the member CRDs in `inputs`.
pub fn negotiate(inputs: &[PathBuf]) -> Result<Vec<Negotiated>, String> {
    let members: Vec<(String, BTreeMap<String, CustomResourceDefinition>)> = inputs
        .iter()
        .map(|p| Ok((p.display().to_string(), read_crds(p)?)))
        .collect::<Result<_, String>>()?;
    let (_, first) = members.first().ok_or("no input")?;
    let limits = Limits::default();
    let mut out = Vec::new();
    for (name, crd) in first {
        if !members.iter().all(|(_, crds)| crds.contains_key(name)) {
            continue;
        }
        let of = |file: &str| -> &CustomResourceDefinition {
            members
                .iter()
                .find(|(f, _)| f == file)
                .and_then(|(_, crds)| crds.get(name))
                .unwrap_or(crd)
        };
        let served_by_all = |version: &str| {
            members.iter().all(|(file, _)| {
                of(file)
                    .spec
                    .versions
                    .iter()
                    .any(|v| v.name == version && v.served)
            })
        };
        let versions: Vec<&str> = crd
            .spec
            .versions
            .iter()
            .filter(|v| v.served && served_by_all(&v.name))
            .map(|v| v.name.as_str())
            .collect();
        if versions.is_empty() {
            return Err(format!("{name}: no version is served by every input"));
        }
        let mut negotiated_versions = Vec::new();
        let mut notes = Vec::new();
        for version in versions {
            let mut schemas = Vec::new();
            for (file, _) in &members {
                let spec = crd_spec(of(file), version)
                    .map_err(|e| format!("{file}: {e}"))?
                    .ok_or_else(|| format!("{file}: {name} does not serve {version}"))?;
                let schema = Schema::from_value_with(&spec.open_api_v3_schema, &limits)
                    .map_err(|e| format!("{file}: {name} {version}: {e}"))?;
                schemas.push((file.as_str(), spec, schema));
            }
            let parsed: Vec<Schema> = schemas.iter().map(|(_, _, s)| s.clone()).collect();
            let lcd = lcd_of_parsed(&parsed)
                .map_err(|e| format!("{name} {version}: the inputs have no common schema: {e}"))?;
            let negotiated = Schema::from_value_with(&lcd.schema, &limits)
                .map_err(|e| format!("{name} {version}: the negotiated schema: {e}"))?;
            for change in &lcd.conflicts {
                let what = if change.kind == flotilla_schema::ChangeKind::ValidationRuleRemoved {
                    "left out"
                } else {
                    "left out, the inputs disagree"
                };
                notes.push(format!(
                    "{name} {version}: {what}: {} {}: {}",
                    change.path, change.kind, change.message
                ));
            }
            for (file, _, schema) in &schemas {
                let lost = compare_parsed(schema, &negotiated);
                if lost.is_identical() {
                    notes.push(format!("{file}: {name} {version}: identical"));
                }
                for c in &lost.changes {
                    notes.push(format!(
                        "{file}: {name} {version}: {} {} ({}): {}",
                        c.path,
                        c.kind,
                        c.verdict.as_str(),
                        c.message
                    ));
                }
            }
            let (_, first_spec, _) = &schemas[0];
            let mut spec = first_spec.clone();
            spec.open_api_v3_schema = lcd.schema;
            negotiated_versions.push(spec);
        }
        // Every input serves every version here: the plan chooses the storage version and
        // leaves out the versions None conversion cannot carry.
        let inputs: std::collections::BTreeSet<String> =
            members.iter().map(|(f, _)| f.clone()).collect();
        let mut all: Vec<NegotiatedVersion<'_>> = negotiated_versions
            .iter()
            .map(|resource| NegotiatedVersion {
                resource,
                clusters: inputs.clone(),
            })
            .collect();
        let publisher = all.remove(0);
        let plan = publish::plan(&publisher, &all, None, &limits);
        for left in &plan.left_out {
            notes.push(format!(
                "{name} {}: not published: {}",
                left.version, left.why
            ));
        }
        out.push(Negotiated {
            crd: plan.crd,
            notes,
        });
    }
    if out.is_empty() {
        return Err("no CustomResourceDefinition is in every input".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(dir: &std::path::Path, file: &str, versions: &[(&str, Value)]) -> PathBuf {
        let versions: Vec<Value> = versions
            .iter()
            .enumerate()
            .map(|(i, (name, props))| {
                serde_json::json!({"name": name, "served": true, "storage": i == 0,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": props}}}}})
            })
            .collect();
        let doc = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                               "listKind": "WidgetList"},
                     "versions": versions}});
        let path = dir.join(file);
        std::fs::write(&path, serde_saphyr::to_string(&doc).expect("yaml")).expect("write");
        path
    }

    #[test]
    fn every_version_all_serve_is_negotiated_and_each_input_says_what_it_loses() {
        let dir = std::env::temp_dir().join(format!("flotilla-lcd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let old = crd(
            &dir,
            "old.yaml",
            &[("v1", serde_json::json!({"a": {"type": "string"}}))],
        );
        let new = crd(
            &dir,
            "new.yaml",
            &[
                (
                    "v1",
                    serde_json::json!({"a": {"type": "string"}, "b": {"type": "integer"}}),
                ),
                ("v2", serde_json::json!({"a": {"type": "string"}})),
            ],
        );
        let out = negotiate(&[old.clone(), new.clone()]).expect("negotiated");
        assert_eq!(out.len(), 1);
        let versions = out[0].crd["spec"]["versions"].as_array().expect("versions");
        // v2 is not served by the old member: only v1 is published, and it stores.
        assert_eq!(versions.len(), 1, "{versions:?}");
        assert_eq!(versions[0]["name"], "v1");
        assert_eq!(versions[0]["storage"], true);
        let props = &versions[0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        assert!(
            props.get("a").is_some() && props.get("b").is_none(),
            "{props}"
        );
        let notes = out[0].notes.join("\n");
        assert!(
            notes.contains("old.yaml: widgets.example.com v1: identical"),
            "{notes}"
        );
        assert!(
            notes.contains("new.yaml: widgets.example.com v1: .spec.b"),
            "{notes}"
        );
        // Nothing in common: an error.
        let other = dir.join("other.yaml");
        std::fs::write(
            &other,
            std::fs::read_to_string(&old)
                .expect("read")
                .replace("widgets.example.com", "gadgets.example.com"),
        )
        .expect("write");
        assert!(negotiate(&[old, other]).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_most_stable_version_stores_and_a_version_with_other_fields_is_left_out() {
        let dir = std::env::temp_dir().join(format!("flotilla-lcd-v-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let a = serde_json::json!({"a": {"type": "string"}});
        let ab = serde_json::json!({"a": {"type": "string"}, "b": {"type": "integer"}});
        // Both inputs store v1beta1 (listed first); v1 has the same fields, v2alpha1 one more.
        let versions = [
            ("v1beta1", a.clone()),
            ("v1", a.clone()),
            ("v2alpha1", ab.clone()),
        ];
        let one = crd(&dir, "one.yaml", &versions);
        let two = crd(&dir, "two.yaml", &versions);
        let out = negotiate(&[one, two]).expect("negotiated");
        let mut got: Vec<(String, bool)> = out[0].crd["spec"]["versions"]
            .as_array()
            .expect("versions")
            .iter()
            .map(|v| {
                (
                    v["name"].as_str().expect("name").to_string(),
                    v["storage"].as_bool().expect("storage"),
                )
            })
            .collect();
        got.sort();
        assert_eq!(
            got,
            [("v1".to_string(), true), ("v1beta1".to_string(), false)]
        );
        let notes = out[0].notes.join("\n");
        assert!(
            notes.contains("widgets.example.com v2alpha1: not published: its fields differ")
                && notes.contains(".spec.b"),
            "{notes}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}

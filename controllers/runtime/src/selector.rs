//! Label selectors in the form `kubectl -l` and the controllers' `--cluster-selector` flags take.
//!
//! The apiserver filters a watch by such a selector; a cache shared by controllers with
//! different selectors (see [`crate::shared`]) filters on the client instead, with kube's
//! [`Selector`]. This parses the string form into one, and refuses at start-up what the
//! apiserver would refuse on the first list.

use std::collections::BTreeSet;

use kube::core::{Expression, Selector};

/// Parses `text`: requirements separated by commas, each `key`, `!key`, `key=value`,
/// `key==value`, `key!=value`, `key in (a,b)` or `key notin (a,b)`. Empty selects everything.
pub fn parse(text: &str) -> Result<Selector, String> {
    let mut selector = Selector::default();
    for requirement in requirements(text)? {
        selector.extend(expression(requirement)?);
    }
    Ok(selector)
}

/// `text` if it parses: a flag's value parser (`#[arg(value_parser = selector::checked)]`), so
/// that a selector the apiserver would refuse stops the controller at start-up, naming it.
pub fn checked(text: &str) -> Result<String, String> {
    parse(text).map(|_| text.to_string())
}

/// `text` split at the commas outside parentheses, trimmed; none if it is blank.
fn requirements(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| format!("unbalanced ')' in label selector {text:?}"))?;
            }
            ',' if depth == 0 => {
                parts.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("unbalanced '(' in label selector {text:?}"));
    }
    parts.push(text[start..].trim());
    if parts == [""] {
        return Ok(Vec::new());
    }
    match parts.iter().find(|p| p.is_empty()) {
        Some(_) => Err(format!("empty requirement in label selector {text:?}")),
        None => Ok(parts),
    }
}

fn expression(requirement: &str) -> Result<Expression, String> {
    let bad = |why: &str| format!("label selector requirement {requirement:?}: {why}");
    if let Some(key) = requirement.strip_prefix('!') {
        return Ok(Expression::DoesNotExist(
            key_of(key.trim()).map_err(|e| bad(&e))?,
        ));
    }
    for (op, make) in [
        (
            "!=",
            Expression::NotEqual as fn(String, String) -> Expression,
        ),
        ("==", Expression::Equal),
        ("=", Expression::Equal),
    ] {
        if let Some((key, value)) = requirement.split_once(op) {
            let key = key_of(key.trim()).map_err(|e| bad(&e))?;
            let value = value.trim();
            if value.contains(['=', '!', '(', ')', ' ']) {
                return Err(bad("the value is not a label value"));
            }
            return Ok(make(key, value.to_string()));
        }
    }
    if requirement.contains(['<', '>']) {
        return Err(bad(
            "'<' and '>' are not supported here; use in, notin, = or !=",
        ));
    }
    let mut words = requirement.splitn(2, char::is_whitespace);
    let key = key_of(words.next().unwrap_or_default()).map_err(|e| bad(&e))?;
    let Some(rest) = words.next().map(str::trim) else {
        return Ok(Expression::Exists(key));
    };
    let (set_op, values) = rest
        .split_once(char::is_whitespace)
        .map(|(op, v)| (op, v.trim()))
        .or_else(|| rest.find('(').map(|i| (rest[..i].trim(), &rest[i..])))
        .ok_or_else(|| bad("expected 'in (…)' or 'notin (…)' after the key"))?;
    let values = values
        .strip_prefix('(')
        .and_then(|v| v.strip_suffix(')'))
        .ok_or_else(|| bad("the values of in/notin go in parentheses"))?;
    let values: BTreeSet<String> = values
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    match set_op {
        "in" if !values.is_empty() => Ok(Expression::In(key, values)),
        "notin" if !values.is_empty() => Ok(Expression::NotIn(key, values)),
        "in" | "notin" => Err(bad("in/notin needs at least one value")),
        other => Err(bad(&format!(
            "unknown operator {other:?} (expected in or notin)"
        ))),
    }
}

fn key_of(key: &str) -> Result<String, String> {
    let valid = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        && key.matches('/').count() <= 1;
    if valid {
        Ok(key.to_string())
    } else {
        Err(format!("{key:?} is not a label key"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::SelectorExt;
    use std::collections::BTreeMap;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_form_kubectl_takes_parses_and_matches_as_the_apiserver_would() {
        let team = labels(&[
            ("team", "a"),
            ("env", "prod"),
            ("e2e.flotilla.dev/syncer", "x1"),
        ]);
        for (selector, matches) in [
            ("", true),
            ("  ", true),
            ("team=a", true),
            ("team==a", true),
            ("team=b", false),
            ("team!=b", true),
            ("missing!=b", true),
            ("team", true),
            ("!team", false),
            ("!missing", true),
            ("env in (prod, staging)", true),
            ("env in(dev)", false),
            ("env notin (dev,staging)", true),
            ("missing notin (dev)", true),
            ("e2e.flotilla.dev/syncer=x1,team=a", true),
            ("e2e.flotilla.dev/syncer=x1, splitter-out!=true", true),
            ("e2e.flotilla.dev/syncer=x1,team=b", false),
            ("team=a,env in (prod),!gone", true),
        ] {
            let parsed = parse(selector).unwrap_or_else(|e| panic!("{selector:?}: {e}"));
            assert_eq!(parsed.matches(&team), matches, "{selector:?}");
        }
    }

    #[test]
    fn what_the_apiserver_would_refuse_is_refused_naming_the_requirement() {
        for (selector, why) in [
            ("team=a,", "empty requirement"),
            ("env in (prod", "unbalanced '('"),
            ("env in prod)", "unbalanced ')'"),
            ("env in ()", "at least one value"),
            ("env within (a)", "unknown operator"),
            ("replicas>1", "not supported"),
            ("a b=c", "not a label key"),
            ("team=a=b", "not a label value"),
        ] {
            let error = parse(selector).expect_err(selector);
            assert!(error.contains(why), "{selector:?}: {error}");
        }
    }
}

//! JSON paths of fields, as printed in every change, conflict and object problem.
//!
//! The notation is the one `kubectl explain` users read and JSONPath users write:
//! `.spec.template.spec.containers[*].image` for a field of every list item,
//! `.metadata.labels.*` for every value of a map, `.spec.ports[2].port` for one item of an
//! object, `["app.kubernetes.io/name"]` for a key that is not a plain identifier, and `.` for
//! the root.

use std::fmt;

/// One step of a [`Path`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Segment {
    /// A named property (or a key of an object's map).
    Field(String),
    /// Every item of a list (`[*]`).
    Items,
    /// Every value of a map (`.*`, a schema's `additionalProperties`).
    Values,
    /// One item of a list in an object (`[3]`).
    Index(usize),
    /// A sub-schema of a keyword, e.g. the second branch of `anyOf` (`.anyOf[1]`).
    Keyword(&'static str, Option<usize>),
}

/// A path from the root of a schema or an object.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Path(Vec<Segment>);

impl Path {
    /// The root (`.`).
    pub fn root() -> Self {
        Self::default()
    }

    /// This path followed by `segment`.
    pub fn join(&self, segment: Segment) -> Self {
        let mut segments = self.0.clone();
        segments.push(segment);
        Self(segments)
    }

    /// This path followed by the property `name`.
    pub fn field(&self, name: &str) -> Self {
        self.join(Segment::Field(name.to_string()))
    }

    /// This path followed by `[*]`.
    pub fn items(&self) -> Self {
        self.join(Segment::Items)
    }

    /// This path followed by `.*`.
    pub fn values(&self) -> Self {
        self.join(Segment::Values)
    }

    /// This path followed by `[index]`.
    pub fn index(&self, index: usize) -> Self {
        self.join(Segment::Index(index))
    }

    /// This path followed by `.keyword` or `.keyword[index]`.
    pub fn keyword(&self, keyword: &'static str, index: Option<usize>) -> Self {
        self.join(Segment::Keyword(keyword, index))
    }

    /// How many segments deep this path is.
    pub fn depth(&self) -> usize {
        self.0.len()
    }

    /// The segments, from the root.
    pub fn segments(&self) -> &[Segment] {
        &self.0
    }
}

/// Whether `name` can be printed as `.name` without quoting.
fn is_plain(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$' || c == '@')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '@' || c == '-')
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str(".");
        }
        for segment in &self.0 {
            match segment {
                Segment::Field(name) if is_plain(name) => write!(f, ".{name}")?,
                Segment::Field(name) => {
                    let quoted = serde_json::Value::String(name.clone());
                    write!(f, "[{quoted}]")?
                }
                Segment::Items => f.write_str("[*]")?,
                Segment::Values => f.write_str(".*")?,
                Segment::Index(i) => write!(f, "[{i}]")?,
                Segment::Keyword(k, None) => write!(f, ".{k}")?,
                Segment::Keyword(k, Some(i)) => write!(f, ".{k}[{i}]")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_like_jsonpath() {
        assert_eq!(Path::root().to_string(), ".");
        let p = Path::root()
            .field("spec")
            .field("containers")
            .items()
            .field("image");
        assert_eq!(p.to_string(), ".spec.containers[*].image");
        let p = Path::root()
            .field("metadata")
            .field("labels")
            .field("app.kubernetes.io/name");
        assert_eq!(
            p.to_string(),
            ".metadata.labels[\"app.kubernetes.io/name\"]"
        );
        let p = Path::root().field("data").values().index(2);
        assert_eq!(p.to_string(), ".data.*[2]");
        let p = Path::root().field("port").keyword("anyOf", Some(1));
        assert_eq!(p.to_string(), ".port.anyOf[1]");
    }
}

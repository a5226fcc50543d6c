//! What an identity may do on a cluster, asked with a SubjectAccessReview.

use anyhow::Result;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

/// One request to authorize: `verb` on `resource` of API `group` (empty for core), in
/// `namespace` (cluster-wide when `None`), on the object `name` (any when `None`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Request<'a> {
    pub verb: &'a str,
    pub group: &'a str,
    pub resource: &'a str,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
}

/// Whether `user` in `groups` may make `request` on the cluster of `client`.
pub async fn allowed(
    client: &Client,
    user: &str,
    groups: &[&str],
    request: Request<'_>,
) -> Result<bool> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: (!groups.is_empty()).then(|| groups.iter().map(|g| g.to_string()).collect()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(request.verb.into()),
                group: Some(request.group.into()),
                resource: Some(request.resource.into()),
                namespace: request.namespace.map(String::from),
                name: request.name.map(String::from),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let result = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(result.status.is_some_and(|s| s.allowed))
}
